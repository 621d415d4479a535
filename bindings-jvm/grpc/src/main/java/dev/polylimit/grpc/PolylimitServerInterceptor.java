package dev.polylimit.grpc;

import dev.polylimit.Header;
import dev.polylimit.Limiter;
import dev.polylimit.Outcome;
import dev.polylimit.PackedRequest;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.ForwardingServerCall.SimpleForwardingServerCall;
import io.grpc.Grpc;
import io.grpc.Metadata;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.Status;
import java.net.SocketAddress;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BiFunction;
import java.util.function.LongSupplier;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * polylimit for grpc-java: every call (unary or stream: one request, decided
 * when it opens) is decided by the limiter's rules as the core's gRPC request
 * kind: its full method name, the transport's peer, its metadata (the keys the
 * rules read; {@code -bin} keys never). No thread waits for the store: the
 * call is held (nothing is requested from the client) until the decision.
 *
 * <p>A refusal sends the core's metadata as the response headers and closes
 * the call with the core's code (8 RESOURCE_EXHAUSTED, 14 UNAVAILABLE, 7
 * PERMISSION_DENIED), its message and trailers ({@code retry-after}); an
 * allowed call gets the core's metadata with its response headers, waits the
 * core's delay (shaping), and is settled with the code it ended with (a
 * client's cancel before the status: no status), which also releases its
 * concurrency slots. Adaptation only: every decision is the core's.
 *
 * <p>A handler reports its call's actual cost (an LLM call's tokens) with
 * {@link #reportCost} before it closes the call: the call is settled with it
 * and the core reconciles the reservation the rule's {@code cost} charged.
 *
 * <pre>{@code
 * Server server = ServerBuilder.forPort(50051)
 *     .addService(ServerInterceptors.intercept(service, new PolylimitServerInterceptor(limiter)))
 *     .build();
 * }</pre>
 */
public final class PolylimitServerInterceptor implements ServerInterceptor {
    private static final Logger log = Logger.getLogger(PolylimitServerInterceptor.class.getName());
    private static final ScheduledExecutorService DEFAULT_TIMER = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "polylimit-grpc-shaping");
        t.setDaemon(true);
        return t;
    });

    /**
     * Where a call's handler reports its actual cost: the interceptor puts a
     * fresh holder in each settled call's {@link Context} (named as the other
     * JVM middlewares' {@code polylimit.cost}).
     */
    private static final Context.Key<AtomicReference<Long>> COST = Context.key(dev.polylimit.Limiter.COST_ATTRIBUTE);

    /**
     * Reports the actual cost of the call whose {@link Context} is current (a
     * handler's, inside its listener callbacks or a task wrapped with
     * {@code Context.current().wrap}), before the handler closes the call:
     * the interceptor settles the call with it, and the core reconciles the
     * reservation (the difference given back, or charged past it, capped at
     * {@code max_cost}). The last report wins. False when the current context
     * is no call's this interceptor settles (nothing is recorded).
     */
    public static boolean reportCost(long cost) {
        AtomicReference<Long> holder = COST.get();
        if (holder == null) {
            return false;
        }
        holder.set(cost);
        return true;
    }

    /** A call's value for a rule dimension, from the call and its metadata; {@code null} or "" leaves it out. */
    @FunctionalInterface
    public interface CallFunction<T> extends BiFunction<ServerCall<?, ?>, Metadata, T> {}

    private final Limiter limiter;
    private CallFunction<String> user = (c, m) -> null;
    private CallFunction<String> apiKey = (c, m) -> null;
    private CallFunction<String> key = (c, m) -> null;
    private CallFunction<Long> cost = (c, m) -> null;
    private CallFunction<String> peer = PolylimitServerInterceptor::transportPeer;
    private LongSupplier clock;
    private ScheduledExecutorService timer = DEFAULT_TIMER;

    public PolylimitServerInterceptor(Limiter limiter) {
        this.limiter = limiter;
    }

    /** The authenticated user (the {@code user} dimension). */
    public PolylimitServerInterceptor user(CallFunction<String> user) {
        this.user = user;
        return this;
    }

    /** The API key (the {@code api_key} dimension). */
    public PolylimitServerInterceptor apiKey(CallFunction<String> apiKey) {
        this.apiKey = apiKey;
        return this;
    }

    /** A key of the application's choosing (the {@code key} dimension). */
    public PolylimitServerInterceptor key(CallFunction<String> key) {
        this.key = key;
        return this;
    }

    /**
     * The units a call costs (its reservation; {@code null}: the rules' cost,
     * or 1); the core checks it against the rules' {@code max_cost} (above
     * it: INVALID_ARGUMENT, nothing charged).
     */
    public PolylimitServerInterceptor cost(CallFunction<Long> cost) {
        this.cost = cost;
        return this;
    }

    /**
     * The peer string (default the transport's remote address as grpc-java
     * names it, {@code /203.0.113.7:50051}; the core reads every library's form).
     */
    public PolylimitServerInterceptor peer(CallFunction<String> peer) {
        this.peer = peer;
        return this;
    }

    /** The time decisions are made at, ms since the epoch (tests; default: the store's clock). */
    public PolylimitServerInterceptor clock(LongSupplier clock) {
        this.clock = clock;
        return this;
    }

    /** Where a shaped call waits the core's delay before its handler starts. */
    public PolylimitServerInterceptor timer(ScheduledExecutorService timer) {
        this.timer = timer;
        return this;
    }

    /** The transport's remote address as grpc-java gives it ({@code /1.2.3.4:5}), null when unknown. */
    static String transportPeer(ServerCall<?, ?> call, Metadata headers) {
        SocketAddress remote = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
        return remote == null ? null : remote.toString();
    }

    @Override
    public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
        CompletableFuture<Outcome> decided;
        try {
            decided = limiter.checkPackedFuture(toRequest(call, headers));
        } catch (RuntimeException e) {
            decided = CompletableFuture.failedFuture(e);
        }
        HeldListener<Q> held = new HeldListener<>();
        // The call's own context (grpc-java's, current here: its deadline and cancellation), for its handler.
        Context context = Context.current();
        decided.whenComplete((outcome, error) -> {
            if (error == null && outcome.getStatus() == null && outcome.getDelayMs() > 0) {
                // Shaping: the handler starts after the core's delay.
                timer.schedule(() -> held.start(() -> answer(call, headers, next, context, outcome, null)), outcome.getDelayMs(),
                        TimeUnit.MILLISECONDS);
            } else {
                held.start(() -> answer(call, headers, next, context, outcome, error));
            }
        });
        return held;
    }

    /** What the call becomes once decided: closed with the refusal, or handed to its handler (after the delay). */
    private <Q, R> ServerCall.Listener<Q> answer(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next,
            Context context, Outcome outcome, Throwable error) {
        if (error != null) {
            log.log(Level.WARNING, "polylimit: cannot decide the call", error);
            call.close(Status.INTERNAL.withDescription("polylimit: " + error.getMessage()), new Metadata());
            return new ServerCall.Listener<>() {};
        }
        Metadata response = metadata(outcome.getHeaders());
        if (outcome.getStatus() != null) {
            call.sendHeaders(response);
            call.close(Status.fromCodeValue(outcome.getStatus()).withDescription(outcome.getBody()),
                    metadata(outcome.getTrailers()));
            return new ServerCall.Listener<>() {};
        }
        SettledCall<Q, R> settled = new SettledCall<>(call, response, outcome.getCompletion());
        ServerCall.Listener<Q> listener;
        try {
            listener = settled.token == null ? next.startCall(settled, headers)
                    // The handler's context holds its call's cost holder (reportCost), in every callback.
                    : Contexts.interceptCall(context.withValue(COST, settled.cost), settled, headers, next);
        } catch (RuntimeException e) {
            // As grpc-java answers a handler that throws as it starts (here, off the transport's thread).
            settled.close(Status.fromThrowable(e), new Metadata());
            settled.settle();
            return new ServerCall.Listener<>() {};
        }
        return settled.token == null ? listener : new SettlingListener<>(listener, settled);
    }

    private PackedRequest toRequest(ServerCall<?, ?> call, Metadata headers) {
        PackedRequest packed = new PackedRequest("POST", call.getMethodDescriptor().getFullMethodName(), null,
                peer.apply(call, headers), user.apply(call, headers), apiKey.apply(call, headers), key.apply(call, headers));
        packed.setGrpc(true);
        for (String name : headers.keys()) {
            if (name.endsWith(Metadata.BINARY_HEADER_SUFFIX) || !limiter.readsHeader(name)) {
                continue;
            }
            Iterable<String> values = headers.getAll(Metadata.Key.of(name, Metadata.ASCII_STRING_MARSHALLER));
            if (values != null) {
                for (String value : values) {
                    packed.header(name, value);
                }
            }
        }
        packed.setCost(cost.apply(call, headers));
        if (clock != null) {
            packed.setNowMs(clock.getAsLong());
        }
        return packed;
    }

    private static Metadata metadata(java.util.List<Header> pairs) {
        Metadata md = new Metadata();
        for (Header h : pairs) {
            md.put(Metadata.Key.of(h.getName(), Metadata.ASCII_STRING_MARSHALLER), h.getValue());
        }
        return md;
    }

    /**
     * The call as its handler sees it: the core's metadata goes out with the
     * response headers (or before a status without them), and the code it is
     * closed with is remembered for the settlement.
     */
    private final class SettledCall<Q, R> extends SimpleForwardingServerCall<Q, R> {
        final String token;
        private final Metadata response;
        private boolean headersSent;
        private volatile Integer code;
        private final AtomicBoolean settled = new AtomicBoolean();
        /** The actual cost the handler reported ({@link #reportCost}), null until it does. */
        final AtomicReference<Long> cost = new AtomicReference<>();

        SettledCall(ServerCall<Q, R> call, Metadata response, String token) {
            super(call);
            this.response = response;
            this.token = token;
        }

        @Override
        public void sendHeaders(Metadata headers) {
            headers.merge(response);
            headersSent = true;
            super.sendHeaders(headers);
        }

        @Override
        public void close(Status status, Metadata trailers) {
            if (!headersSent) {
                sendHeaders(new Metadata());
            }
            code = status.getCode().value();
            // Settled before the status goes out: the client's next call sees the completion.
            CompletableFuture<?> done = settle();
            if (done.isDone()) {
                super.close(status, trailers);
            } else {
                done.whenComplete((x, e) -> delegate().close(status, trailers));
            }
        }

        /**
         * The handler threw from a listener callback before closing the call:
         * closed here as grpc-java would (UNKNOWN, or the exception's status),
         * settled first, so the slot is back before the client hears of it.
         * False when the call was closed already (the exception is grpc-java's).
         */
        boolean fail(Throwable e) {
            if (code != null) {
                return false;
            }
            log.log(Level.WARNING, "polylimit: the call's handler failed", e);
            Metadata trailers = Status.trailersFromThrowable(e);
            close(Status.fromThrowable(e), trailers == null ? new Metadata() : trailers);
            return true;
        }

        /** Completes the token once: with the code the call was closed with, or none (a cancel). */
        CompletableFuture<?> settle() {
            if (token == null || !settled.compareAndSet(false, true)) {
                return CompletableFuture.completedFuture(null);
            }
            // With the actual cost the handler reported, if any: the one settlement every JVM middleware
            // shares (it never fails; what it cannot settle is logged).
            return limiter.settleFuture(token, code, cost.get(), (message, e) -> log.log(Level.WARNING, message, e));
        }
    }

    /** The handler's listener; the call is settled when it ends (completed or cancelled). */
    private static final class SettlingListener<Q> extends io.grpc.ForwardingServerCallListener.SimpleForwardingServerCallListener<Q> {
        private final SettledCall<Q, ?> call;

        SettlingListener(ServerCall.Listener<Q> delegate, SettledCall<Q, ?> call) {
            super(delegate);
            this.call = call;
        }

        /** Runs a callback of the handler's; its exception closes the call (settled). */
        private void guard(Runnable callback) {
            try {
                callback.run();
            } catch (RuntimeException e) {
                if (!call.fail(e)) {
                    throw e;
                }
            }
        }

        @Override
        public void onMessage(Q message) {
            guard(() -> super.onMessage(message));
        }

        @Override
        public void onHalfClose() {
            guard(super::onHalfClose);
        }

        @Override
        public void onReady() {
            guard(super::onReady);
        }

        @Override
        public void onComplete() {
            try {
                super.onComplete();
            } finally {
                call.settle();
            }
        }

        @Override
        public void onCancel() {
            try {
                super.onCancel();
            } finally {
                call.settle();
            }
        }
    }
}
