package dev.polylimit.spring;

import jakarta.servlet.http.HttpServletRequest;
import java.util.function.Function;

/**
 * The units a request costs (its reservation), {@code null} for the rules'
 * own cost (or 1). The core checks it against the rules' {@code max_cost}:
 * above it, the request is refused with the core's 400 {@code invalid_cost}.
 * A bean of this type is picked up by {@link PolylimitAutoConfiguration}
 * and given to {@link PolylimitFilter#setCost}.
 */
@FunctionalInterface
public interface CostResolver extends Function<HttpServletRequest, Long> {}
