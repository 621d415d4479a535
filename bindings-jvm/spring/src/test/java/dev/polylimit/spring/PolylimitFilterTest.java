package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.polylimit.Header;
import dev.polylimit.Limiter;
import dev.polylimit.Outcome;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.HandlerExecutionChain;
import org.springframework.web.servlet.HandlerMapping;

/**
 * The auto-configured filter in a real Spring Boot app on a loopback port:
 * the rule matches and keys on the route pattern Spring MVC resolves, so
 * /api/a, /api/b, /api/c share /api/{name}'s 3 per minute and the fourth path
 * is refused with the core's 429, headers and JSON body. (Without the route
 * the rule matches nothing and all four pass.) The app's {@link UserResolver}
 * {@link ApiKeyResolver} and {@link KeyResolver} beans (the X-User, X-Api-Key
 * and X-Tenant headers) key the rules on /me, /keyed and /tenant; /client
 * is keyed by the X-Client header itself (the filter packs the headers the
 * core says it reads, and only those).
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "polylimit.rules-file=src/test/resources/polylimit-test.yaml")
class PolylimitFilterTest {
    @SpringBootApplication
    @RestController
    static class App {
        @GetMapping("/api/{name}")
        String hello(@PathVariable String name) {
            return "hello " + name;
        }

        @GetMapping("/health")
        String health() {
            return "ok";
        }

        @GetMapping({"/me", "/keyed", "/tenant", "/client"})
        String me() {
            return "ok";
        }

        /**
         * An LLM-style endpoint: reports the actual cost it reads from the X-Actual-Cost header
         * ({@link PolylimitFilter#COST_ATTRIBUTE}, a Long; "text" sets a String, which is not a cost).
         * The body is written unflushed, so the client sees the response only once the filter has
         * completed the request.
         */
        @PostMapping("/llm")
        void llm(HttpServletRequest request, HttpServletResponse response) throws java.io.IOException {
            String actual = request.getHeader("X-Actual-Cost");
            if ("text".equals(actual)) {
                request.setAttribute(PolylimitFilter.COST_ATTRIBUTE, actual);
            } else if (actual != null) {
                request.setAttribute(PolylimitFilter.COST_ATTRIBUTE, Long.parseLong(actual));
            }
            response.setContentType("text/plain");
            response.getWriter().write("answered");
        }

        @GetMapping("/boom")
        String boom() {
            throw new IllegalStateException("boom");
        }

        /** Counts the dispatcher's and the filter's handler lookups per URI (finds nothing itself). */
        @Bean
        Lookups lookups() {
            return new Lookups();
        }

        @Bean
        UserResolver user() {
            return request -> request.getHeader("X-User");
        }

        @Bean
        ApiKeyResolver apiKey() {
            return request -> request.getHeader("X-Api-Key");
        }

        @Bean
        KeyResolver key() {
            return request -> request.getHeader("X-Tenant");
        }

        public static void main(String[] args) {
            SpringApplication.run(App.class, args);
        }
    }

    static final class Lookups implements HandlerMapping, Ordered {
        final Map<String, AtomicInteger> byUri = new ConcurrentHashMap<>();

        @Override
        public HandlerExecutionChain getHandler(HttpServletRequest request) {
            byUri.computeIfAbsent(request.getRequestURI(), u -> new AtomicInteger()).incrementAndGet();
            return null;
        }

        @Override
        public int getOrder() {
            return Ordered.HIGHEST_PRECEDENCE + 1;
        }

        int of(String uri) {
            AtomicInteger n = byUri.get(uri);
            return n == null ? 0 : n.get();
        }
    }

    @LocalServerPort
    int port;

    @Autowired
    Lookups lookups;

    private HttpResponse<String> get(String path, String... headers) throws Exception {
        var client = HttpClient.newHttpClient();
        var request = java.net.http.HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path));
        if (headers.length > 0) {
            request.headers(headers);
        }
        return client.send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    private List<Integer> statuses(int count, String path, String... headers) throws Exception {
        var got = new java.util.ArrayList<Integer>();
        for (int i = 0; i < count; i++) {
            got.add(get(path, headers).statusCode());
        }
        return got;
    }

    @Test
    void theRoutePatternKeysAndTheCoreAnswers() throws Exception {
        for (String name : new String[] {"a", "b", "c"}) {
            HttpResponse<String> ok = get("/api/" + name);
            assertEquals(200, ok.statusCode(), ok.body());
            assertEquals("hello " + name, ok.body());
            assertEquals("3", ok.headers().firstValue("X-RateLimit-Limit").orElse(null));
        }
        HttpResponse<String> refused = get("/api/d");
        assertEquals(429, refused.statusCode(), refused.body());
        assertTrue(refused.headers().firstValue("Retry-After").isPresent(), refused.headers().toString());
        assertEquals("0", refused.headers().firstValue("X-RateLimit-Remaining").orElse(null));
        assertTrue(refused.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
        assertTrue(refused.body().startsWith("{"), refused.body());
        // No rule matches /health: never limited.
        assertEquals(200, get("/health").statusCode());
    }

    @Test
    void theFilterAndTheDispatcherLookTheHandlerUpOnce() throws Exception {
        // The filter finds the route (a rule reads it) and hands the handler to the dispatcher.
        int before = lookups.of("/health");
        assertEquals(200, get("/health").statusCode());
        assertEquals(before + 1, lookups.of("/health"));
        // An error dispatch is looked up afresh: Spring Boot's error controller answers, not the failed handler.
        int boom = lookups.of("/boom");
        int error = lookups.of("/error");
        HttpResponse<String> failed = get("/boom");
        assertEquals(500, failed.statusCode(), failed.body());
        assertTrue(failed.body().contains("\"path\":\"/boom\""), failed.body());
        assertEquals(boom + 1, lookups.of("/boom"));
        assertEquals(error + 1, lookups.of("/error"));
    }

    @Test
    void theUserApiKeyAndKeyHooksKeyTheirRules() throws Exception {
        // 2 per minute per user: alice's third is refused, bob has his own 2.
        assertEquals(List.of(200, 200, 429), statuses(3, "/me", "X-User", "alice"));
        assertEquals("0", get("/me", "X-User", "alice").headers().firstValue("X-RateLimit-Remaining").orElse(null));
        assertEquals(List.of(200, 200, 429), statuses(3, "/me", "X-User", "bob"));
        // Anonymous (no user): the rule keyed by user skips the request.
        assertEquals(List.of(200, 200, 200, 200), statuses(4, "/me"));
        assertTrue(get("/me").headers().firstValue("X-RateLimit-Limit").isEmpty());
        // An empty user is no user (the core's rule, as in every language): skipped, no shared bucket.
        assertEquals(List.of(200, 200, 200, 200), statuses(4, "/me", "X-User", ""));
        // The api_key rule reads the API key hook, not the user.
        assertEquals(List.of(200, 200, 429), statuses(3, "/keyed", "X-Api-Key", "k1", "X-User", "carol"));
        assertEquals(List.of(200, 200), statuses(2, "/keyed", "X-Api-Key", "k2", "X-User", "carol"));
        // The key hook: the application's own key.
        assertEquals(List.of(200, 200, 429), statuses(3, "/tenant", "X-Tenant", "t1"));
        assertEquals(List.of(200, 200), statuses(2, "/tenant", "X-Tenant", "t2"));
    }

    @Test
    void aHeaderTheRulesReadIsPackedAndTheOutcomeIsTheCores() throws Exception {
        // 2 per minute per X-Client value: the header reaches the core (a rule whose key is missing skips the request).
        assertEquals(List.of(200, 200, 429), statuses(3, "/client", "X-Client", "c1", "Accept", "text/plain"));
        assertEquals(List.of(200, 200), statuses(2, "/client", "x-client", "c2"));
        // The response's headers are the core's, as its checkRequest answers them for the same request.
        try (Limiter limiter = Limiter.Companion.fromRulesFile("src/test/resources/polylimit-test.yaml")) {
            for (String name : new String[] {"c3", "c3", "c3"}) {
                HttpResponse<String> got = get("/client", "X-Client", name);
                Outcome want = limiter.checkRequest(new dev.polylimit.HttpRequest("GET", "/client", null, "127.0.0.1",
                        List.of(new Header("X-Client", name)), null, null, null, null, null, false, false));
                assertEquals(want.getStatus() == null ? 200 : want.getStatus(), got.statusCode());
                for (Header h : want.getHeaders()) {
                    String value = h.getValue();
                    // The clock may have moved on by a second between the two calls: compare the static ones.
                    if (h.getName().equalsIgnoreCase("X-RateLimit-Limit") || h.getName().equalsIgnoreCase("X-RateLimit-Remaining")) {
                        assertEquals(value, got.headers().firstValue(h.getName()).orElse(null), h.getName());
                    } else {
                        assertTrue(got.headers().firstValue(h.getName()).isPresent(), h.getName());
                    }
                }
            }
        }
    }
}
