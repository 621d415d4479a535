package dev.polylimit.grpc;

import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.polylimit.Limiter;
import dev.polylimit.testkit.RedisServer;
import dev.polylimit.testkit.Vectors;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.Grpc;
import io.grpc.HandlerRegistry;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.InternalMetadata;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptors;
import io.grpc.ServerMethodDefinition;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The gRPC conformance vectors (tests/conformance/grpc) through the
 * interceptor on a real grpc-java (Netty) server on loopback, on memory and
 * on a real redis-server. Every method name reaches one handler (a fallback
 * registry, intercepted): it sends its response headers, then closes the call
 * with the step's `complete` code, or waits for its `of` step. The peer,
 * user, API key, key, cost and clock come from the interceptor's hooks. What
 * the client receives (the code, the status message, the header metadata and
 * the trailers the interceptor sent, not the transport's) and the delay
 * waited must be the vector's.
 */
class GrpcVectorsTest {
    static RedisServer redis;
    static final AtomicLong prefixes = new AtomicLong();
    /** The transport's own metadata, not the interceptor's. */
    static final Set<String> TRANSPORT = Set.of("content-type", "grpc-encoding", "grpc-accept-encoding", "grpc-status",
            "grpc-message", "date");

    @BeforeAll
    static void startRedis() throws Exception {
        redis = new RedisServer();
    }

    @AfterAll
    static void stopRedis() throws Exception {
        redis.close();
    }

    @Test
    void memory() throws Exception {
        play("memory");
    }

    @Test
    void redis() throws Exception {
        play(redis.url());
    }

    static final MethodDescriptor.Marshaller<byte[]> BYTES = new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
            return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream stream) {
            try {
                return stream.readAllBytes();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    };

    static MethodDescriptor<byte[], byte[]> method(String fullName) {
        return MethodDescriptor.<byte[], byte[]>newBuilder(BYTES, BYTES).setType(MethodDescriptor.MethodType.UNARY)
                .setFullMethodName(fullName).build();
    }

    /** Runs at once what the interceptor schedules, adding up the delays asked for. */
    static final class Timer extends ScheduledThreadPoolExecutor {
        final AtomicLong waited = new AtomicLong();

        Timer() {
            super(1);
        }

        @Override
        public ScheduledFuture<?> schedule(Runnable command, long delay, TimeUnit unit) {
            waited.addAndGet(unit.toMillis(delay));
            return super.schedule(command, 0, unit);
        }
    }

    /** What the client saw of one call. */
    static final class Seen extends ClientCall.Listener<byte[]> {
        final CompletableFuture<List<List<String>>> headers = new CompletableFuture<>();
        final CompletableFuture<Object[]> closed = new CompletableFuture<>();

        @Override
        public void onHeaders(Metadata md) {
            headers.complete(pairs(md));
        }

        @Override
        public void onClose(Status status, Metadata trailers) {
            headers.complete(List.of());
            closed.complete(new Object[] {status, pairs(trailers)});
        }
    }

    /** The metadata's pairs in wire order (Metadata.keys() is a set), the transport's own left out. */
    static List<List<String>> pairs(Metadata md) {
        List<List<String>> out = new ArrayList<>();
        byte[][] wire = InternalMetadata.serialize(md);
        for (int i = 0; i + 1 < wire.length; i += 2) {
            String k = new String(wire[i], StandardCharsets.US_ASCII);
            if (!TRANSPORT.contains(k) && !k.endsWith(Metadata.BINARY_HEADER_SUFFIX)) {
                out.add(List.of(k, new String(wire[i + 1], StandardCharsets.US_ASCII)));
            }
        }
        return out;
    }

    private void play(String store) throws Exception {
        List<String> failures = new ArrayList<>();
        int played = 0;
        for (Vectors.Case c : Vectors.cases("grpc")) {
            String prefix = "grpc-java-" + ProcessHandle.current().pid() + "-" + prefixes.incrementAndGet();
            try (Limiter limiter = new Limiter(c.options(store, prefix))) {
                played += playCase(c, limiter, failures);
            }
        }
        assertTrue(played > 30, "played " + played);
        if (!failures.isEmpty()) {
            fail(failures.size() + " mismatches on " + store + ":\n" + String.join("\n", failures));
        }
    }

    private int playCase(Vectors.Case c, Limiter limiter, List<String> failures) throws Exception {
        AtomicReference<Vectors.Request> current = new AtomicReference<>();
        Map<Integer, CompletableFuture<Integer>> answers = new ConcurrentHashMap<>();
        Map<Integer, CompletableFuture<Void>> reached = new ConcurrentHashMap<>();
        Timer timer = new Timer();
        PolylimitServerInterceptor interceptor = new PolylimitServerInterceptor(limiter)
                .user((call, md) -> current.get().user())
                .apiKey((call, md) -> current.get().apiKey())
                .key((call, md) -> current.get().key())
                .cost((call, md) -> current.get().cost())
                .peer((call, md) -> current.get().peer())
                .clock(() -> current.get().nowMs())
                .timer(timer);
        Metadata.Key<String> stepKey = Metadata.Key.of("x-vector-step", Metadata.ASCII_STRING_MARSHALLER);
        ServerCallHandler<byte[], byte[]> handler = (call, headers) -> {
            int i = Integer.parseInt(headers.get(stepKey));
            call.sendHeaders(new Metadata());
            reached.get(i).complete(null);
            answers.get(i).thenAccept(code -> {
                if (code == 0) {
                    call.sendMessage(new byte[0]); // a unary call's OK carries its response
                }
                call.close(Status.fromCodeValue(code), new Metadata());
            });
            call.request(1);
            return new ServerCall.Listener<>() {};
        };
        HandlerRegistry any = new HandlerRegistry() {
            @Override
            public ServerMethodDefinition<?, ?> lookupMethod(String name, String authority) {
                String service = MethodDescriptor.extractFullServiceName(name);
                ServerServiceDefinition def = ServerServiceDefinition.builder(service == null ? "" : service)
                        .addMethod(method(name), handler).build();
                return ServerInterceptors.intercept(def, interceptor).getMethod(name);
            }
        };
        Server server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create()).fallbackHandlerRegistry(any)
                .build().start();
        ManagedChannel channel = Grpc.newChannelBuilderForAddress("127.0.0.1", server.getPort(),
                InsecureChannelCredentials.create()).build();
        int played = 0;
        Map<Integer, Seen> calls = new HashMap<>();
        List<ClientCall<byte[], byte[]>> open = new ArrayList<>();
        try {
            for (int i = 0; i < c.steps().size(); i++) {
                Vectors.Step step = c.steps().get(i);
                String where = c + " step " + i;
                if (step.of() != null) {
                    CompletableFuture<Integer> answer = answers.get(step.of());
                    if (answer == null || !reached.get(step.of()).isDone()) {
                        failures.add(where + ": call " + step.of() + " did not reach its handler");
                        continue;
                    }
                    answer.complete(step.complete());
                    calls.get(step.of()).closed.get(10, TimeUnit.SECONDS);
                    continue;
                }
                if (step.peek()) {
                    continue;
                }
                Vectors.Request r = step.request();
                current.set(r);
                timer.waited.set(0);
                answers.put(i, new CompletableFuture<>());
                reached.put(i, new CompletableFuture<>());
                if (step.hasComplete()) {
                    answers.get(i).complete(step.complete() == null ? Status.Code.CANCELLED.value() : step.complete());
                }
                String name = r.path().startsWith("/") ? r.path().substring(1) : r.path();
                ClientCall<byte[], byte[]> call = channel.newCall(method(name), CallOptions.DEFAULT);
                Metadata md = new Metadata();
                md.put(stepKey, "" + i);
                for (Map.Entry<String, String> h : r.headers()) {
                    md.put(Metadata.Key.of(h.getKey(), Metadata.ASCII_STRING_MARSHALLER), h.getValue());
                }
                Seen seen = new Seen();
                calls.put(i, seen);
                call.start(seen, md);
                call.sendMessage(new byte[0]);
                call.halfClose();
                call.request(1);
                open.add(call);
                // Through (its handler sent its headers) or refused (closed): then what the client saw.
                CompletableFuture.anyOf(reached.get(i), seen.closed).get(10, TimeUnit.SECONDS);
                List<List<String>> headers = seen.headers.get(10, TimeUnit.SECONDS);
                boolean through = reached.get(i).isDone();
                Object[] closed = through && !step.hasComplete() ? null : seen.closed.get(10, TimeUnit.SECONDS);
                played++;
                Vectors.Expect want = step.expect();
                Integer status = through ? null : ((Status) closed[0]).getCode().value();
                String body = through ? null : ((Status) closed[0]).getDescription();
                Object trailers = closed == null || through ? List.of() : closed[1];
                var have = List.of(String.valueOf(status), headers, String.valueOf(body), trailers, timer.waited.get());
                var expect = List.of(String.valueOf(want.status()), want.headers(), String.valueOf(want.body()),
                        want.trailers() == null ? List.of() : want.trailers(), want.delayMs());
                if (!have.equals(expect)) {
                    failures.add(where + ": expected " + expect + ", got " + have);
                }
            }
        } finally {
            open.forEach(call -> call.cancel("the case ended", null));
            channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
            server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
            timer.shutdownNow();
        }
        return played;
    }
}
