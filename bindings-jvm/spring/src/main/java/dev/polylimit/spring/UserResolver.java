package dev.polylimit.spring;

import jakarta.servlet.http.HttpServletRequest;
import java.util.function.Function;

/**
 * The authenticated user of a request (the {@code user} dimension of the rules), {@code null} when anonymous.
 * A bean of this type is picked up by {@link PolylimitAutoConfiguration}
 * and given to {@link PolylimitFilter#setUser}.
 */
@FunctionalInterface
public interface UserResolver extends Function<HttpServletRequest, String> {}
