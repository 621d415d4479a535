package dev.polylimit.grpc;

import dev.polylimit.Limiter;
import dev.polylimit.PolylimitException;
import io.grpc.BindableService;
import io.grpc.Metadata;
import io.grpc.Server;
import io.grpc.ServerBuilder;
import io.grpc.ServerInterceptors;
import java.io.IOException;

public class DocsExample {
    static final Metadata.Key<String> USER = Metadata.Key.of("x-user", Metadata.ASCII_STRING_MARSHALLER);

    static Server serve(BindableService greeter, int port) throws IOException, PolylimitException {
        Limiter limiter = Limiter.Companion.fromRulesFile("polylimit.yaml");
        PolylimitServerInterceptor polylimit = new PolylimitServerInterceptor(limiter)
                .user((call, metadata) -> metadata.get(USER)); // stands in for your auth
        return ServerBuilder.forPort(port)
                .addService(ServerInterceptors.intercept(greeter, polylimit))
                .build().start();
    }
}
