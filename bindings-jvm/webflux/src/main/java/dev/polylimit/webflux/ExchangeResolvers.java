package dev.polylimit.webflux;

import java.util.function.Function;
import org.springframework.web.server.ServerWebExchange;

/**
 * The per-request values the rules may key on, from the exchange: beans of
 * these types are picked up by {@link PolylimitWebFluxAutoConfiguration}
 * (as polylimit-spring's UserResolver, ApiKeyResolver and KeyResolver).
 */
public final class ExchangeResolvers {
    private ExchangeResolvers() {}

    /** The authenticated user (the {@code user} dimension), {@code null} when anonymous. */
    @FunctionalInterface
    public interface UserResolver extends Function<ServerWebExchange, String> {}

    /** The API key (the {@code api_key} dimension), {@code null} when none. */
    @FunctionalInterface
    public interface ApiKeyResolver extends Function<ServerWebExchange, String> {}

    /** A key of the application's choosing (the {@code key} dimension). */
    @FunctionalInterface
    public interface KeyResolver extends Function<ServerWebExchange, String> {}

    /** The units a request costs, {@code null} for the default (1). */
    @FunctionalInterface
    public interface CostResolver extends Function<ServerWebExchange, Long> {}
}
