package dev.polylimit.testkit;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

/**
 * A real redis-server for the framework modules' tests (the core module's
 * RedisServer.kt, in Java): a free loopback port, no persistence, waited for
 * with PING, killed by its pid.
 */
public final class RedisServer implements AutoCloseable {
    public final int port;
    private final Process process;

    public RedisServer() throws IOException, InterruptedException {
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        process = new ProcessBuilder("redis-server", "--port", "" + port, "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--protected-mode", "no")
                .redirectOutput(ProcessBuilder.Redirect.to(new File("/dev/null")))
                .redirectError(ProcessBuilder.Redirect.to(new File("/dev/null")))
                .start();
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!"+PONG".equals(command("PING"))) {
            if (!process.isAlive() || System.nanoTime() > deadline) {
                close();
                throw new IllegalStateException("redis-server on port " + port + " did not answer PING");
            }
            Thread.sleep(20);
        }
    }

    /**
     * Waits (at most 10 s) until {@code limiter}'s store decides its checks: a limiter connects to
     * Redis lazily, and while it connects its local fallback decides, which a test's exact counts
     * cannot allow. Asks with peeks (nothing is charged); waits for the connection, not for time.
     */
    public static void connected(dev.polylimit.Limiter limiter) throws InterruptedException, dev.polylimit.PolylimitException {
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!"store".equals(limiter.peek("polylimit-test-connected", null, null).getSource())) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the limiter's store did not answer within 10 s");
            }
            Thread.sleep(20);
        }
    }

    public String url() {
        return "redis://127.0.0.1:" + port;
    }

    /** One inline command, its first reply line; null when the server cannot be reached. */
    public String command(String line) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress("127.0.0.1", port), 500);
            s.setSoTimeout(500);
            s.getOutputStream().write((line + "\r\n").getBytes(StandardCharsets.UTF_8));
            return new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8)).readLine();
        } catch (IOException e) {
            return null;
        }
    }

    /** SIGKILL by pid, then reaped. */
    @Override
    public void close() throws IOException, InterruptedException {
        if (process.isAlive()) {
            new ProcessBuilder("kill", "-KILL", "" + process.pid()).start().waitFor();
            process.waitFor();
        }
    }
}
