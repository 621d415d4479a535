package dev.polylimit.grpc;

import static org.junit.jupiter.api.Assertions.assertEquals;

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
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The interceptor on a real Netty server with its default peer (the
 * transport's, {@code /127.0.0.1:port}: one client), under a concurrency
 * limit of one call in flight: a server stream holds its slot until it ends,
 * and a client's cancel or a handler's exception gives the slot back.
 */
class GrpcInterceptorTest {
    static final String RULES = """
            {"store": "memory", "policies": {"one": {"algorithm": "concurrency", "limit": 1, "lease": "60s"}},
             "rules": [{"match": {"path": "/demo.S/*"}, "key": ["ip"], "policy": "one"}]}""";

    Limiter limiter;
    Server server;
    ManagedChannel channel;
    /** Completes the open stream's handler. */
    volatile CompletableFuture<Void> release = new CompletableFuture<>();

    static final MethodDescriptor<byte[], byte[]> STREAM = GrpcVectorsTest.method("demo.S/Stream").toBuilder()
            .setType(MethodDescriptor.MethodType.SERVER_STREAMING).build();
    static final MethodDescriptor<byte[], byte[]> FAIL = GrpcVectorsTest.method("demo.S/Fail");

    @BeforeEach
    void start() throws Exception {
        limiter = Limiter.Companion.fromRules(RULES);
        ServerServiceDefinition service = ServerServiceDefinition.builder("demo.S")
                .addMethod(STREAM, ServerCalls.asyncServerStreamingCall((byte[] in, io.grpc.stub.StreamObserver<byte[]> out) -> {
                    out.onNext(new byte[] {1});
                    release.thenRun(out::onCompleted);
                }))
                .addMethod(FAIL, ServerCalls.asyncUnaryCall((byte[] in, io.grpc.stub.StreamObserver<byte[]> out) -> {
                    throw new IllegalStateException("the handler failed");
                }))
                .build();
        server = Grpc.newServerBuilderForPort(0, InsecureServerCredentials.create())
                .addService(ServerInterceptors.intercept(service, new PolylimitServerInterceptor(limiter))).build().start();
        channel = Grpc.newChannelBuilderForAddress("127.0.0.1", server.getPort(), InsecureChannelCredentials.create()).build();
    }

    @AfterEach
    void stop() throws Exception {
        channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        server.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
        limiter.close();
    }

    /** Starts a call; its first message (or its end) completes `first`, its status `closed`. */
    private ClientCall<byte[], byte[]> call(MethodDescriptor<byte[], byte[]> method, CompletableFuture<Object> first,
            CompletableFuture<Status> closed) {
        ClientCall<byte[], byte[]> call = channel.newCall(method, CallOptions.DEFAULT);
        call.start(new ClientCall.Listener<>() {
            @Override
            public void onMessage(byte[] message) {
                first.complete(message);
            }

            @Override
            public void onClose(Status status, Metadata trailers) {
                first.complete(status);
                closed.complete(status);
            }
        }, new Metadata());
        call.sendMessage(new byte[0]);
        call.halfClose();
        call.request(10);
        return call;
    }

    private Status.Code code(MethodDescriptor<byte[], byte[]> method) throws Exception {
        CompletableFuture<Status> closed = new CompletableFuture<>();
        ClientCall<byte[], byte[]> c = call(method, new CompletableFuture<>(), closed);
        Status.Code got = closed.get(10, TimeUnit.SECONDS).getCode();
        return got;
    }

    /** Opens a stream, waits for its first message (it holds the slot), and returns its status to come. */
    private CompletableFuture<Status> openStream(ClientCall<byte[], byte[]>[] holder) throws Exception {
        CompletableFuture<Object> first = new CompletableFuture<>();
        CompletableFuture<Status> closed = new CompletableFuture<>();
        holder[0] = call(STREAM, first, closed);
        assertEquals(byte[].class, first.get(10, TimeUnit.SECONDS).getClass(), "the stream's first message");
        return closed;
    }

    @Test
    void aStreamHoldsItsSlotUntilItEnds() throws Exception {
        @SuppressWarnings("unchecked")
        ClientCall<byte[], byte[]>[] open = new ClientCall[1];
        CompletableFuture<Status> ended = openStream(open);
        assertEquals(Status.Code.RESOURCE_EXHAUSTED, code(STREAM), "a second stream while the first is open");
        release.complete(null);
        assertEquals(Status.Code.OK, ended.get(10, TimeUnit.SECONDS).getCode());
        release = new CompletableFuture<>();
        openStream(open);
        release.complete(null);
    }

    @Test
    void aClientCancelGivesTheSlotBack() throws Exception {
        @SuppressWarnings("unchecked")
        ClientCall<byte[], byte[]>[] open = new ClientCall[1];
        openStream(open);
        open[0].cancel("the client leaves", null);
        // The server sees the cancel asynchronously: the slot is back within moments, never after the lease.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        CompletableFuture<Status> next;
        while (true) {
            CompletableFuture<Object> first = new CompletableFuture<>();
            next = new CompletableFuture<>();
            open[0] = call(STREAM, first, next);
            if (first.get(10, TimeUnit.SECONDS) instanceof byte[]) {
                break;
            }
            assertEquals(Status.Code.RESOURCE_EXHAUSTED, ((Status) first.get()).getCode());
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the cancelled stream's slot was not given back");
            }
            Thread.sleep(20);
        }
        release.complete(null);
        assertEquals(Status.Code.OK, next.get(10, TimeUnit.SECONDS).getCode());
    }

    @Test
    void aHandlerErrorGivesTheSlotBack() throws Exception {
        assertEquals(Status.Code.UNKNOWN, code(FAIL));
        assertEquals(Status.Code.UNKNOWN, code(FAIL), "the failed call's slot was given back");
        release.complete(null);
        assertEquals(Status.Code.OK, code(STREAM));
    }
}
