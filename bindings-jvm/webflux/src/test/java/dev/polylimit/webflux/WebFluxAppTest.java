package dev.polylimit.webflux;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;

/**
 * The docs' example app (DocsExample) with the auto-configured filter on a
 * real Netty port: the rule matches and keys on the route pattern WebFlux's
 * own handler mapping resolves (/api/a, /api/b, /api/c share /api/{name}'s 3
 * per minute), and the UserResolver bean keys the per-user rule.
 */
@SpringBootTest(classes = DocsExample.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "polylimit.rules-file=src/test/resources/polylimit-test.yaml")
class WebFluxAppTest {
    @LocalServerPort
    int port;

    private HttpResponse<String> get(String path, String... headers) throws Exception {
        var request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path));
        if (headers.length > 0) {
            request.headers(headers);
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void theRoutePatternAndTheUserKeyTheRules() throws Exception {
        // Two per user: carol's third is refused by the per-user rule, dave has his own.
        List<Integer> statuses = new ArrayList<>();
        for (String name : new String[] {"a", "b", "c"}) {
            statuses.add(get("/api/" + name, "X-User", "carol").statusCode());
        }
        assertEquals(List.of(200, 200, 429), statuses);
        // The route's 3 per minute, shared by every path of /api/{name}: a and b spent two, this is the third.
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
