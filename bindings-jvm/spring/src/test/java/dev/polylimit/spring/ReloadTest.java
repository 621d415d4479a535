package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.polylimit.Limiter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/**
 * The auto-configured filter follows {@code limiter.reload()} of its rules file in a running
 * Spring Boot app (the app of {@link PolylimitFilterTest}, memory store), without a restart: a
 * raised limit holds from the next request, and rules that start reading the route pattern and a
 * header the old rules never read decide the next request by them (the facade asks the core again
 * which headers and whether the route the rules read: nothing it remembered of the old rules stays).
 */
@SpringBootTest(classes = PolylimitFilterTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class ReloadTest {
    /** 2, then 4, a day per client on /api/*: a fixed window of a day, so no boundary falls inside the test. */
    static String byIp(int perDay) {
        return "store: memory\nheaders: legacy\npolicies:\n  api: { algorithm: fixed_window, rate: " + perDay + "/d }\n"
                + "rules:\n  - match: { path: /api/* }\n    key: [ip]\n    policy: api\n";
    }

    /** One a day per X-Client header on the route pattern /api/{name} (every /api/x path is one route). */
    static final String BY_ROUTE_AND_CLIENT = "store: memory\nheaders: legacy\npolicies:\n"
            + "  per_client: { algorithm: fixed_window, rate: 1/d }\n"
            + "rules:\n  - match: { route: \"/api/{name}\" }\n    key: [route, \"header:x-client\"]\n    policy: per_client\n";

    static Path rules;

    @DynamicPropertySource
    static void rulesFile(DynamicPropertyRegistry registry) throws Exception {
        rules = Files.createTempFile("polylimit-spring-reload", ".yaml");
        Files.writeString(rules, byIp(2));
        registry.add("polylimit.rules-file", rules::toString);
    }

    @LocalServerPort
    int port;

    @Autowired
    Limiter limiter;

    private int get(String path, String client) throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .header("X-Client", client).build();
        return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString()).statusCode();
    }

    private List<Integer> statuses(String client, String... paths) throws Exception {
        List<Integer> got = new ArrayList<>();
        for (String path : paths) {
            got.add(get(path, client));
        }
        return got;
    }

    @Test
    void theFilterFollowsAReloadWithoutARestart() throws Exception {
        // The first rules read neither the route nor X-Client (sent on every request: the facade asks about it).
        assertEquals(List.of(200, 200, 429), statuses("c1", "/api/a", "/api/b", "/api/c"));
        Files.writeString(rules, byIp(4));
        limiter.reload();
        // The same window, its count kept: two more.
        assertEquals(List.of(200, 200, 429), statuses("c1", "/api/a", "/api/b", "/api/c"));
        Files.writeString(rules, BY_ROUTE_AND_CLIENT);
        limiter.reload();
        // Keyed by the route pattern and X-Client: /api/a and /api/b are one route, each client has its one.
        assertEquals(List.of(200, 429), statuses("c1", "/api/a", "/api/b"));
        assertEquals(List.of(200, 429), statuses("c2", "/api/c", "/api/a"));
        // No rule matches outside the route: never limited.
        assertEquals(List.of(200, 200), statuses("c1", "/health", "/health"));
    }
}
