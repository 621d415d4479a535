package dev.polylimit.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.polylimit.Limiter;
import jakarta.servlet.http.HttpServletRequest;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.mock.web.MockFilterChain;
import org.springframework.mock.web.MockHttpServletRequest;
import org.springframework.mock.web.MockHttpServletResponse;
import org.springframework.web.servlet.HandlerExecutionChain;
import org.springframework.web.servlet.HandlerMapping;

/**
 * The filter looks the handler up (to find the route pattern) only when a
 * rule matches, keys or tiers by route (the core's {@code readsRoute}); the
 * requests are keyed as before either way.
 */
class RouteLookupTest {
    /** A mapping that routes every request to {@code /api/{name}} and records the paths it was asked. */
    private static final class Routes implements HandlerMapping {
        final List<String> asked = new ArrayList<>();

        @Override
        public HandlerExecutionChain getHandler(HttpServletRequest request) {
            asked.add(request.getRequestURI());
            request.setAttribute(BEST_MATCHING_PATTERN_ATTRIBUTE, "/api/{name}");
            return new HandlerExecutionChain(new Object());
        }
    }

    private static List<Integer> statuses(String rules, Routes routes, String... paths) throws Exception {
        List<Integer> got = new ArrayList<>();
        try (Limiter limiter = Limiter.Companion.fromRules(rules)) {
            PolylimitFilter filter = new PolylimitFilter(limiter, () -> List.of(routes));
            for (String path : paths) {
                MockHttpServletRequest request = new MockHttpServletRequest("GET", path);
                request.setRemoteAddr("203.0.113.9");
                MockHttpServletResponse response = new MockHttpServletResponse();
                filter.doFilter(request, response, new MockFilterChain());
                got.add(response.getStatus());
            }
        }
        return got;
    }

    private static String rules(String rule) {
        return "store: memory\nheaders: none\npolicies:\n  api: { algorithm: token_bucket, rate: 2/min }\nrules:\n  - " + rule + "\n";
    }

    /** Sends {@code paths} under one rule (2 per minute), checks the third is refused, returns the lookups. */
    private static List<String> lookupsFor(String rule, String... paths) throws Exception {
        Routes routes = new Routes();
        assertEquals(List.of(200, 200, 429), statuses(rules(rule), routes, paths));
        return routes.asked;
    }

    @Test
    void noRuleReadsTheRouteSoNoLookup() throws Exception {
        // Keyed by ip on the path: /api/a and /api/b share the client's 2 per minute.
        assertEquals(List.of(), lookupsFor("{ match: { path: /api/* }, key: [ip, method], policy: api }", "/api/a", "/api/b", "/api/c"));
    }

    @Test
    void aRuleKeyedByRouteLooksItUp() throws Exception {
        // Keyed by the route pattern: the three paths share /api/{name}'s 2 per minute.
        assertEquals(List.of("/api/a", "/api/b", "/api/c"),
                lookupsFor("{ match: { path: /api/* }, key: [route], policy: api }", "/api/a", "/api/b", "/api/c"));
    }

    @Test
    void aRuleMatchingTheRouteLooksItUp() throws Exception {
        assertEquals(List.of("/x", "/y", "/z"),
                lookupsFor("{ match: { route: \"/api/{name}\" }, key: [ip], policy: api }", "/x", "/y", "/z"));
    }
}
