package dev.polylimit.webflux;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.TestConfiguration;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.web.reactive.HandlerMapping;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;

/**
 * The docs' example app (DocsExample) with the auto-configured filter on a
 * real Netty port: the rule matches and keys on the route pattern WebFlux's
 * own handler mapping resolves (every /api/x shares /api/{name}'s 4 per
 * minute), the UserResolver bean keys the per-user rule, and the handler the
 * filter finds is the one the dispatcher uses (one lookup per request).
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
@SpringBootTest(classes = {DocsExample.class, WebFluxAppTest.Counting.class}, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "polylimit.rules-file=src/test/resources/polylimit-test.yaml")
class WebFluxAppTest {
    @LocalServerPort
    int port;

    @Autowired
    Lookups lookups;

    /** Counts the filter's and the dispatcher's handler lookups per path (finds nothing itself). */
    static final class Lookups implements HandlerMapping, Ordered {
        final Map<String, AtomicInteger> byPath = new ConcurrentHashMap<>();

        @Override
        public Mono<Object> getHandler(ServerWebExchange exchange) {
            byPath.computeIfAbsent(exchange.getRequest().getPath().value(), p -> new AtomicInteger()).incrementAndGet();
            return Mono.empty();
        }

        @Override
        public int getOrder() {
            return Ordered.HIGHEST_PRECEDENCE + 1;
        }
    }

    @TestConfiguration
    static class Counting {
        @Bean
        Lookups lookups() {
            return new Lookups();
        }
    }

    @Test
    @Order(1)
    void theFilterAndTheDispatcherLookTheHandlerUpOnce() throws Exception {
        assertEquals(200, get("/api/once", "X-User", "frank").statusCode());
        assertEquals(1, lookups.byPath.get("/api/once").get());
    }

    private HttpResponse<String> get(String path, String... headers) throws Exception {
        var request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path));
        if (headers.length > 0) {
            request.headers(headers);
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    @Order(2)
    void theRoutePatternAndTheUserKeyTheRules() throws Exception {
        // Two per user: carol's third is refused by the per-user rule, dave has his own.
        List<Integer> statuses = new ArrayList<>();
        for (String name : new String[] {"a", "b", "c"}) {
            statuses.add(get("/api/" + name, "X-User", "carol").statusCode());
        }
        assertEquals(List.of(200, 200, 429), statuses);
        // The route's 4 per minute, shared by every path of /api/{name}: /api/once, a and b spent three, this is the fourth.
        HttpResponse<String> third = get("/api/d", "X-User", "dave");
        assertEquals(200, third.statusCode(), third.body());
        assertEquals("hello d", third.body());
        HttpResponse<String> refused = get("/api/e", "X-User", "erin");
        assertEquals(429, refused.statusCode());
        assertTrue(refused.headers().firstValue("Retry-After").isPresent());
        assertTrue(refused.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
        assertTrue(refused.body().startsWith("{\"error\":\"rate_limit_exceeded\""), refused.body());
    }
}
