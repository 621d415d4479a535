package dev.polylimit.webflux;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.polylimit.Limiter;
import dev.polylimit.testkit.RedisServer;
import dev.polylimit.testkit.Vectors;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpMethod;
import org.springframework.http.HttpStatus;
import org.springframework.mock.http.server.reactive.MockServerHttpRequest;
import org.springframework.mock.web.server.MockServerWebExchange;
import org.springframework.web.reactive.HandlerMapping;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.Disposable;
import reactor.core.Disposables;
import reactor.core.publisher.Mono;
import reactor.core.publisher.Sinks;
import reactor.core.scheduler.Scheduler;

/**
 * The HTTP conformance vectors (tests/conformance/http) through the WebFlux
 * filter, on memory and on a real redis-server: each request is a WebFlux
 * exchange (method, raw path, remote address, headers), its route the pattern
 * a handler mapping puts where WebFlux's do, its handler answers the step's
 * {@code complete} status (or fails: no response), later ones when their
 * {@code of} step comes; the client's view (status, the headers but the
 * refusal's Content-Type, body, the shaping delay the filter waited) must be
 * the vector's. Peeks are the limiter's, not the filter's: skipped.
 */
class WebFluxVectorsTest {
    static RedisServer redis;

    @BeforeAll
    static void startRedis() throws Exception {
        redis = new RedisServer();
    }

    @AfterAll
    static void stopRedis() throws Exception {
        redis.close();
    }

    @Test
    void memory() throws Exception {
        play("memory");
    }

    @Test
    void redis() throws Exception {
        play(redis.url());
    }

    private static final AtomicLong prefixes = new AtomicLong();

    private void play(String store) throws Exception {
        List<String> failures = new ArrayList<>();
        int played = 0;
        for (Vectors.Case c : Vectors.cases("http")) {
            String prefix = "webflux-" + ProcessHandle.current().pid() + "-" + prefixes.incrementAndGet();
            try (Limiter limiter = new Limiter(c.options(store, prefix))) {
                played += playCase(c, limiter, failures);
            }
        }
        assertTrue(played > 300, "played " + played);
        if (!failures.isEmpty()) {
            fail(failures.size() + " mismatches on " + store + ":\n" + String.join("\n", failures));
        }
    }

    /** A handler mapping that finds the vector's route, where WebFlux's put the pattern. */
    private static HandlerMapping routes(AtomicReference<Vectors.Request> current) {
        return exchange -> {
            String route = current.get().route();
            if (route == null) {
                return Mono.empty();
            }
            exchange.getAttributes().put(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE, route);
            return Mono.just(route);
        };
    }

    private int playCase(Vectors.Case c, Limiter limiter, List<String> failures) throws Exception {
        AtomicReference<Vectors.Request> current = new AtomicReference<>();
        PolylimitWebFilter filter = new PolylimitWebFilter(limiter, () -> List.of(routes(current)));
        filter.setUser(e -> current.get().user());
        filter.setApiKey(e -> current.get().apiKey());
        filter.setKey(e -> current.get().key());
        filter.setCost(e -> current.get().cost());
        Timer timer = new Timer();
        filter.setTimer(timer);
        List<Sinks.One<Integer>> later = new ArrayList<>();
        List<CompletableFuture<Void>> ends = new ArrayList<>();
        // The requests still in their handlers at the end: the client leaves (cancel), after the case.
        List<Disposable> pending = new ArrayList<>();
        int played = 0;
        for (int i = 0; i < c.steps().size(); i++) {
            Vectors.Step step = c.steps().get(i);
            String where = c + " step " + i;
            later.add(null);
            ends.add(null);
            if (step.of() != null) {
                if (c.steps().get(step.of()).hasComplete()) {
                    continue; // a second completion of one response: no framework ends a response twice
                }
                Sinks.One<Integer> sink = later.get(step.of());
                if (sink == null) {
                    failures.add(where + ": request " + step.of() + " did not reach its handler");
                    continue;
                }
                if (step.complete() == null) {
                    sink.tryEmitEmpty();
                } else {
                    sink.tryEmitValue(step.complete());
                }
                await(ends.get(step.of()));
                continue;
            }
            if (step.peek()) {
                continue;
            }
            Vectors.Request r = step.request();
            current.set(r);
            Long now = r.nowMs();
            filter.setClock(now == null ? null : () -> now);
            filter.setPathMatching(r.caseInsensitive(), r.ignoreTrailingSlash());
            MockServerWebExchange exchange = exchange(r);
            AtomicBoolean handled = new AtomicBoolean();
            // The handler: answers the step's status now, or (no complete) 200, or waits for its `of` step.
            Sinks.One<Integer> sink = Sinks.one();
            // A request no step completes is still in its handler when the case ends (as in the core's runner).
            boolean deferred = !step.hasComplete();
            if (deferred) {
                later.set(i, sink);
            } else if (step.hasComplete() && step.complete() == null) {
                sink.tryEmitEmpty();
            } else {
                sink.tryEmitValue(step.hasComplete() ? step.complete() : 200);
            }
            timer.waited.set(0);
            CompletableFuture<Void> reached = new CompletableFuture<>();
            CompletableFuture<Void> end = new CompletableFuture<>();
            pending.add(filter.filter(exchange, ex -> {
                handled.set(true);
                reached.complete(null);
                return sink.asMono()
                        .switchIfEmpty(Mono.error(new IllegalStateException("the handler failed")))
                        .flatMap(status -> {
                            ex.getResponse().setStatusCode(HttpStatus.valueOf(status));
                            return ex.getResponse().setComplete();
                        });
            }).subscribe(null, end::completeExceptionally, () -> end.complete(null)));
            ends.set(i, end);
            await(deferred ? CompletableFuture.anyOf(reached, end) : end);
            played++;
            Vectors.Expect want = step.expect();
            var response = exchange.getResponse();
            Integer status = handled.get() ? null : response.getStatusCode().value();
            List<List<String>> headers = new ArrayList<>();
            for (Map.Entry<String, List<String>> h : response.getHeaders().entrySet()) {
                if (h.getKey().equalsIgnoreCase(HttpHeaders.CONTENT_TYPE)) {
                    continue;
                }
                for (String v : h.getValue()) {
                    headers.add(List.of(h.getKey(), v));
                }
            }
            String body = handled.get() ? null : response.getBodyAsString().block();
            var have = List.of(String.valueOf(status), headers, String.valueOf(body), timer.waited.get());
            var expect = List.of(String.valueOf(want.status()), want.headers(), String.valueOf(want.body()), want.delayMs());
            if (!have.equals(expect)) {
                failures.add(where + ": expected " + expect + ", got " + have);
            }
            if (!handled.get() && !"application/json".equals(String.valueOf(response.getHeaders().getContentType()))) {
                failures.add(where + ": a refusal without Content-Type application/json");
            }
        }
        pending.forEach(Disposable::dispose);
        return played;
    }

    private static void await(CompletableFuture<?> end) throws Exception {
        try {
            end.get(10, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            // the handler failed (no response): the filter passed the error on
        }
    }

    /** The request as a server would receive it; the peer as the remote address when it is an IP address. */
    static MockServerWebExchange exchange(Vectors.Request r) throws Exception {
        MockServerHttpRequest.BaseBuilder<?> b = MockServerHttpRequest.method(HttpMethod.valueOf(r.method()), URI.create(r.path()));
        String peer = r.peer();
        if (peer != null && !peer.isEmpty() && peer.matches("[0-9A-Fa-f:.]+")) {
            b.remoteAddress(new InetSocketAddress(InetAddress.getByName(peer), 40000));
        }
        for (Map.Entry<String, String> h : r.headers()) {
            b.header(h.getKey(), h.getValue());
        }
        return MockServerWebExchange.from(b);
    }

    /** Runs at once what the filter schedules, adding up the delays asked for. */
    static final class Timer implements Scheduler {
        final AtomicLong waited = new AtomicLong();

        @Override
        public Disposable schedule(Runnable task) {
            task.run();
            return Disposables.disposed();
        }

        @Override
        public Disposable schedule(Runnable task, long delay, TimeUnit unit) {
            waited.addAndGet(unit.toMillis(delay));
            task.run();
            return Disposables.disposed();
        }

        @Override
        public Worker createWorker() {
            Timer timer = this;
            return new Worker() {
                @Override
                public Disposable schedule(Runnable task) {
                    return timer.schedule(task);
                }

                @Override
                public Disposable schedule(Runnable task, long delay, TimeUnit unit) {
                    return timer.schedule(task, delay, unit);
                }

                @Override
                public void dispose() {}
            };
        }
    }
}
