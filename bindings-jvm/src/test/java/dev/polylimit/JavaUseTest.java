package dev.polylimit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The API as Java code sees it: blocking calls, boxed nullable numbers, checked exceptions. */
class JavaUseTest {
    @Test
    void checkFromJava() throws PolylimitException {
        try (Limiter limiter = new Limiter("{\"policy\": {\"algorithm\": \"token_bucket\", \"rate\": \"1/s\", \"burst\": 1}}")) {
            Decision first = limiter.check("user:1", 1L, 0L);
            assertTrue(first.getAllowed());
            assertEquals(0L, first.getRemaining());
            Decision second = limiter.check("user:1", 1L, 0L);
            assertFalse(second.getAllowed());
            assertEquals(1000L, second.getRetryAfterMs());
        }
    }

    @Test
    void futuresAndRulesFilesFromJava() throws Exception {
        String rules = System.getProperty("polylimit.repo") + "/examples/polylimit.yaml";
        try (Limiter keys = Limiter.Companion.fromRules("policies: {api: {algorithm: gcra, rate: 1/s, burst: 3}}")) {
            Decision d = LimiterFutures.checkFuture(keys, "user:1").get(10, TimeUnit.SECONDS);
            assertTrue(d.getAllowed());
            assertEquals(2L, d.getRemaining());
        }
        try (Limiter limiter = Limiter.Companion.fromRulesFile(rules)) {
            HttpRequest request = new HttpRequest("GET", "/api/x", null, "203.0.113.7", List.of(), null, null, null, null, 0L, false, false);
            Outcome outcome = LimiterFutures.checkRequestFuture(limiter, request).get(10, TimeUnit.SECONDS);
            assertEquals(null, outcome.getStatus());
            assertTrue(outcome.getHeaders().size() > 0, outcome.toString());
        }
    }

    @Test
    void configErrorFromJava() {
        PolylimitException.Config e = assertThrows(PolylimitException.Config.class,
            () -> new Limiter("{\"store\": \"nope://x\", \"policy\": {\"algorithm\": \"gcra\", \"rate\": \"1/s\"}}"));
        assertEquals("store", e.getField());
    }
}
