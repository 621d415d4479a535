package dev.polylimit.webflux;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.polylimit.webflux.ExchangeResolvers.CostResolver;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Cost through the auto-configured WebFilter on a real Netty port (memory store, POST /llm:
 * 1000 a day per X-Api-Key, {@code cost: header:x-reserve}, {@code max_cost: 500}): the handler
 * reports the actual cost in the exchange attribute {@link PolylimitWebFilter#COST_ATTRIBUTE}
 * (X-Actual-Cost here) and the filter settles with it, so the core charges the difference past the
 * reservation, gives it back, or caps it at max_cost; a {@link CostResolver} bean (X-Estimate)
 * gives the reservation instead of the header, bounded by max_cost. Each remaining count after a
 * settlement is read from a follow-up request reserving 1 and reporting 1.
 */
@SpringBootTest(classes = WebFluxCostTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "polylimit.rules-file=src/test/resources/polylimit-cost.yaml")
class WebFluxCostTest {
    @SpringBootConfiguration
    @EnableAutoConfiguration
    @RestController
    static class App {
        /** An LLM-style endpoint: reports X-Actual-Cost as the request's actual cost ("text": not a cost). */
        @PostMapping("/llm")
        Mono<String> llm(ServerWebExchange exchange) {
            String actual = exchange.getRequest().getHeaders().getFirst("X-Actual-Cost");
            return Mono.fromSupplier(() -> {
                if ("text".equals(actual)) {
                    exchange.getAttributes().put(PolylimitWebFilter.COST_ATTRIBUTE, actual);
                } else if (actual != null) {
                    exchange.getAttributes().put(PolylimitWebFilter.COST_ATTRIBUTE, Long.parseLong(actual));
                }
                return "answered";
            });
        }

        @Bean
        CostResolver cost() {
            return exchange -> {
                String estimate = exchange.getRequest().getHeaders().getFirst("X-Estimate");
                return estimate == null ? null : Long.valueOf(estimate);
            };
        }
    }

    @LocalServerPort
    int port;

    HttpResponse<String> llm(String apiKey, String reserve, String actual, String... more) throws Exception {
        List<String> headers = new ArrayList<>(List.of("X-Api-Key", apiKey, "X-Reserve", reserve));
        if (actual != null) {
            headers.addAll(List.of("X-Actual-Cost", actual));
        }
        headers.addAll(List.of(more));
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/llm"))
                .headers(headers.toArray(String[]::new)).POST(HttpRequest.BodyPublishers.noBody()).build();
        return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
    }

    private static int remaining(HttpResponse<String> got) {
        assertEquals(200, got.statusCode(), got.body());
        return Integer.parseInt(got.headers().firstValue("X-RateLimit-Remaining").orElseThrow());
    }

    /** The key's remaining count after a follow-up request that reserves 1 and reports 1. */
    private int remainingAfterOne(String apiKey) throws Exception {
        return remaining(llm(apiKey, "1", "1"));
    }

    @Test
    void aLargerActualCostIsChargedPastTheReservation() throws Exception {
        assertEquals(900, remaining(llm("team-more", "100", "300"))); // checked for its reservation only
        assertEquals(1000 - 300 - 1, remainingAfterOne("team-more"));
    }

    @Test
    void aSmallerActualCostGivesTheDifferenceBack() throws Exception {
        assertEquals(800, remaining(llm("team-less", "200", "50")));
        assertEquals(1000 - 50 - 1, remainingAfterOne("team-less"));
    }

    @Test
    void theActualCostIsCappedAtMaxCost() throws Exception {
        assertEquals(990, remaining(llm("team-cap", "10", "9999")));
        assertEquals(1000 - 500 - 1, remainingAfterOne("team-cap"));
    }

    @Test
    void aCostThatIsNoWholeNumberLeavesTheReservation() throws Exception {
        assertEquals(880, remaining(llm("team-none", "120", null)));
        assertEquals(1000 - 120 - 1, remainingAfterOne("team-none"));
        assertEquals(879 - 30, remaining(llm("team-none", "30", "text")));
        assertEquals(879 - 30 - 1, remainingAfterOne("team-none"));
        // A negative one is refused by the core (logged) and the request completed without it.
        assertEquals(848 - 40, remaining(llm("team-none", "40", "-5")));
        assertEquals(848 - 40 - 1, remainingAfterOne("team-none"));
    }

    @Test
    void theCostFunctionGivesTheReservationBoundedByMaxCost() throws Exception {
        assertEquals(750, remaining(llm("team-fn", "5", null, "X-Estimate", "250")));
        HttpResponse<String> bad = llm("team-fn", "5", null, "X-Estimate", "501");
        assertEquals(400, bad.statusCode(), bad.body());
        assertTrue(bad.body().contains("\"error\":\"invalid_cost\""), bad.body());
        assertTrue(bad.body().contains("\"field\":\"cost\""), bad.body());
        // Nothing was charged; without an estimate the rule's header is the reservation.
        assertEquals(745, remaining(llm("team-fn", "5", null)));
    }
}
