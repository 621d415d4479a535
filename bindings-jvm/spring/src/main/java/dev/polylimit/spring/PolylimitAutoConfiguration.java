package dev.polylimit.spring;

import dev.polylimit.Limiter;
import dev.polylimit.PolylimitException;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.condition.ConditionalOnWebApplication;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.core.Ordered;
import org.springframework.web.servlet.HandlerMapping;

/**
 * A {@link Limiter} from {@code polylimit.rules-file} (default
 * {@code polylimit.yaml}) and the {@link PolylimitFilter} before every
 * servlet. Off with {@code polylimit.enabled=false}; an application's own
 * {@code Limiter} bean replaces the rules file's. {@link UserResolver},
 * {@link ApiKeyResolver} and {@link KeyResolver} beans give the filter the
 * {@code user}, {@code api_key} and {@code key} dimensions of each request,
 * a {@link CostResolver} bean its cost.
 */
@AutoConfiguration
@ConditionalOnWebApplication(type = ConditionalOnWebApplication.Type.SERVLET)
@ConditionalOnProperty(prefix = "polylimit", name = "enabled", havingValue = "true", matchIfMissing = true)
public class PolylimitAutoConfiguration {
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
    public FilterRegistrationBean<PolylimitFilter> polylimitFilter(Limiter limiter,
            ObjectProvider<HandlerMapping> mappings, ObjectProvider<UserResolver> user,
            ObjectProvider<ApiKeyResolver> apiKey, ObjectProvider<KeyResolver> key, ObjectProvider<CostResolver> cost) {
        PolylimitFilter filter = new PolylimitFilter(limiter, () -> mappings.orderedStream().toList());
        filter.setUser(user.getIfAvailable());
        filter.setApiKey(apiKey.getIfAvailable());
        filter.setKey(key.getIfAvailable());
        filter.setCost(cost.getIfAvailable());
        FilterRegistrationBean<PolylimitFilter> registration = new FilterRegistrationBean<>(filter);
        registration.setOrder(Ordered.HIGHEST_PRECEDENCE + 10);
        return registration;
    }
}
