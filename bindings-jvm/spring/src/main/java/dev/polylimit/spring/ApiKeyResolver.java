package dev.polylimit.spring;

import jakarta.servlet.http.HttpServletRequest;
import java.util.function.Function;

/**
 * The API key of a request (the {@code api_key} dimension of the rules), {@code null} when it has none.
 * A bean of this type is picked up by {@link PolylimitAutoConfiguration}
 * and given to {@link PolylimitFilter#setApiKey}.
 */
@FunctionalInterface
public interface ApiKeyResolver extends Function<HttpServletRequest, String> {}
