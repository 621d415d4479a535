package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import org.junit.jupiter.api.Test;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.boot.test.context.TestConfiguration;

/**
 * A {@link CostResolver} bean gives the auto-configured filter each request's cost (the X-Estimate
 * header here), in a real Spring Boot app (the app of {@link PolylimitFilterTest}, memory store,
 * POST /llm: 1000 a day per X-Api-Key, {@code max_cost: 500}): it replaces the rule's
 * {@code cost: header:x-reserve}, and the core bounds it by {@code max_cost} (a 400 naming
 * {@code cost}, nothing charged). Without it the request costs the rule's header.
 */
@SpringBootTest(classes = {PolylimitFilterTest.App.class, CostFunctionTest.Estimates.class},
        webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "polylimit.rules-file=src/test/resources/polylimit-test.yaml")
class CostFunctionTest {
    @TestConfiguration
    static class Estimates {
        @Bean
        CostResolver cost() {
            return request -> {
                String estimate = request.getHeader("X-Estimate");
                return estimate == null ? null : Long.valueOf(estimate);
            };
        }
    }

    @LocalServerPort
    int port;

    private HttpResponse<String> llm(String apiKey, String estimate) throws Exception {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/llm"))
                .header("X-Api-Key", apiKey).header("X-Reserve", "5").POST(HttpRequest.BodyPublishers.noBody());
        if (estimate != null) {
            request.header("X-Estimate", estimate);
        }
        return HttpClient.newHttpClient().send(request.build(), HttpResponse.BodyHandlers.ofString());
    }

    private static String remaining(HttpResponse<String> got) {
        assertEquals(200, got.statusCode(), got.body());
        return got.headers().firstValue("X-RateLimit-Remaining").orElse(null);
    }

    @Test
    void theCostFunctionGivesTheReservation() throws Exception {
        assertEquals("750", remaining(llm("team-fn", "250")));
        // Without an estimate: the rule's cost (X-Reserve: 5).
        assertEquals("745", remaining(llm("team-fn", null)));
    }

    @Test
    void aCostAboveMaxCostIsTheCores400() throws Exception {
        HttpResponse<String> bad = llm("team-fn-bad", "501");
        assertEquals(400, bad.statusCode(), bad.body());
        assertTrue(bad.body().contains("\"error\":\"invalid_cost\""), bad.body());
        assertTrue(bad.body().contains("\"field\":\"cost\""), bad.body());
        // Nothing was charged.
        assertEquals("995", remaining(llm("team-fn-bad", null)));
    }
}
