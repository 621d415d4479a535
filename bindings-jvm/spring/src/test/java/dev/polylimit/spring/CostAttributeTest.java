package dev.polylimit.spring;

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
 * The handler's reported actual cost ({@link PolylimitFilter#COST_ATTRIBUTE}) in a real Spring
 * Boot app on a loopback port (the app of {@link PolylimitFilterTest}, memory store): POST /llm
 * reserves its X-Reserve header ({@code cost: header:x-reserve}, {@code max_cost: 500}, 1000 a
 * day per X-Api-Key) and reports X-Actual-Cost; the filter completes with it and the core
 * reconciles: the difference is given back, or charged past the reservation, capped at max_cost.
 * Each remaining count is read from a follow-up request reserving 1 and reporting 1.
 */
@SpringBootTest(classes = PolylimitFilterTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = "polylimit.rules-file=src/test/resources/polylimit-test.yaml")
class CostAttributeTest {
    @LocalServerPort
    int port;

    private HttpResponse<String> llm(String apiKey, String reserve, String actual) throws Exception {
        List<String> headers = new ArrayList<>(List.of("X-Api-Key", apiKey));
        if (reserve != null) {
            headers.addAll(List.of("X-Reserve", reserve));
        }
        if (actual != null) {
            headers.addAll(List.of("X-Actual-Cost", actual));
        }
        HttpRequest request = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/llm"))
                .headers(headers.toArray(String[]::new))
                .POST(HttpRequest.BodyPublishers.noBody())
                .build();
        return HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
    }

    /** The key's remaining count after a follow-up request that reserves 1 and reports 1. */
    private int remainingAfterOne(String apiKey) throws Exception {
        HttpResponse<String> got = llm(apiKey, "1", "1");
        assertEquals(200, got.statusCode(), got.body());
        return Integer.parseInt(got.headers().firstValue("X-RateLimit-Remaining").orElseThrow());
    }

    private static void assertRemaining(int want, HttpResponse<String> got) {
        assertEquals(200, got.statusCode(), got.body());
        assertEquals("answered", got.body());
        assertEquals(String.valueOf(want), got.headers().firstValue("X-RateLimit-Remaining").orElse(null));
    }

    @Test
    void aLargerActualCostIsChargedPastTheReservation() throws Exception {
        assertRemaining(900, llm("team-more", "100", "300")); // checked for its reservation only
        assertEquals(1000 - 300 - 1, remainingAfterOne("team-more")); // then charged 300 in all
    }

    @Test
    void aSmallerActualCostGivesTheDifferenceBack() throws Exception {
        assertRemaining(800, llm("team-less", "200", "50"));
        assertEquals(1000 - 50 - 1, remainingAfterOne("team-less"));
    }

    @Test
    void theActualCostIsCappedAtMaxCost() throws Exception {
        assertRemaining(990, llm("team-cap", "10", "9999"));
        assertEquals(1000 - 500 - 1, remainingAfterOne("team-cap"));
    }

    @Test
    void noReportedCostLeavesTheReservation() throws Exception {
        assertRemaining(880, llm("team-none", "120", null));
        assertEquals(1000 - 120 - 1, remainingAfterOne("team-none"));
        // A reported cost that is not a whole number is ignored (logged): the reservation stands.
        assertRemaining(879 - 30, llm("team-none", "30", "text"));
        assertEquals(879 - 30 - 1, remainingAfterOne("team-none"));
        // A negative one is refused by the core (logged) and the request completed without it.
        assertRemaining(848 - 40, llm("team-none", "40", "-5"));
        assertEquals(848 - 40 - 1, remainingAfterOne("team-none"));
    }

    @Test
    void aBadReservationIsTheCores400() throws Exception {
        HttpResponse<String> bad = llm("team-bad", "abc", "10");
        assertEquals(400, bad.statusCode(), bad.body());
        assertTrue(bad.body().contains("\"error\":\"invalid_cost\""), bad.body());
        assertTrue(bad.body().contains("\"field\":\"header:x-reserve\""), bad.body());
        assertTrue(bad.body().contains("\"max_cost\":500"), bad.body());
        assertTrue(bad.headers().firstValue("X-RateLimit-Remaining").isEmpty(), bad.headers().toString());
        HttpResponse<String> tooMuch = llm("team-bad", "501", null);
        assertEquals(400, tooMuch.statusCode(), tooMuch.body());
        // Nothing was charged.
        assertEquals(1000 - 1, remainingAfterOne("team-bad"));
    }
}
