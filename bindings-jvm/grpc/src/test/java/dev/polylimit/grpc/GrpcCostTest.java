package dev.polylimit.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import dev.polylimit.Limiter;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerInterceptors;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.stub.ServerCalls;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import dev.polylimit.testkit.RedisServer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A handler reports its call's actual cost with {@link PolylimitServerInterceptor#reportCost}
 * (the message carries it here) on a real Netty server, memory store: demo.L/Llm reserves its
 * x-reserve metadata (1000 a day per x-api-key, {@code max_cost: 500}); the interceptor settles the
 * call with the reported cost as it closes with OK, and the core charges the difference past the
 * reservation, gives it back, or caps it at max_cost. Each remaining count after a settlement is
 * read from a follow-up call reserving 1 and reporting 1 (its x-ratelimit-remaining header). On
 * the memory store and a real redis-server (whose completions finish after the call: the
 * settlement holds the status until they have).
 */
class GrpcCostTest {
    static final String RULES = """
            {"store": "%s", "headers": "legacy", %s
             "policies": {"llm": {"algorithm": "token_bucket", "rate": "1000/d"}},
             "rules": [{"match": {"path": "/demo.L/*"}, "key": ["header:x-api-key"], "policy": "llm",
                        "cost": "header:x-reserve", "max_cost": 500}]}""";

    static final MethodDescriptor<byte[], byte[]> LLM = GrpcVectorsTest.method("demo.L/Llm");

    Limiter limiter;
    Server server;
    ManagedChannel channel;

    static RedisServer redis;

    @BeforeAll
    static void startRedis() throws Exception {
        redis = new RedisServer();
    }

    @AfterAll
    static void stopRedis() throws Exception {
        redis.close();
    }

    void start(String store) throws Exception {
        limiter = Limiter.Companion.fromRules(RULES.formatted("redis".equals(store) ? redis.url() : store,
                // On Redis a generous timeout: a loaded machine's completion slower than 100 ms would be given up.
                "redis".equals(store) ? "\"timeout\": \"5s\"," : ""));
        RedisServer.connected(limiter); // on Redis: its first checks would be the local fallback's
        ServerServiceDefinition service = ServerServiceDefinition.builder("demo.L")
                .addMethod(LLM, ServerCalls.asyncUnaryCall((byte[] in, io.grpc.stub.StreamObserver<byte[]> out) -> {
                    String actual = new String(in, StandardCharsets.US_ASCII);
                    if (!actual.isEmpty()) {
                        PolylimitServerInterceptor.reportCost(Long.parseLong(actual));
                    }
                    out.onNext(new byte[] {1});
                    out.onCompleted();
                }))
                .build();
        server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
                .addService(ServerInterceptors.intercept(service, new PolylimitServerInterceptor(limiter))).build().start();
        channel = Grpc.newChannelBuilderForAddress("127.0.0.1", server.getPort(), InsecureChannelCredentials.create()).build();
    }

    @AfterEach
    void stop() throws Exception {
        if (channel == null) {
            return;
        }
        channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        limiter.close();
    }

    /** Calls demo.L/Llm; the x-ratelimit-remaining header of its OK answer. */
    private int remaining(String apiKey, String reserve, String actual) throws Exception {
        Metadata headers = new Metadata();
        headers.put(Metadata.Key.of("x-api-key", Metadata.ASCII_STRING_MARSHALLER), apiKey);
        headers.put(Metadata.Key.of("x-reserve", Metadata.ASCII_STRING_MARSHALLER), reserve);
        CompletableFuture<Metadata> answered = new CompletableFuture<>();
        CompletableFuture<Status> closed = new CompletableFuture<>();
        ClientCall<byte[], byte[]> call = channel.newCall(LLM, CallOptions.DEFAULT);
        call.start(new ClientCall.Listener<>() {
            @Override
            public void onHeaders(Metadata metadata) {
                answered.complete(metadata);
            }

            @Override
            public void onClose(Status status, Metadata trailers) {
                answered.complete(trailers);
                closed.complete(status);
            }
        }, headers);
        call.sendMessage(actual == null ? new byte[0] : actual.getBytes(StandardCharsets.US_ASCII));
        call.halfClose();
        call.request(1);
        Status status = closed.get(10, TimeUnit.SECONDS);
        assertEquals(Status.Code.OK, status.getCode(), status.toString());
        String left = answered.get().get(Metadata.Key.of("x-ratelimit-remaining", Metadata.ASCII_STRING_MARSHALLER));
        return Integer.parseInt(left);
    }

    @ParameterizedTest
    @ValueSource(strings = {"memory", "redis"})
    void aLargerActualCostIsChargedPastTheReservation(String store) throws Exception {
        start(store);
        assertEquals(900, remaining("team-more", "100", "300"));
        assertEquals(1000 - 300 - 1, remaining("team-more", "1", "1"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"memory", "redis"})
    void aSmallerActualCostGivesTheDifferenceBack(String store) throws Exception {
        start(store);
        assertEquals(800, remaining("team-less", "200", "50"));
        assertEquals(1000 - 50 - 1, remaining("team-less", "1", "1"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"memory", "redis"})
    void theActualCostIsCappedAtMaxCostAndNoReportLeavesTheReservation(String store) throws Exception {
        start(store);
        assertEquals(990, remaining("team-cap", "10", "9999"));
        assertEquals(1000 - 500 - 1, remaining("team-cap", "1", "1"));
        assertEquals(880, remaining("team-none", "120", null));
        assertEquals(1000 - 120 - 1, remaining("team-none", "1", "1"));
    }

    @Test
    void reportCostOutsideACallRecordsNothing() {
        assertFalse(PolylimitServerInterceptor.reportCost(5));
    }
}
