package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import dev.polylimit.Limiter;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import jakarta.servlet.ServletException;
import org.junit.jupiter.api.Test;
import org.springframework.mock.web.MockFilterChain;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.mock.web.MockHttpServletResponse;

/**
 * A request held by a shaping delay holds its concurrency slot; when its
 * thread is interrupted while held (issue 32 item 5: the servlet container
 * gives up on it), the filter settles it as no response and the slot comes
 * back at once, not when the 30 s lease ends.
 */
class ShapingInterruptTest {
    private static final String RULES = String.join("\n",
            "store: memory",
            "headers: none",
            "policies:",
            "  shaped: { algorithm: leaky_bucket, mode: shape, rate: 1/10s, burst: 1, max_delay: 1m }",
            "  inflight: { algorithm: concurrency, limit: 1, lease: 30s }",
            "rules:",
            "  - match: { path: /slow }",
            "    key: [ip]",
            "    policy: [shaped, inflight]",
            "  - match: { path: /other }",
            "    key: [ip]",
            "    policy: inflight",
            "");

    private static MockHttpServletResponse send(PolylimitFilter filter, String path) throws Exception {
        MockHttpServletRequest request = new MockHttpServletRequest("GET", path);
        request.setRemoteAddr("203.0.113.7");
        MockHttpServletResponse response = new MockHttpServletResponse();
        filter.doFilter(request, response, new MockFilterChain());
        return response;
    }

    @Test
    void aRequestInterruptedWhileShapedGivesItsSlotBack() throws Exception {
        try (Limiter limiter = Limiter.Companion.fromRules(RULES)) {
            PolylimitFilter filter = new PolylimitFilter(limiter, List::of);
            // The first request drips out at once and ends: its slot is released.
            assertEquals(200, send(filter, "/slow").getStatus());
            // The second waits 10 s for the bucket, holding the one slot.
            CompletableFuture<Throwable> second = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    send(filter, "/slow");
                    second.complete(null);
                } catch (Throwable e) {
                    second.complete(e);
                }
            });
            t.start();
            // Once it sleeps in the filter, it holds the slot: /other is refused.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (t.getState() != Thread.State.TIMED_WAITING) {
                if (System.nanoTime() > deadline) {
                    throw new AssertionError("the second request was not held: " + second.getNow(null));
                }
                Thread.onSpinWait();
            }
            assertEquals(429, send(filter, "/other").getStatus());
            t.interrupt();
            assertInstanceOf(ServletException.class, second.get(5, TimeUnit.SECONDS));
            // Nothing in flight now: the slot is free.
            assertEquals(200, send(filter, "/other").getStatus());
        }
    }
}
