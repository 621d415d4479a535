package dev.polylimit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
    void configErrorFromJava() {
        PolylimitException.Config e = assertThrows(PolylimitException.Config.class,
            () -> new Limiter("{\"store\": \"nope://x\", \"policy\": {\"algorithm\": \"gcra\", \"rate\": \"1/s\"}}"));
        assertEquals("store", e.getField());
    }
}
