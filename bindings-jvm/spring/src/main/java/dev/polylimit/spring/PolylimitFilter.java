package dev.polylimit.spring;

import dev.polylimit.Header;
import dev.polylimit.Limiter;
import dev.polylimit.Outcome;
import dev.polylimit.PackedRequest;
import dev.polylimit.PolylimitException;
import dev.polylimit.Polylimit_jvmKt;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Enumeration;
import java.util.List;
import java.util.function.Function;
import java.util.function.Supplier;
import org.springframework.web.filter.OncePerRequestFilter;
import org.springframework.web.servlet.HandlerExecutionChain;
import org.springframework.web.servlet.HandlerMapping;
import org.springframework.web.util.ServletRequestPathUtils;

/**
 * Decides every request by the limiter's rules: the request (method, path,
 * the matched route pattern, peer, headers) goes to the core's
 * {@code checkRequest}; the core's headers are set on every response, a
 * refusal is written with the core's status and JSON body, a shaped request
 * waits the core's delay, and a request whose rules count only some responses
 * (or hold a concurrency slot) is settled with its status after the response.
 * Adaptation only: every decision, header and body is the core's.
 *
 * <p>The request crosses into the core packed in one byte array
 * ({@link PackedRequest}: only the headers the core says its rules read) and
 * the outcome comes back packed by the core ({@code checkPacked}): one native
 * call, none of the generated call's per-call objects.
 *
 * <p>The {@code user}, {@code api_key} and {@code key} dimensions of the
 * rules come from the functions set with {@link #setUser}, {@link #setApiKey}
 * and {@link #setKey} (the auto-configuration sets them from
 * {@link UserResolver}, {@link ApiKeyResolver} and {@link KeyResolver}
 * beans); a function answering {@code null} or {@code ""} leaves the
 * dimension out, and a rule keyed by it skips the request. The request's
 * cost may come from a function too ({@link #setCost}, a
 * {@link CostResolver} bean).
 *
 * <p>A handler reports its request's actual cost (an LLM call's tokens) by
 * the request attribute {@link #COST_ATTRIBUTE}
 * ({@code request.setAttribute(PolylimitFilter.COST_ATTRIBUTE, 3400L)}):
 * the filter completes the request with it ({@code completeCost}), and the
 * core reconciles the reservation the rule's {@code cost} charged with it.
 */
public class PolylimitFilter extends OncePerRequestFilter {
    /**
     * The request attribute a handler sets to report its request's actual
     * cost, a whole number ({@link Long}, {@link Integer}, …): the filter
     * completes the request with {@code completeCost(token, status, cost)}
     * after the response. Not set: the reservation stands.
     */
    public static final String COST_ATTRIBUTE = Limiter.COST_ATTRIBUTE;

    private final Limiter limiter;
    private final Supplier<List<HandlerMapping>> mappings;
    /** The handler mappings the route lookup asks, in order (FoundHandler left out): found on the first request. */
    private volatile HandlerMapping[] lookups;
    /** {@link #getAlreadyFilteredAttributeName()}'s answer, built once (the filter's name is set at init). */
    private volatile String alreadyFiltered;
    private Function<HttpServletRequest, String> user = r -> null;
    private Function<HttpServletRequest, String> apiKey = r -> null;
    private Function<HttpServletRequest, String> key = r -> null;
    private Function<HttpServletRequest, Long> cost = r -> null;

    /**
     * @param limiter  the limiter (a rules file's, usually)
     * @param mappings Spring MVC's handler mappings, in order, to find the
     *                 route pattern ({@code /users/{id}}) before the
     *                 dispatcher does; asked on the first request
     */
    public PolylimitFilter(Limiter limiter, Supplier<List<HandlerMapping>> mappings) {
        this.limiter = limiter;
        this.mappings = mappings;
    }

    /** The authenticated user of a request (the {@code user} dimension), {@code null} when anonymous. */
    public void setUser(Function<HttpServletRequest, String> user) {
        this.user = user == null ? r -> null : user;
    }

    /** The API key of a request (the {@code api_key} dimension), {@code null} when it has none. */
    public void setApiKey(Function<HttpServletRequest, String> apiKey) {
        this.apiKey = apiKey == null ? r -> null : apiKey;
    }

    /**
     * A key the application chooses (the {@code key} dimension). Some rule
     * must be keyed by {@code key}: otherwise a request with one fails with
     * the core's configuration error naming {@code key}, never silently keyed by IP.
     */
    public void setKey(Function<HttpServletRequest, String> key) {
        this.key = key == null ? r -> null : key;
    }

    /**
     * The units a request costs (its reservation; {@code null}: the rules'
     * cost, or 1), like the key function. The core checks it against the
     * rules' {@code max_cost} (above it: the core's 400 {@code invalid_cost},
     * nothing charged); 0 or less is the core's configuration error naming
     * {@code cost}.
     */
    public void setCost(Function<HttpServletRequest, Long> cost) {
        this.cost = cost == null ? r -> null : cost;
    }

    @Override
    protected String getAlreadyFilteredAttributeName() {
        String name = alreadyFiltered;
        if (name == null) {
            name = super.getAlreadyFilteredAttributeName();
            alreadyFiltered = name;
        }
        return name;
    }

    @Override
    protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
            throws ServletException, IOException {
        Outcome outcome;
        try {
            outcome = limiter.checkPacked(toRequest(request));
        } catch (PolylimitException e) {
            throw new ServletException("polylimit: " + e.getMessage(), e);
        }
        for (Header h : outcome.getHeaders()) {
            response.addHeader(h.getName(), h.getValue());
        }
        if (outcome.getStatus() != null) {
            response.setStatus(outcome.getStatus());
            response.setContentType("application/json");
            String body = outcome.getBody() == null ? "" : outcome.getBody();
            response.getOutputStream().write(body.getBytes(StandardCharsets.UTF_8));
            return;
        }
        String token = outcome.getCompletion();
        Throwable failed = null;
        try {
            // Inside the try: a request interrupted while it is held is settled
            // as no response, so the slots it holds are released at once.
            if (outcome.getDelayMs() > 0) {
                try {
                    Thread.sleep(outcome.getDelayMs());
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new ServletException("polylimit: interrupted while shaping", e);
                }
            }
            chain.doFilter(request, response);
        } catch (ServletException | IOException | RuntimeException | Error e) {
            failed = e;
            throw e;
        } finally {
            if (token != null) {
                settle(token, request, response, failed);
            }
        }
    }

    /**
     * Completes {@code token} with the status the request ended with, by the
     * core's rule ({@code endedStatus}): a handler that answered (the response
     * is committed) is charged as its status even if it then failed or the
     * client left (an {@link IOException}: the connection broke); one that
     * wrote nothing and failed is no response. With the actual cost the
     * handler reported ({@link #COST_ATTRIBUTE}): {@link Limiter#settle}, the
     * settlement every JVM middleware shares (a value that is not a whole
     * number, or one the core refuses, is logged and the request completed
     * without it, so its token never stays open).
     */
    private void settle(String token, HttpServletRequest request, HttpServletResponse response, Throwable failed) {
        Integer status = Polylimit_jvmKt.endedStatus(response.getStatus(), response.isCommitted(), failed != null,
                failed instanceof IOException);
        limiter.settle(token, status, request.getAttribute(COST_ATTRIBUTE), (message, e) -> logger.warn(message, e));
    }

    private PackedRequest toRequest(HttpServletRequest request) {
        String path = request.getRequestURI().substring(request.getContextPath().length());
        PackedRequest packed = new PackedRequest(request.getMethod(), path.isEmpty() ? "/" : path, route(request),
                request.getRemoteAddr(), user.apply(request), apiKey.apply(request), key.apply(request));
        packed.setCost(cost.apply(request));
        Enumeration<String> names = request.getHeaderNames();
        while (names.hasMoreElements()) {
            String name = names.nextElement();
            if (!limiter.readsHeader(name)) {
                continue; // the core's rules never read it: it cannot change the outcome
            }
            Enumeration<String> values = request.getHeaders(name);
            while (values.hasMoreElements()) {
                packed.header(name, values.nextElement());
            }
        }
        return packed;
    }

    /**
     * Spring MVC's matched pattern ({@link HandlerMapping#BEST_MATCHING_PATTERN_ATTRIBUTE}), found as the
     * dispatcher will; only when a rule reads it. The handler found is handed to the dispatcher
     * ({@link FoundHandler}, with the auto-configuration) so the request is looked up once.
     */
    private String route(HttpServletRequest request) {
        if (!limiter.readsRoute()) { // asked each request (remembered by the limiter until a reload)
            return null; // no rule matches, keys or tiers by route: the lookup cannot change the outcome
        }
        // The dispatcher parses the path for the mappings; here the filter does, and undoes it after.
        boolean parsed = !ServletRequestPathUtils.hasParsedRequestPath(request);
        if (parsed) {
            ServletRequestPathUtils.parseAndCache(request);
        }
        try {
            for (HandlerMapping mapping : lookups()) {
                HandlerExecutionChain handler = mapping.getHandler(request);
                if (handler != null) {
                    FoundHandler.remember(request, handler);
                    Object pattern = request.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
                    return pattern == null ? null : pattern.toString();
                }
            }
            return null;
        } catch (Exception e) {
            return null; // no route: the rules match on the path
        } finally {
            if (parsed) {
                ServletRequestPathUtils.clearParsedRequestPath(request);
            }
        }
    }

    /** The handler mappings, in order, without the filter's own {@link FoundHandler}. */
    private HandlerMapping[] lookups() {
        HandlerMapping[] found = lookups;
        if (found == null) {
            found = mappings.get().stream().filter(m -> !(m instanceof FoundHandler)).toArray(HandlerMapping[]::new);
            lookups = found;
        }
        return found;
    }
}
