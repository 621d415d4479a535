package dev.polylimit.webflux;

import org.springframework.core.Ordered;
import org.springframework.web.reactive.HandlerMapping;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * The handler {@link PolylimitWebFilter} looked up to find an exchange's
 * route, handed to the dispatcher (first of its handler mappings) so it does
 * not look it up a second time: one lookup per request, as without the
 * filter. Only for the path the filter saw (a filter after it that rewrites
 * the path gets a fresh lookup), and once.
 */
final class FoundHandler implements HandlerMapping, Ordered {
    private static final String ATTRIBUTE = FoundHandler.class.getName();

    /** What the filter found for one exchange. */
    private record Found(Object handler, String path) {}

    /** Remembers {@code handler} as {@code exchange}'s. */
    static void remember(ServerWebExchange exchange, Object handler) {
        exchange.getAttributes().put(ATTRIBUTE, new Found(handler, exchange.getRequest().getPath().value()));
    }

    @Override
    public Mono<Object> getHandler(ServerWebExchange exchange) {
        if (exchange.getAttributes().remove(ATTRIBUTE) instanceof Found found
                && found.path.equals(exchange.getRequest().getPath().value())) {
            return Mono.just(found.handler);
        }
        return Mono.empty();
    }

    @Override
    public int getOrder() {
        return Ordered.HIGHEST_PRECEDENCE;
    }
}
