package dev.polylimit.spring;

import jakarta.servlet.DispatcherType;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.core.Ordered;
import org.springframework.web.servlet.HandlerExecutionChain;
import org.springframework.web.servlet.HandlerMapping;

/**
 * The handler {@link PolylimitFilter} looked up to find a request's route,
 * handed to the dispatcher (first of its handler mappings) so it does not
 * look it up a second time: one lookup per request, as without the filter.
 * Only for the request the filter saw (same URI, the request dispatch):
 * a forward, an include, an error or async dispatch is looked up afresh.
 */
final class FoundHandler implements HandlerMapping, Ordered {
    private static final String ATTRIBUTE = FoundHandler.class.getName();

    /** What the filter found for one request. */
    private record Found(HandlerExecutionChain chain, String uri) {}

    /** Remembers {@code chain} as {@code request}'s handler. */
    static void remember(HttpServletRequest request, HandlerExecutionChain chain) {
        request.setAttribute(ATTRIBUTE, new Found(chain, request.getRequestURI()));
    }

    @Override
    public HandlerExecutionChain getHandler(HttpServletRequest request) {
        if (request.getAttribute(ATTRIBUTE) instanceof Found found && request.getDispatcherType() == DispatcherType.REQUEST
                && found.uri.equals(request.getRequestURI())) {
            return found.chain;
        }
        return null;
    }

    @Override
    public int getOrder() {
        return Ordered.HIGHEST_PRECEDENCE;
    }
}
