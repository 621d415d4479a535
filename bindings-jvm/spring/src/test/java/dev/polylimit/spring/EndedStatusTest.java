package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.polylimit.Limiter;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.mock.web.MockFilterChain;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.mock.web.MockHttpServletResponse;

/**
 * The status a request ends with is the core's rule (SPEC §6, {@code endedStatus}):
 * under {@code count: successful} a handler that answered 200 is charged even if it
 * then threw or the client left (the container's broken-pipe IOException), so
 * neither makes requests free; one that threw before writing is no response.
 */
class EndedStatusTest {
    private static final String RULES = String.join("\n",
            "store: memory",
            "headers: none",
            "policies:",
            "  ok_only: { algorithm: fixed_window, rate: 2/h }",
            "rules:",
            "  - match: { path: /x }",
            "    key: [ip]",
            "    policy: ok_only",
            "    count: successful",
            "");

    /** A handler that answers 200 (committed) if {@code answers}, then throws {@code after}. */
    private static HttpServlet handler(Exception after, boolean answers) {
        return new HttpServlet() {
            @Override
            protected void service(HttpServletRequest req, HttpServletResponse resp) throws IOException {
                if (answers) {
                    resp.setStatus(200);
                    resp.getWriter().write("ok");
                    resp.flushBuffer();
                }
                if (after instanceof IOException io) {
                    throw io;
                }
                throw (RuntimeException) after;
            }
        };
    }

    /** The filter's status for one request (429: refused), the handler's exception swallowed. */
    private static int send(PolylimitFilter filter, HttpServlet servlet) throws Exception {
        MockHttpServletRequest request = new MockHttpServletRequest("GET", "/x");
        request.setRemoteAddr("203.0.113.9");
        MockHttpServletResponse response = new MockHttpServletResponse();
        try {
            filter.doFilter(request, response, new MockFilterChain(servlet));
        } catch (IOException | RuntimeException e) {
            // the handler's failure, passed on by the filter
        }
        return response.getStatus();
    }

    private static List<Integer> statuses(HttpServlet servlet) throws Exception {
        try (Limiter limiter = Limiter.Companion.fromRules(RULES)) {
            PolylimitFilter filter = new PolylimitFilter(limiter, List::of);
            return List.of(send(filter, servlet), send(filter, servlet), send(filter, servlet));
        }
    }

    @Test
    void aHandlerThatAnsweredThenThrewIsChargedAsItsStatus() throws Exception {
        assertEquals(List.of(200, 200, 429), statuses(handler(new IllegalStateException("after the answer"), true)));
    }

    @Test
    void aClientGoneAfterTheAnswerIsChargedAsItsStatus() throws Exception {
        assertEquals(List.of(200, 200, 429), statuses(handler(new IOException("Broken pipe"), true)));
    }

    @Test
    void aHandlerThatThrewBeforeWritingIsNoResponse() throws Exception {
        // Never charged: the container answers 500 on its own, the filter saw no response.
        assertEquals(List.of(200, 200, 200), statuses(handler(new IllegalStateException("before"), false)));
    }

    @Test
    void theFilterPassesTheHandlersExceptionOn() throws Exception {
        try (Limiter limiter = Limiter.Companion.fromRules(RULES)) {
            PolylimitFilter filter = new PolylimitFilter(limiter, List::of);
            MockHttpServletRequest request = new MockHttpServletRequest("GET", "/x");
            assertThrows(IOException.class, () -> filter.doFilter(request,
                    new MockHttpServletResponse(), new MockFilterChain(handler(new IOException("Broken pipe"), true))));
        }
    }
}
