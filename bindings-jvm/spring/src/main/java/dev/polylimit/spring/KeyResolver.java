package dev.polylimit.spring;

import jakarta.servlet.http.HttpServletRequest;
import java.util.function.Function;

/**
 * A key of the application's choosing (the {@code key} dimension of the rules).
 * A bean of this type is picked up by {@link PolylimitAutoConfiguration}
 * and given to {@link PolylimitFilter#setKey}.
 */
@FunctionalInterface
public interface KeyResolver extends Function<HttpServletRequest, String> {}
