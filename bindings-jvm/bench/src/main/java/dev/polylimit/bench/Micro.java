package dev.polylimit.bench;

import com.sun.management.OperatingSystemMXBean;
import dev.polylimit.Decision;
import dev.polylimit.Header;
import dev.polylimit.HttpRequest;
import dev.polylimit.Limiter;
import dev.polylimit.LimiterFutures;
import dev.polylimit.PackedRequest;
import dev.polylimit.Polylimit_jvmKt;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The per-call cost of the JVM binding's call path, without a store's I/O:
 * {@code version()} (no arguments), a blocking {@code check} on the memory
 * store, and {@code checkFuture} on the memory store with 64 in flight.
 * Each form: a warm-up, then N calls; wall ns per call, the calling thread's
 * CPU ns per call (ThreadMXBean) and the whole process's CPU ns per call
 * (GC, cleaner and native threads included). Arguments: the forms to run
 * (bare, version, check, future, request, packed; all by default; bare: a direct-mapped call
 * with no structure in its signature, the floor of a JNA call; request: a blocking
 * {@code checkRequest} of a typed request with 8 headers on memory rules; packed: the same
 * request as the Spring filter builds it, a {@code PackedRequest} of the headers the core
 * reads, through {@code checkPacked}); MICRO_N, MICRO_ROUNDS.
 */
public final class Micro {
    static final int N = Integer.parseInt(System.getenv().getOrDefault("MICRO_N", "200000"));
    static final int ROUNDS = Integer.parseInt(System.getenv().getOrDefault("MICRO_ROUNDS", "3"));
    static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();
    static final OperatingSystemMXBean OS = (OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    static final String[] KEYS = new String[1000];
    static final String[] PEERS = new String[1000];

    private Micro() {}

    /**
     * The floor of a JNA call: one of the library's functions with no
     * structure in its signature (a uniffi checksum: no arguments, an int),
     * direct-mapped like the generated code's.
     */
    static final class Bare {
        static {
            com.sun.jna.Native.register(Bare.class, "polylimit_jvm");
        }

        static native int uniffi_polylimit_jvm_checksum_func_version();
    }

    interface Body {
        void run(int n) throws Exception;
    }

    static void measure(String what, int n, Body body) throws Exception {
        body.run(Math.max(n / 4, 1000));
        for (int r = 0; r < ROUNDS; r++) {
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long proc0 = OS.getProcessCpuTime();
            long t0 = System.nanoTime();
            body.run(n);
            long wall = System.nanoTime() - t0;
            long cpu = THREADS.getCurrentThreadCpuTime() - cpu0;
            long proc = OS.getProcessCpuTime() - proc0;
            System.out.printf("  %-44s %9.0f ns/call wall %9.0f ns thread CPU %9.0f ns process CPU  (%s)%n", what,
                    (double) wall / n, (double) cpu / n, (double) proc / n, Bench.load());
        }
    }

    /** n checkFuture calls, 64 chains in flight, each issuing its next call on completion. */
    static void futures(Limiter limiter, int n) throws InterruptedException {
        int inFlight = 64;
        AtomicLong left = new AtomicLong(n);
        CountDownLatch done = new CountDownLatch(inFlight);
        for (int w = 0; w < inFlight; w++) {
            chain(limiter, w, left, done);
        }
        done.await();
    }

    static void chain(Limiter limiter, int w, AtomicLong left, CountDownLatch done) {
        while (true) {
            long i = left.getAndDecrement();
            if (i <= 0) {
                done.countDown();
                return;
            }
            CompletableFuture<Decision> f = LimiterFutures.checkFuture(limiter, KEYS[(int) ((w * 7919 + i) % KEYS.length)]);
            if (f.isDone()) {
                f.join();
                continue;
            }
            f.whenComplete((d, e) -> {
                if (e != null) {
                    e.printStackTrace();
                    System.exit(1);
                }
                chain(limiter, w, left, done);
            });
            return;
        }
    }

    public static void main(String[] args) throws Exception {
        for (int k = 0; k < KEYS.length; k++) {
            KEYS[k] = "user:" + k;
            PEERS[k] = "10.0." + (k / 256) + "." + (k % 256);
        }
        java.util.List<String> forms = args.length > 0 ? java.util.List.of(args)
                : java.util.List.of("bare", "version", "check", "future", "request", "packed");
        System.out.printf("per-call cost, N=%d, %d rounds after a warm-up%n", N, ROUNDS);
        try (Limiter memory = new Limiter(
                "{\"policy\": {\"algorithm\": \"token_bucket\", \"rate\": \"1000000/s\", \"burst\": 1000000}}")) {
            if (forms.contains("version")) {
                measure("version()", N, n -> {
                    for (int i = 0; i < n; i++) {
                        Polylimit_jvmKt.version();
                    }
                });
            }
            if (forms.contains("bare")) {
                measure("a direct-mapped call, no structures", N, n -> {
                    for (int i = 0; i < n; i++) {
                        Bare.uniffi_polylimit_jvm_checksum_func_version();
                    }
                });
            }
            if (forms.contains("check")) {
                measure("check(key), memory, blocking", N, n -> {
                    for (int i = 0; i < n; i++) {
                        memory.check(KEYS[i % KEYS.length], null, null);
                    }
                });
            }
            if (forms.contains("future")) {
                measure("checkFuture(key), memory, 64 in flight", N, n -> futures(memory, n));
            }
        }
        // The Spring bench's rules: a route keyed by the peer address.
        try (Limiter rules = Limiter.Companion.fromRules("store: memory\npolicies:\n  api: { algorithm: token_bucket, "
                + "rate: 1000000/s, burst: 1000000 }\nrules:\n  - match: { route: \"/api/{name}\" }\n    key: [ip]\n"
                + "    policy: api\n")) {
            List<Header> headers = List.of(new Header("Host", "127.0.0.1:8080"), new Header("User-Agent", "bench/1.0"),
                    new Header("Accept", "*/*"), new Header("Accept-Encoding", "gzip, deflate"),
                    new Header("Accept-Language", "en"), new Header("Connection", "keep-alive"),
                    new Header("Cookie", "session=0123456789abcdef"), new Header("X-Request-Id", "4bf92f3577b34da6"));
            if (forms.contains("request")) {
                measure("checkRequest(request), memory, blocking", N, n -> {
                    for (int i = 0; i < n; i++) {
                        rules.checkRequest(new HttpRequest("GET", "/api/x", "/api/{name}", PEERS[i % PEERS.length],
                                headers, null, null, null, null, null, false, false));
                    }
                });
            }
            if (forms.contains("packed")) {
                Map<String, Boolean> reads = new HashMap<>();
                measure("checkPacked(the filter's request), memory", N, n -> {
                    for (int i = 0; i < n; i++) {
                        PackedRequest p = new PackedRequest("GET", "/api/x", "/api/{name}", PEERS[i % PEERS.length]);
                        for (Header h : headers) {
                            if (reads.computeIfAbsent(h.getName(), name -> rules.readsHeader(name))) {
                                p.header(h.getName(), h.getValue());
                            }
                        }
                        rules.checkPacked(p);
                    }
                });
            }
        }
    }
}
