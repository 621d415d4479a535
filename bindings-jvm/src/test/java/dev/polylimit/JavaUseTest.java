package dev.polylimit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
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
    void alertsAndRetryArithmeticFromJava() throws Exception {
        List<AnomalyEvent> seen = new CopyOnWriteArrayList<>();
        CountDownLatch both = new CountDownLatch(2);
        String adaptive = "{\"policy\": {\"rate\": \"1000/s\", \"adaptive\": {\"window\": \"1s\", \"horizon\": \"4s\", \"factor\": 3, \"floor\": \"4/s\"}}}";
        try (Limiter limiter = new Limiter(adaptive)) {
            limiter.onAnomaly(event -> {
                seen.add(event);
                both.countDown();
            });
            for (long t = 0; t < 4000; t += 500) limiter.check("k", 1L, t);
            for (int i = 0; i < 6; i++) limiter.check("k", 1L, 4000L);
            limiter.check("k", 1L, 7000L);
            assertTrue(both.await(5, TimeUnit.SECONDS), seen.toString());
            assertEquals(List.of("limit", "restore"), List.of(seen.get(0).getAction(), seen.get(1).getAction()));
        }
        RetryPolicy policy = new RetryPolicy(3, 60000L, 120000L, 0.1, null, false);
        assertEquals(2100L, Polylimit_jvmKt.retryWait(policy, "GET", 429, "2", 0, 0L, 0L, 0.5));
        assertEquals(null, Polylimit_jvmKt.retryWait(policy, "GET", 500, "2", 0, 0L, 0L, 0.5));
    }

    @Test
    void everyFutureTheReadmeListsFromJava() throws Exception {
        String options = "{\"policy\": {\"algorithm\": \"concurrency\", \"limit\": 1, \"lease\": \"30s\"}}";
        try (Limiter limiter = new Limiter(options)) {
            Acquired held = LimiterFutures.acquireFuture(limiter, "k", null, 0L).get(10, TimeUnit.SECONDS);
            assertTrue(held.getDecision().getAllowed());
            assertEquals(1L, LimiterFutures.releaseFuture(held.getLease(), 1L).get(10, TimeUnit.SECONDS));
        }
        String rules = "{\"rules\": {\"policies\": {\"api\": {\"algorithm\": \"fixed_window\", \"rate\": \"1/s\"}},"
            + " \"rules\": [{\"name\": \"all\", \"key\": [\"ip\"], \"policy\": \"api\"}]}, \"overrides\": true}";
        try (Limiter limiter = new Limiter(rules)) {
            HttpRequest request = new HttpRequest("GET", "/x", null, "10.0.0.1", List.of(), null, null, null, null, 1000L, false, false);
            limiter.checkRequest(request);
            assertEquals(429, LimiterFutures.peekRequestFuture(limiter, request).get(10, TimeUnit.SECONDS).getStatus());
            assertEquals(1L, LimiterFutures.resetRequestFuture(limiter, request).get(10, TimeUnit.SECONDS));
            assertEquals(null, limiter.peekRequest(request).getStatus());
            Override set = LimiterFutures.setOverrideFuture(limiter, "k", "2/s").get(10, TimeUnit.SECONDS);
            assertEquals(2L, set.getLimit());
            assertEquals(set, LimiterFutures.getOverrideFuture(limiter, "k").get(10, TimeUnit.SECONDS));
            assertTrue(LimiterFutures.removeOverrideFuture(limiter, "k").get(10, TimeUnit.SECONDS));
        }
        try (CircuitBreaker breaker = new CircuitBreaker(1L, "1h", 1L)) {
            assertEquals("failed: down", Breakers.call(breaker, () -> { throw new IllegalStateException("down"); },
                e -> "failed: " + e.getMessage()));
            assertEquals("open", breaker.state());
        }
    }

    @Test
    void configErrorFromJava() {
        PolylimitException.Config e = assertThrows(PolylimitException.Config.class,
            () -> new Limiter("{\"store\": \"nope://x\", \"policy\": {\"algorithm\": \"gcra\", \"rate\": \"1/s\"}}"));
        assertEquals("store", e.getField());
    }
}
