package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;

/**
 * The auto-configured filter in a real Spring Boot app on a loopback port:
 * the rule matches and keys on the route pattern Spring MVC resolves, so
 * /api/a, /api/b, /api/c share /api/{name}'s 3 per minute and the fourth path
 * is refused with the core's 429, headers and JSON body. (Without the route
 * the rule matches nothing and all four pass.)
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

        public static void main(String[] args) {
            SpringApplication.run(App.class, args);
        }
    }

    @LocalServerPort
    int port;

    private HttpResponse<String> get(String path) throws Exception {
        var client = HttpClient.newHttpClient();
        var request = java.net.http.HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).build();
        return client.send(request, HttpResponse.BodyHandlers.ofString());
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
}
