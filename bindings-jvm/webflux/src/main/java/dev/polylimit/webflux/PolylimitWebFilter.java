package dev.polylimit.webflux;

import dev.polylimit.Header;
import dev.polylimit.Limiter;
import dev.polylimit.Outcome;
import dev.polylimit.PackedRequest;
import dev.polylimit.Polylimit_jvmKt;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Function;
import java.util.function.LongSupplier;
import java.util.function.Supplier;
import org.apache.commons.logging.Log;
import org.apache.commons.logging.LogFactory;
import org.springframework.core.Ordered;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.MediaType;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.web.reactive.HandlerMapping;
import org.springframework.web.server.ResponseStatusException;
import org.springframework.web.server.ServerWebExchange;
import org.springframework.web.server.WebFilter;
import org.springframework.web.server.WebFilterChain;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.core.scheduler.Scheduler;
import reactor.core.scheduler.Schedulers;

/**
 * Decides every request by the limiter's rules, as polylimit-spring's servlet
 * filter does, without blocking the event loop: the request (method, path,
 * WebFlux's matched route pattern, peer, the headers the rules read) goes to
 * the core packed ({@link Limiter#checkPackedFuture}: a memory store answers
 * in the call, Redis when it answers); the core's headers are set on every
 * response, a refusal is written with the core's status and JSON body, a
 * shaped request waits the core's delay on a timer, and a request whose rules
 * count only some responses (or hold a concurrency slot) is settled with its
 * status when the response ends, or as no response when the client leaves
 * (a cancel). Adaptation only: every decision, header and body is the core's.
 *
 * <p>The {@code user}, {@code api_key}, {@code key} dimensions and the cost
 * come from the functions set with {@link #setUser}, {@link #setApiKey},
 * {@link #setKey} and {@link #setCost}; a function answering {@code null} or
 * {@code ""} leaves the dimension out.
 *
 * <p>A handler reports its request's actual cost (an LLM call's tokens) by
 * the exchange attribute {@link #COST_ATTRIBUTE}
 * ({@code exchange.getAttributes().put(PolylimitWebFilter.COST_ATTRIBUTE, 3400L)}),
 * set before its response commits: the filter completes the request with it
 * and the core reconciles the reservation the rule's {@code cost} charged.
 */
public class PolylimitWebFilter implements WebFilter, Ordered {
    private static final Log log = LogFactory.getLog(PolylimitWebFilter.class);

    /**
     * The exchange attribute a handler sets to report its request's actual
     * cost, a whole number ({@link Long}, {@link Integer}, …), before the
     * response commits: the filter settles the request with it
     * ({@link Limiter#settleFuture}). Not set: the reservation stands. The
     * name is the servlet filter's ({@code "polylimit.cost"}).
     */
    public static final String COST_ATTRIBUTE = Limiter.COST_ATTRIBUTE;

    private final Limiter limiter;
    private final Supplier<List<HandlerMapping>> mappings;
    private volatile HandlerMapping[] lookups;
    private Function<ServerWebExchange, String> user = e -> null;
    private Function<ServerWebExchange, String> apiKey = e -> null;
    private Function<ServerWebExchange, String> key = e -> null;
    private Function<ServerWebExchange, Long> cost = e -> null;
    private LongSupplier clock;
    private Scheduler timer = Schedulers.parallel();
    private boolean caseInsensitive;
    private boolean ignoreTrailingSlash;
    private int order = Ordered.HIGHEST_PRECEDENCE + 10;

    /**
     * @param limiter  the limiter (a rules file's, usually)
     * @param mappings WebFlux's handler mappings, in order, to find the route
     *                 pattern ({@code /users/{id}}) before the dispatcher does;
     *                 asked on the first request whose rules read the route
     */
    public PolylimitWebFilter(Limiter limiter, Supplier<List<HandlerMapping>> mappings) {
        this.limiter = limiter;
        this.mappings = mappings;
    }

    /** The authenticated user of a request (the {@code user} dimension), {@code null} when anonymous. */
    public void setUser(Function<ServerWebExchange, String> user) {
        this.user = user == null ? e -> null : user;
    }

    /** The API key of a request (the {@code api_key} dimension), {@code null} when it has none. */
    public void setApiKey(Function<ServerWebExchange, String> apiKey) {
        this.apiKey = apiKey == null ? e -> null : apiKey;
    }

    /** A key the application chooses (the {@code key} dimension; some rule must be keyed by it). */
    public void setKey(Function<ServerWebExchange, String> key) {
        this.key = key == null ? e -> null : key;
    }

    /**
     * The units a request costs (its reservation; {@code null}: the rules'
     * cost, or 1), like the key function; the core checks it against the
     * rules' {@code max_cost} (above it: the core's 400 {@code invalid_cost}).
     */
    public void setCost(Function<ServerWebExchange, Long> cost) {
        this.cost = cost == null ? e -> null : cost;
    }

    /** The time decisions are made at, ms since the epoch (tests; default: the store's clock). */
    public void setClock(LongSupplier clock) {
        this.clock = clock;
    }

    /** Where a shaped request waits its delay (default Reactor's parallel scheduler). */
    public void setTimer(Scheduler timer) {
        this.timer = timer == null ? Schedulers.parallel() : timer;
    }

    /** Match paths as a router configured case-insensitive / ignoring a trailing slash does (WebFlux: neither). */
    public void setPathMatching(boolean caseInsensitive, boolean ignoreTrailingSlash) {
        this.caseInsensitive = caseInsensitive;
        this.ignoreTrailingSlash = ignoreTrailingSlash;
    }

    public void setOrder(int order) {
        this.order = order;
    }

    @Override
    public int getOrder() {
        return order;
    }

    @Override
    public Mono<Void> filter(ServerWebExchange exchange, WebFilterChain chain) {
        return route(exchange)
                .map(Optional::of)
                .defaultIfEmpty(Optional.empty())
                .flatMap(route -> Mono.fromFuture(() -> limiter.checkPackedFuture(toRequest(exchange, route.orElse(null)))))
                .flatMap(outcome -> answer(exchange, chain, outcome));
    }

    private Mono<Void> answer(ServerWebExchange exchange, WebFilterChain chain, Outcome outcome) {
        ServerHttpResponse response = exchange.getResponse();
        HttpHeaders headers = response.getHeaders();
        for (Header h : outcome.getHeaders()) {
            headers.add(h.getName(), h.getValue());
        }
        if (outcome.getStatus() != null) {
            response.setStatusCode(HttpStatusCode.valueOf(outcome.getStatus()));
            headers.setContentType(MediaType.APPLICATION_JSON);
            byte[] body = outcome.getBody() == null ? new byte[0] : outcome.getBody().getBytes(StandardCharsets.UTF_8);
            return response.writeWith(Mono.just(response.bufferFactory().wrap(body)));
        }
        Mono<Void> call = Mono.defer(() -> chain.filter(exchange));
        if (outcome.getDelayMs() > 0) {
            call = Mono.delay(Duration.ofMillis(outcome.getDelayMs()), timer).then(call);
        }
        String token = outcome.getCompletion();
        if (token == null) {
            return call;
        }
        AtomicBoolean settled = new AtomicBoolean();
        // Settled as the response commits (its status is set, nothing is sent yet): the client's next
        // request sees the completion, whatever the store's latency.
        response.beforeCommit(() -> settle(settled, token, exchange, null, true));
        return call
                .then(Mono.defer(() -> settle(settled, token, exchange, null, response.isCommitted())))
                .onErrorResume(e -> settle(settled, token, exchange, e, response.isCommitted()).then(Mono.error(e)))
                // The client left (or the server dropped the exchange): settled now, slots released.
                .doOnCancel(() -> settle(settled, token, exchange, new IOException("cancelled"), response.isCommitted())
                        .subscribe());
    }

    /**
     * Completes {@code token} with the status the request ended with, by the
     * core's rule ({@code endedStatus}), once. A {@link ResponseStatusException}
     * (WebFlux's 404, 405, ...) is the response WebFlux is about to write.
     */
    private Mono<Void> settle(AtomicBoolean settled, String token, ServerWebExchange exchange, Throwable failed,
            boolean answered) {
        ServerHttpResponse response = exchange.getResponse();
        if (!settled.compareAndSet(false, true)) {
            return Mono.empty();
        }
        Integer status;
        if (failed instanceof ResponseStatusException e) {
            status = Polylimit_jvmKt.endedStatus(e.getStatusCode().value(), true, false, false);
        } else {
            HttpStatusCode code = response.getStatusCode();
            status = Polylimit_jvmKt.endedStatus(code == null ? 200 : code.value(), answered, failed != null,
                    failed instanceof IOException);
        }
        // With the actual cost the handler reported (COST_ATTRIBUTE), if any: the one settlement every
        // JVM middleware shares (it never fails; what it cannot settle is logged).
        return Mono.fromFuture(() -> limiter.settleFuture(token, status, exchange.getAttribute(COST_ATTRIBUTE),
                (message, e) -> log.warn(message, e))).then();
    }

    private PackedRequest toRequest(ServerWebExchange exchange, String route) {
        var request = exchange.getRequest();
        String path = request.getPath().pathWithinApplication().value();
        InetSocketAddress remote = request.getRemoteAddress();
        String peer = remote == null ? null
                : remote.getAddress() != null ? remote.getAddress().getHostAddress() : remote.getHostString();
        PackedRequest packed = new PackedRequest(request.getMethod().name(), path.isEmpty() ? "/" : path, route, peer,
                user.apply(exchange), apiKey.apply(exchange), key.apply(exchange));
        for (Map.Entry<String, List<String>> header : request.getHeaders().entrySet()) {
            if (limiter.readsHeader(header.getKey())) {
                for (String value : header.getValue()) {
                    packed.header(header.getKey(), value);
                }
            }
        }
        packed.setCost(cost.apply(exchange));
        if (clock != null) {
            packed.setNowMs(clock.getAsLong());
        }
        packed.setCaseInsensitive(caseInsensitive);
        packed.setIgnoreTrailingSlash(ignoreTrailingSlash);
        return packed;
    }

    /**
     * WebFlux's matched pattern ({@link HandlerMapping#BEST_MATCHING_PATTERN_ATTRIBUTE}), found by asking the
     * handler mappings as the dispatcher will; only when a rule reads the route. The handler found is handed
     * to the dispatcher ({@link FoundHandler}, with the auto-configuration) so the request is looked up once.
     */
    private Mono<String> route(ServerWebExchange exchange) {
        if (!limiter.readsRoute()) { // asked each request (remembered by the limiter until a reload)
            return Mono.empty();
        }
        return Flux.fromArray(lookups())
                .concatMap(m -> m.getHandler(exchange))
                .next()
                .flatMap(handler -> {
                    FoundHandler.remember(exchange, handler);
                    Object pattern = exchange.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
                    return pattern == null ? Mono.empty() : Mono.just(pattern.toString());
                })
                .onErrorResume(e -> Mono.empty()); // no route: the rules match on the path
    }

    private HandlerMapping[] lookups() {
        HandlerMapping[] found = lookups;
        if (found == null) {
            found = mappings.get().stream().filter(m -> !(m instanceof FoundHandler)).toArray(HandlerMapping[]::new);
            lookups = found;
        }
        return found;
    }
}
