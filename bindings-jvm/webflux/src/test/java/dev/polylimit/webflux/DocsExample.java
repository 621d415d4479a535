package dev.polylimit.webflux;

import dev.polylimit.webflux.ExchangeResolvers.UserResolver;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Mono;

// polylimit-webflux on the class path; polylimit.rules-file (default polylimit.yaml) holds the rules.
@SpringBootApplication
@RestController
public class DocsExample {
    @Bean
    UserResolver user() { // the rules' `user` dimension: stands in for your auth
        return exchange -> exchange.getRequest().getHeaders().getFirst("X-User");
    }

    @GetMapping("/api/{name}")
    Mono<String> hello(@PathVariable String name) {
        return Mono.just("hello " + name);
    }
}
