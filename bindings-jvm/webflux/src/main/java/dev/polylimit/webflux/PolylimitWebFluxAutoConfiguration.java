package dev.polylimit.webflux;

import dev.polylimit.Limiter;
import dev.polylimit.PolylimitException;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.web.reactive.HandlerMapping;

/**
 * For a reactive web application: a {@link Limiter} from
 * {@code polylimit.rules-file} (default {@code polylimit.yaml}) and the
 * {@link PolylimitWebFilter} before every handler, as polylimit-spring does
 * for a servlet one (the same properties). Off with
 * {@code polylimit.enabled=false}; an application's own {@code Limiter} bean
 * replaces the rules file's; {@link ExchangeResolvers} beans give the filter
 * the user, API key, key and cost of each request.
 */
@AutoConfiguration
@ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.REACTIVE)
@ConditionalOnProperty(prefix = "polylimit", name = "enabled", havingValue = "true", matchIfMissing = true)
public class PolylimitWebFluxAutoConfiguration {
    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean
    public Limiter polylimitLimiter(@Value("${polylimit.rules-file:polylimit.yaml}") String rulesFile)
            throws PolylimitException {
        return Limiter.Companion.fromRulesFile(rulesFile);
    }

    /** The filter's handler lookup, handed to the dispatcher: one lookup per request. */
    @Bean
    public HandlerMapping polylimitFoundHandler() {
        return new FoundHandler();
    }

    @Bean
    @ConditionalOnMissingBean
    public PolylimitWebFilter polylimitWebFilter(Limiter limiter, ObjectProvider<HandlerMapping> mappings,
            ObjectProvider<ExchangeResolvers.UserResolver> user, ObjectProvider<ExchangeResolvers.ApiKeyResolver> apiKey,
            ObjectProvider<ExchangeResolvers.KeyResolver> key, ObjectProvider<ExchangeResolvers.CostResolver> cost) {
        PolylimitWebFilter filter = new PolylimitWebFilter(limiter, () -> mappings.orderedStream().toList());
        filter.setUser(user.getIfAvailable());
        filter.setApiKey(apiKey.getIfAvailable());
        filter.setKey(key.getIfAvailable());
        filter.setCost(cost.getIfAvailable());
        return filter;
    }
}
