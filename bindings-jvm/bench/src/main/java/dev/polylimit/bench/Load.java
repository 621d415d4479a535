package dev.polylimit.bench;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;

/**
 * The HTTP load generator: {@code connections} keep-alive HTTP/1.1
 * connections on loopback from one thread (NIO), each sending its next GET as
 * soon as the previous answer is complete, for a fixed time. Runs in the
 * bench process, never in the server's. Every answer must be a 200 with a
 * Content-Length.
 */
final class Load {
    private static final byte[] REQUEST =
            "GET /api/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".getBytes(StandardCharsets.US_ASCII);

    private Load() {}

    /** What one run did: answers completed and their rate. */
    record Result(long requests, double rate) {}

    /** {@code connections} connections loading the server for {@code seconds}; throws on any non-200 answer. */
    static Result run(int port, int connections, double seconds) throws IOException {
        long[] done = {0};
        long elapsed = drive(port, connections, (long) (seconds * 1e9), done);
        return new Result(done[0], done[0] / (elapsed / 1e9));
    }

    /** One GET; true when the server answered 200 (false when it refused the connection). */
    static boolean ready(int port) {
        try {
            drive(port, 1, 0, new long[1]);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    private static final class Conn {
        final SocketChannel channel;
        ByteBuffer in = ByteBuffer.allocate(16 * 1024);

        Conn(SocketChannel channel) {
            this.channel = channel;
        }
    }

    private static long drive(int port, int connections, long nanos, long[] done) throws IOException {
        try (Selector selector = Selector.open()) {
            Conn[] conns = new Conn[connections];
            try {
                for (int i = 0; i < connections; i++) {
                    SocketChannel ch = SocketChannel.open(new InetSocketAddress("127.0.0.1", port));
                    ch.setOption(java.net.StandardSocketOptions.TCP_NODELAY, true);
                    ch.configureBlocking(false);
                    conns[i] = new Conn(ch);
                    ch.register(selector, SelectionKey.OP_READ, conns[i]);
                }
                long start = System.nanoTime();
                long deadline = start + nanos;
                for (Conn c : conns) {
                    send(c);
                }
                int open = connections;
                while (open > 0) {
                    selector.select(100);
                    for (SelectionKey key : selector.selectedKeys()) {
                        Conn c = (Conn) key.attachment();
                        if (!answered(c)) {
                            continue;
                        }
                        done[0]++;
                        if (System.nanoTime() < deadline) {
                            send(c);
                        } else {
                            key.cancel();
                            open--;
                        }
                    }
                    selector.selectedKeys().clear();
                }
                return Math.max(System.nanoTime() - start, 1);
            } finally {
                for (Conn c : conns) {
                    if (c != null) {
                        c.channel.close();
                    }
                }
            }
        }
    }

    private static void send(Conn c) throws IOException {
        ByteBuffer out = ByteBuffer.wrap(REQUEST);
        while (out.hasRemaining()) {
            c.channel.write(out);
        }
    }

    /** Reads what arrived; true when one whole answer is in (and consumed). */
    private static boolean answered(Conn c) throws IOException {
        if (c.channel.read(c.in) < 0) {
            throw new IOException("the server closed a keep-alive connection");
        }
        byte[] b = c.in.array();
        int n = c.in.position();
        int head = -1;
        for (int i = 3; i < n; i++) {
            if (b[i] == '\n' && b[i - 1] == '\r' && b[i - 2] == '\n' && b[i - 3] == '\r') {
                head = i + 1;
                break;
            }
        }
        if (head < 0) {
            return false;
        }
        String text = new String(b, 0, head, StandardCharsets.ISO_8859_1);
        if (!text.startsWith("HTTP/1.1 200")) {
            throw new IOException("answer not 200: " + text.strip());
        }
        int length = -1;
        for (String line : text.split("\r\n")) {
            if (line.regionMatches(true, 0, "content-length:", 0, 15)) {
                length = Integer.parseInt(line.substring(15).trim());
            }
        }
        if (length < 0) {
            throw new IOException("answer without Content-Length: " + text.strip());
        }
        if (n < head + length) {
            return false;
        }
        c.in.flip();
        c.in.position(head + length);
        c.in.compact();
        return true;
    }
}
