package dev.polylimit.example;

import com.google.protobuf.StringValue;
import dev.polylimit.Limiter;
import dev.polylimit.grpc.PolylimitServerInterceptor;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.ServerServiceDefinition;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.protobuf.ProtoUtils;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;

/**
 * The gRPC demo services (examples/grpc/greeter.proto: Greeter and Llm) on grpc-java, every call
 * decided by the shared rules file (POLYLIMIT_RULES, default ../polylimit.yaml)
 * through the polylimit-grpc interceptor; 127.0.0.1:PORT. Built by hand from
 * the well-known StringValue: no code generation.
 */
public final class GreeterServer {
    static final MethodDescriptor.Marshaller<StringValue> STRING = ProtoUtils.marshaller(StringValue.getDefaultInstance());

    static final MethodDescriptor<StringValue, StringValue> HELLO = MethodDescriptor.<StringValue, StringValue>newBuilder(STRING, STRING)
            .setType(MethodDescriptor.MethodType.UNARY).setFullMethodName("polylimit.demo.Greeter/Hello").build();

    static final MethodDescriptor<StringValue, StringValue> HELLO_STREAM = MethodDescriptor.<StringValue, StringValue>newBuilder(STRING, STRING)
            .setType(MethodDescriptor.MethodType.SERVER_STREAMING).setFullMethodName("polylimit.demo.Greeter/HelloStream").build();

    static final MethodDescriptor<StringValue, StringValue> GENERATE = MethodDescriptor.<StringValue, StringValue>newBuilder(STRING, STRING)
            .setType(MethodDescriptor.MethodType.UNARY).setFullMethodName("polylimit.demo.Llm/Generate").build();

    static final Metadata.Key<String> ACTUAL_COST = Metadata.Key.of("x-actual-cost", Metadata.ASCII_STRING_MARSHALLER);

    /** The call's x-actual-cost metadata, for the Llm service's handler (a handler sees no metadata). */
    static final Context.Key<String> ACTUAL = Context.key("x-actual-cost");

    static final Metadata.Key<String> USER = Metadata.Key.of("x-user", Metadata.ASCII_STRING_MARSHALLER);

    static StringValue text(String s) {
        return StringValue.newBuilder().setValue(s).build();
    }

    public static void main(String[] args) throws Exception {
        Limiter limiter = Limiter.Companion.fromRulesFile(System.getenv().getOrDefault("POLYLIMIT_RULES", "../polylimit.yaml"));
        int port = Integer.parseInt(System.getenv().getOrDefault("PORT", "50051"));
        ServerServiceDefinition greeter = ServerServiceDefinition.builder("polylimit.demo.Greeter")
                .addMethod(HELLO, ServerCalls.asyncUnaryCall((StringValue name, StreamObserver<StringValue> out) -> {
                    out.onNext(text("hello, " + name.getValue()));
                    out.onCompleted();
                }))
                .addMethod(HELLO_STREAM, ServerCalls.asyncServerStreamingCall((StringValue name, StreamObserver<StringValue> out) -> {
                    for (int i = 0; i < 3; i++) {
                        out.onNext(text("hello, " + name.getValue() + " " + i));
                    }
                    out.onCompleted();
                }))
                .build();
        // An LLM-style call (its own service, so the Greeter's rules do not match it): the tokens
        // the model used (here the x-actual-cost metadata) are reported as the call's actual cost.
        ServerServiceDefinition llm = ServerServiceDefinition.builder("polylimit.demo.Llm")
                .addMethod(GENERATE, ServerCalls.asyncUnaryCall((StringValue prompt, StreamObserver<StringValue> out) -> {
                    String actual = ACTUAL.get();
                    if (actual != null) {
                        PolylimitServerInterceptor.reportCost(Long.parseLong(actual));
                    }
                    out.onNext(text("generated, " + prompt.getValue()));
                    out.onCompleted();
                }))
                .build();
        ServerInterceptor actualCost = new ServerInterceptor() {
            @Override
            public <Q, A> ServerCall.Listener<Q> interceptCall(ServerCall<Q, A> call, Metadata md, ServerCallHandler<Q, A> next) {
                return Contexts.interceptCall(Context.current().withValue(ACTUAL, md.get(ACTUAL_COST)), call, md, next);
            }
        };
        // The rules' `user` dimension from the x-user metadata: stands in for your auth.
        PolylimitServerInterceptor polylimit = new PolylimitServerInterceptor(limiter).user((call, md) -> md.get(USER));
        // Loopback only, like the other example apps.
        Server running = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", port))
                .addService(ServerInterceptors.intercept(greeter, polylimit))
                .addService(ServerInterceptors.intercept(llm, actualCost, polylimit)).build().start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            running.shutdownNow();
            limiter.close();
        }));
        running.awaitTermination();
    }
}
