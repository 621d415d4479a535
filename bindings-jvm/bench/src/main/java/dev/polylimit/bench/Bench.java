package dev.polylimit.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.polylimit.Decision;
import dev.polylimit.Limiter;
import dev.polylimit.LimiterFutures;
import io.github.bucket4j.BucketConfiguration;
import io.github.bucket4j.distributed.AsyncBucketProxy;
import io.github.bucket4j.distributed.ExpirationAfterWriteStrategy;
import io.github.bucket4j.redis.lettuce.Bucket4jLettuce;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.codec.RedisCodec;
import io.lettuce.core.codec.StringCodec;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.LongAdder;
import java.util.stream.Collectors;
import org.springframework.boot.SpringBootVersion;

/**
 * polylimit's JVM benchmark (`make jvm-bench`): medians of alternating
 * rounds on one real redis-server on a free loopback port, both limiters
 * driven through their asynchronous (CompletableFuture) forms, no thread
 * blocked per call.
 * <ul>
 *   <li>decisions/s with 64 checks in flight, a token bucket: polylimit's
 *   {@code checkFuture} vs Bucket4j's Lettuce proxy manager
 *   ({@code AsyncBucketProxy.tryConsume}), the same bucket (one million per
 *   second, a burst of one million) over 1,000 keys ({@code checkFuture}
 *   is one direct-mapped call of the C ABI, completed through the core's
 *   bridge: Direct.kt);</li>
 *   <li>the latency (p50/p99/p99.9) of one check at 1, 32 and 256 in flight,
 *   both;</li>
 *   <li>a Spring Boot app's requests/s with polylimit's filter (memory store,
 *   Redis) as a fraction of the same app with no limiter, each app its own
 *   JVM, loaded by 64 keep-alive connections from this process, with the CPU
 *   per request of the app, redis-server and this load generator.</li>
 * </ul>
 * With POLYLIMIT_BENCH_OUT set, every result line is also appended to that
 * file as a JSON object (bench/report.py reads them). Arguments: the parts to
 * run (decisions, latency, http; all by default). BENCH_SECONDS and
 * BENCH_ROUNDS change the run length and round count (2 s and 3),
 * BENCH_WARMUP each Spring app's least warm-up (10 s), BENCH_WARMUP_MAX its
 * most (60 s: load goes on, in 2 s steps, until the app's JIT compiler
 * threads spend under a tenth of its CPU in two steps in a row) and BENCH_APP_OPTS adds JVM
 * options to the Spring apps.
 */
public final class Bench {
    static final int IN_FLIGHT = 64;
    static final int KEYS = 1000;
    static final double SECONDS = Double.parseDouble(System.getenv().getOrDefault("BENCH_SECONDS", "2"));
    static final int ROUNDS = Integer.parseInt(System.getenv().getOrDefault("BENCH_ROUNDS", "3"));
    /** Least seconds of load on each Spring app before its rounds: the JIT compiles the hot paths meanwhile. */
    static final double WARMUP = Double.parseDouble(System.getenv().getOrDefault("BENCH_WARMUP", "10"));
    /**
     * Most seconds of warm-up of a Spring app: after WARMUP, load goes on in
     * steps of WARMUP_STEP until the app's JIT compiler threads spent under
     * JIT_QUIET of its CPU in two steps in a row. On 2 shared cores a JIT 10 s in was
     * still compiling (a fifth of the filter app's CPU 30 s in), which the
     * rounds then charged to the app with the most code to compile.
     */
    static final double WARMUP_MAX = Double.parseDouble(System.getenv().getOrDefault("BENCH_WARMUP_MAX", "60"));
    static final double WARMUP_STEP = 2;
    static final double JIT_QUIET = 0.1;
    /** JVM options for every Spring app (e.g. a flight recording: -XX:StartFlightRecording=...). */
    static final String APP_OPTS = System.getenv().getOrDefault("BENCH_APP_OPTS", "");
    static final long SELF = ProcessHandle.current().pid();
    static final ObjectMapper JSON = new ObjectMapper();

    static final String BUCKET4J = "bucket4j";
    static final String LETTUCE = "lettuce-core";
    static final String SPRING_BOOT = "spring-boot";

    private Bench() {}

    // ---- results -----------------------------------------------------------

    /** Prints a result line and appends it to $POLYLIMIT_BENCH_OUT when set. */
    static void record(Map<String, Object> line) throws IOException {
        double value = ((Number) line.get("value")).doubleValue();
        String unit = (String) line.get("unit");
        String text = String.format(unit.equals("ms") ? "  %-64s %10.3f %s" : "  %-64s %10.0f %s",
                line.get("what"), value, unit);
        if (line.containsKey("detail")) {
            text = String.format("  %-64s %s", line.get("what"), line.get("detail"));
        } else if (line.containsKey("ratio")) {
            text += String.format("  %.2fx %s", ((Number) line.get("ratio")).doubleValue(), line.get("baseline"));
        }
        System.out.println(text);
        if (line.containsKey("bound")) {
            System.out.println("    " + line.get("bound"));
        }
        String path = System.getenv("POLYLIMIT_BENCH_OUT");
        if (path == null || path.isEmpty()) {
            return;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("suite", "jvm");
        out.putAll(line);
        Path file = Path.of(path);
        if (file.getParent() != null) {
            Files.createDirectories(file.getParent());
        }
        Files.writeString(file, JSON.writeValueAsString(out) + "\n", StandardCharsets.UTF_8,
                StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    }

    static Map<String, Object> line(String what, double value, String unit) {
        Map<String, Object> l = new LinkedHashMap<>();
        l.put("what", what);
        l.put("value", value);
        l.put("unit", unit);
        return l;
    }

    static Map<String, Object> against(Map<String, Object> l, String baseline, double baselineValue) {
        l.put("baseline", baseline);
        l.put("baseline_value", baselineValue);
        l.put("ratio", ((Number) l.get("value")).doubleValue() / baselineValue);
        return l;
    }

    static Map<String, Object> with(Map<String, Object> l, String... peers) {
        Map<String, String> p = new LinkedHashMap<>();
        for (String name : peers) {
            p.put(name, version(name));
        }
        l.put("peers", p);
        return l;
    }

    /** The version of a peer on the class path, from its jar's Maven metadata. */
    static String version(String name) {
        return switch (name) {
            case BUCKET4J -> pomVersion("com.bucket4j", "bucket4j_jdk17-core");
            case LETTUCE -> pomVersion("io.lettuce", "lettuce-core");
            case SPRING_BOOT -> SpringBootVersion.getVersion();
            default -> "unknown";
        };
    }

    static String pomVersion(String group, String artifact) {
        String resource = "META-INF/maven/" + group + "/" + artifact + "/pom.properties";
        try (InputStream in = Bench.class.getClassLoader().getResourceAsStream(resource)) {
            if (in == null) {
                return "unknown";
            }
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "unknown");
        } catch (IOException e) {
            return "unknown";
        }
    }

    /** The 1-minute load average now (other work on this shared machine), for the bound lines. */
    static String load() {
        try {
            return "load average " + Files.readString(Path.of("/proc/loadavg")).split(" ")[0];
        } catch (IOException | RuntimeException e) {
            return "load average unknown";
        }
    }

    static double median(List<Double> xs) {
        double[] v = xs.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return v[v.length / 2];
    }

    // ---- redis-server ------------------------------------------------------

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** A redis-server on a free loopback port, no persistence; stopped by its pid. */
    static final class Redis implements AutoCloseable {
        final int port;
        final Process process;

        Redis() throws Exception {
            port = freePort();
            process = new ProcessBuilder("redis-server", "--port", String.valueOf(port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--protected-mode", "no")
                    .redirectOutput(new File("/dev/null")).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            while (!command("PING").startsWith("+PONG")) {
                if (!process.isAlive() || System.nanoTime() > deadline) {
                    throw new IllegalStateException("redis-server on port " + port + " did not answer PING");
                }
                Thread.sleep(20);
            }
        }

        String url() {
            return "redis://127.0.0.1:" + port;
        }

        long pid() {
            return process.pid();
        }

        /** One inline command; its first reply line, or "" when the server does not answer. */
        String command(String text) {
            try (Socket s = new Socket("127.0.0.1", port)) {
                OutputStream out = s.getOutputStream();
                out.write((text + "\r\n").getBytes(StandardCharsets.US_ASCII));
                out.flush();
                StringBuilder reply = new StringBuilder();
                InputStream in = s.getInputStream();
                for (int c = in.read(); c >= 0 && c != '\n'; c = in.read()) {
                    reply.append((char) c);
                }
                return reply.toString();
            } catch (IOException e) {
                return "";
            }
        }

        @Override
        public void close() throws InterruptedException {
            process.destroy();
            process.waitFor();
        }
    }

    // ---- asynchronous load -------------------------------------------------

    /** One asynchronous call: the future completes with true when the call was allowed by its store. */
    interface Op {
        CompletableFuture<Boolean> call(int worker, int i);
    }

    static int key(int worker, int i) {
        return (worker * 7919 + i) % KEYS;
    }

    /**
     * {@code inFlight} chains of calls for {@code seconds}: each chain issues
     * its next call when the previous one completes (no thread waits).
     * Returns calls/s; with {@code latencies}, each call's time in ns.
     */
    static double drive(int inFlight, double seconds, Op op, List<long[]> latencies) throws Exception {
        LongAdder total = new LongAdder();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        CountDownLatch finished = new CountDownLatch(inFlight);
        long start = System.nanoTime();
        long deadline = start + (long) (seconds * 1e9);
        List<Chain> chains = new ArrayList<>();
        for (int w = 0; w < inFlight; w++) {
            chains.add(new Chain(w, op, deadline, total, failed, finished, latencies != null));
        }
        chains.forEach(Chain::next);
        if (!finished.await((long) seconds + 30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("calls still pending 30 s after the run");
        }
        if (failed.get() != null) {
            throw new IllegalStateException("a call failed", failed.get());
        }
        double rate = total.sum() / ((System.nanoTime() - start) / 1e9);
        if (latencies != null) {
            for (Chain c : chains) {
                latencies.add(Arrays.copyOf(c.times, c.n));
            }
        }
        return rate;
    }

    static final class Chain {
        final int worker;
        final Op op;
        final long deadline;
        final LongAdder total;
        final AtomicReference<Throwable> failed;
        final CountDownLatch finished;
        long[] times;
        int n;
        int i;

        Chain(int worker, Op op, long deadline, LongAdder total, AtomicReference<Throwable> failed,
                CountDownLatch finished, boolean timed) {
            this.worker = worker;
            this.op = op;
            this.deadline = deadline;
            this.total = total;
            this.failed = failed;
            this.finished = finished;
            this.times = timed ? new long[4096] : null;
        }

        /** Issues calls until one is pending (a call already complete is settled here, not recursively). */
        void next() {
            while (true) {
                if (System.nanoTime() >= deadline || failed.get() != null) {
                    finished.countDown();
                    return;
                }
                long sent = System.nanoTime();
                CompletableFuture<Boolean> call = op.call(worker, i++);
                if (call.isDone()) {
                    Boolean allowed = null;
                    Throwable error = null;
                    try {
                        allowed = call.join();
                    } catch (RuntimeException e) {
                        error = e;
                    }
                    if (!settle(allowed, error, sent)) {
                        return;
                    }
                    continue;
                }
                call.whenComplete((allowed, error) -> {
                    if (settle(allowed, error, sent)) {
                        next();
                    }
                });
                return;
            }
        }

        /** Counts (and times) a completed call; false, with the chain finished, on a failure. */
        private boolean settle(Boolean allowed, Throwable error, long sent) {
            long took = System.nanoTime() - sent;
            if (error == null && !Boolean.TRUE.equals(allowed)) {
                error = new IllegalStateException("a call was not allowed by its store");
            }
            if (error != null) {
                failed.compareAndSet(null, error);
                finished.countDown();
                return false;
            }
            total.increment();
            if (times != null) {
                if (n == times.length) {
                    times = Arrays.copyOf(times, n * 2);
                }
                times[n++] = took;
            }
            return true;
        }
    }

    // ---- the two limiters --------------------------------------------------

    /** polylimit and Bucket4j, alike: a token bucket of one million per second, a burst of one million. */
    static final class Limiters implements AutoCloseable {
        final Limiter polylimit;
        final RedisClient client;
        final StatefulRedisConnection<String, byte[]> connection;
        final AsyncBucketProxy[] buckets = new AsyncBucketProxy[KEYS];
        final String[] keys = new String[KEYS];

        Limiters(Redis redis) throws Exception {
            polylimit = new Limiter("{\"policy\": {\"algorithm\": \"token_bucket\", \"rate\": \"1000000/s\","
                    + " \"burst\": 1000000}, \"store\": \"" + redis.url() + "\", \"prefix\": \"bench-polylimit\","
                    + " \"timeout\": \"1s\"}");
            client = RedisClient.create(RedisURI.create("127.0.0.1", redis.port));
            connection = client.connect(RedisCodec.of(StringCodec.UTF8, ByteArrayCodec.INSTANCE));
            var proxies = Bucket4jLettuce.casBasedBuilder(connection)
                    .expirationAfterWrite(ExpirationAfterWriteStrategy.basedOnTimeForRefillingBucketUpToMax(
                            Duration.ofSeconds(10)))
                    .build().asAsync();
            BucketConfiguration bucket = BucketConfiguration.builder()
                    .addLimit(limit -> limit.capacity(1_000_000).refillGreedy(1_000_000, Duration.ofSeconds(1)))
                    .build();
            for (int k = 0; k < KEYS; k++) {
                keys[k] = "user:" + k;
                buckets[k] = proxies.builder().build("bench-bucket4j:user:" + k, () -> CompletableFuture.completedFuture(bucket));
            }
        }

        CompletableFuture<Boolean> ours(int worker, int i) {
            return LimiterFutures.checkFuture(polylimit, keys[key(worker, i)]).thenApply(Limiters::fromStore);
        }

        CompletableFuture<Boolean> theirs(int worker, int i) {
            return buckets[key(worker, i)].tryConsume(1);
        }

        static boolean fromStore(Decision d) {
            if (!d.getSource().equals("store")) {
                throw new IllegalStateException("decided by " + d.getSource() + ", not Redis");
            }
            return d.getAllowed();
        }

        @Override
        public void close() {
            polylimit.close();
            connection.close();
            client.shutdown();
        }
    }

    // ---- the parts ---------------------------------------------------------

    static void decisions(Redis redis) throws Exception {
        try (Limiters l = new Limiters(redis); Limiter memory = new Limiter(
                "{\"policy\": {\"algorithm\": \"token_bucket\", \"rate\": \"1000000/s\", \"burst\": 1000000}}")) {
            // JIT warm-up of both paths, not counted.
            drive(IN_FLIGHT, 2, l::ours, null);
            drive(IN_FLIGHT, 2, l::theirs, null);
            // Rounds alternate the two, so background load on this shared
            // machine hits both alike; medians are reported.
            List<Double> ours = new ArrayList<>();
            List<Double> theirs = new ArrayList<>();
            List<Map<String, Double>> oursCpu = new ArrayList<>();
            List<Map<String, Double>> theirsCpu = new ArrayList<>();
            Map<String, Long> pids = Map.of("jvm", SELF, "redis", redis.pid());
            String load = load();
            for (int round = 0; round < ROUNDS; round++) {
                Cpu used = Cpu.start(pids);
                double rate = drive(IN_FLIGHT, SECONDS, l::ours, null);
                ours.add(rate);
                oursCpu.add(used.stop((long) (rate * SECONDS)));
                used = Cpu.start(pids);
                rate = drive(IN_FLIGHT, SECONDS, l::theirs, null);
                theirs.add(rate);
                theirsCpu.add(used.stop((long) (rate * SECONDS)));
            }
            drive(IN_FLIGHT, 1, (w, i) -> LimiterFutures.checkFuture(memory, l.keys[key(w, i)])
                    .thenApply(Decision::getAllowed), null);
            double onMemory = drive(IN_FLIGHT, SECONDS, (w, i) -> LimiterFutures.checkFuture(memory, l.keys[key(w, i)])
                    .thenApply(Decision::getAllowed), null);

            System.out.printf("decisions/s, %d in flight (CompletableFuture), one redis-server on loopback, %d keys, "
                    + "median of %d alternating %.0f s runs (%s %s, %s %s)%n", IN_FLIGHT, KEYS, ROUNDS, SECONDS,
                    BUCKET4J, version(BUCKET4J), LETTUCE, version(LETTUCE));
            double peer = median(theirs);
            Map<String, Double> oc = Cpu.median(oursCpu);
            Map<String, Double> tc = Cpu.median(theirsCpu);
            record(with(line("Bucket4j Lettuce proxy manager tryConsume(), redis, 64 in flight", peer, "decisions/s"),
                    BUCKET4J, LETTUCE));
            Map<String, Object> mine = with(against(line("token_bucket checkFuture(), redis, 64 in flight",
                    median(ours), "decisions/s"), "Bucket4j (Lettuce)", peer), BUCKET4J, LETTUCE);
            mine.put("bound", String.format("CPU per decision: polylimit %.1f µs (JVM) + %.1f µs (redis-server); "
                    + "Bucket4j %.1f µs + %.1f µs; the machine %.2f of %d cores busy, %s", oc.get("jvm"), oc.get("redis"),
                    tc.get("jvm"), tc.get("redis"), oc.get("busy"), Runtime.getRuntime().availableProcessors(), load));
            record(mine);
            record(line("token_bucket checkFuture(), memory store, 64 in flight", onMemory, "decisions/s"));
        }
    }

    static double percentile(long[] sorted, double q) {
        int i = Math.min((int) (q * sorted.length), sorted.length - 1);
        return sorted[i] / 1e6;
    }

    static long[] merged(List<long[]> parts) {
        long[] all = parts.stream().flatMapToLong(Arrays::stream).toArray();
        Arrays.sort(all);
        return all;
    }

    static void latency(Redis redis) throws Exception {
        try (Limiters l = new Limiters(redis)) {
            drive(IN_FLIGHT, 1, l::ours, null);
            drive(IN_FLIGHT, 1, l::theirs, null);
            System.out.printf("latency of one check on Redis, ms, %d alternating rounds of 1 s per concurrency%n", ROUNDS);
            for (int c : new int[] {1, 32, 256}) {
                List<long[]> ours = new ArrayList<>();
                List<long[]> theirs = new ArrayList<>();
                for (int round = 0; round < ROUNDS; round++) {
                    drive(c, 1, l::ours, ours);
                    drive(c, 1, l::theirs, theirs);
                }
                long[] p = merged(ours);
                long[] q = merged(theirs);
                double[] mine = {percentile(p, 0.5), percentile(p, 0.99), percentile(p, 0.999)};
                double[] peer = {percentile(q, 0.5), percentile(q, 0.99), percentile(q, 0.999)};
                Map<String, Object> out = with(against(line("latency of one check() on Redis, " + c
                        + " in flight: p50/p99/p99.9", mine[1], "ms"), "Bucket4j p99", peer[1]), BUCKET4J, LETTUCE);
                out.put("p50", mine[0]);
                out.put("p99", mine[1]);
                out.put("p999", mine[2]);
                out.put("peer_p50", peer[0]);
                out.put("peer_p99", peer[1]);
                out.put("peer_p999", peer[2]);
                out.put("detail", String.format("%.2f / %.2f / %.2f ms; Bucket4j %.2f / %.2f / %.2f ms",
                        mine[0], mine[1], mine[2], peer[0], peer[1], peer[2]));
                record(out);
            }
        }
    }

    /** A Spring Boot app (App) in its own JVM on a free port; stopped by its pid. */
    static final class SpringApp implements AutoCloseable {
        final String name;
        final int port;
        final Process process;
        final List<Double> rates = new ArrayList<>();
        final List<Map<String, Double>> cpus = new ArrayList<>();
        /** Seconds of warm-up this app had ({@link #warmUp}). */
        double warmedFor;

        SpringApp(String name, String... settings) throws Exception {
            this.name = name;
            port = freePort();
            List<String> cmd = new ArrayList<>(List.of(
                    Path.of(System.getProperty("java.home"), "bin", "java").toString()));
            if (!APP_OPTS.isBlank()) {
                cmd.addAll(List.of(APP_OPTS.trim().split("\\s+")));
            }
            cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), App.class.getName(),
                    "--server.port=" + port, "--server.address=127.0.0.1", "--spring.main.banner-mode=off",
                    "--logging.level.root=WARN",
                    // Keep-alive connections stay open (Tomcat closes one after 100 requests by default).
                    "--server.tomcat.max-keep-alive-requests=-1"));
            cmd.addAll(List.of(settings));
            process = new ProcessBuilder(cmd).inheritIO().start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (!Load.ready(port)) {
                if (!process.isAlive() || System.nanoTime() > deadline) {
                    close();
                    throw new IllegalStateException("the " + name + " app did not answer on port " + port);
                }
                Thread.sleep(100);
            }
        }

        /**
         * Load, not counted, for at least WARMUP seconds, then until the JIT
         * compiler threads spent under JIT_QUIET of the app's CPU over two
         * steps in a row (one quiet step may be a JIT starved by the other
         * work of a shared machine), or WARMUP_MAX seconds in all.
         */
        void warmUp() throws IOException {
            Load.run(port, IN_FLIGHT, WARMUP);
            warmedFor = WARMUP;
            Map<String, Long> pid = Map.of("app", process.pid());
            int quiet = 0;
            while (warmedFor < WARMUP_MAX && quiet < 2) {
                Cpu used = Cpu.start(pid);
                Load.run(port, IN_FLIGHT, WARMUP_STEP);
                warmedFor += WARMUP_STEP;
                Map<String, Double> step = used.stop(1);
                quiet = step.get("app jit") < JIT_QUIET * step.get("app") ? quiet + 1 : 0;
            }
        }

        void run(double seconds, Map<String, Long> pids) throws IOException {
            Cpu used = Cpu.start(pids);
            Load.Result r = Load.run(port, IN_FLIGHT, seconds);
            rates.add(r.rate());
            cpus.add(used.stop(r.requests()));
        }

        @Override
        public void close() throws InterruptedException {
            process.destroy();
            if (!process.waitFor(20, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor();
            }
        }
    }

    /** Each round's rate of {@code app} over {@code baseline}'s run beside it: how far the machine's load swung them. */
    static String ratios(SpringApp app, SpringApp baseline) {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < app.rates.size(); i++) {
            out.add(String.format("%.2f", app.rates.get(i) / baseline.rates.get(i)));
        }
        return String.join(" ", out);
    }

    static void http(Redis redis) throws Exception {
        Path dir = Files.createTempDirectory("polylimit-jvm-bench");
        String rules = "policies:\n  api: { algorithm: token_bucket, rate: 1000000/s, burst: 1000000 }\n"
                + "rules:\n  - match: { route: \"/api/{name}\" }\n    key: [ip]\n    policy: api\n";
        Path memoryRules = Files.writeString(dir.resolve("memory.yaml"), "store: memory\n" + rules);
        Path redisRules = Files.writeString(dir.resolve("redis.yaml"),
                "store: " + redis.url() + "\nprefix: bench-spring\ntimeout: 1s\n" + rules);
        List<SpringApp> apps = new ArrayList<>();
        String load;
        try {
            apps.add(new SpringApp("unlimited", "--polylimit.enabled=false"));
            apps.add(new SpringApp("memory", "--polylimit.rules-file=" + memoryRules));
            apps.add(new SpringApp("redis", "--polylimit.rules-file=" + redisRules));
            for (SpringApp app : apps) {
                app.warmUp(); // JIT warm-up, not counted
            }
            load = load();
            for (int round = 0; round < ROUNDS; round++) {
                // Each round starts with the next app: none is always loaded first (or right after a given one).
                for (int i = 0; i < apps.size(); i++) {
                    SpringApp app = apps.get((round + i) % apps.size());
                    app.run(SECONDS, Map.of("app", app.process.pid(), "redis", redis.pid(), "load", SELF));
                }
            }
        } finally {
            for (SpringApp app : apps) {
                app.close();
            }
            Files.deleteIfExists(memoryRules);
            Files.deleteIfExists(redisRules);
            Files.deleteIfExists(dir);
        }
        System.out.printf("Spring Boot %s requests/s, each app its own JVM, %d keep-alive connections on loopback "
                + "from one load-generating thread of another process, median of %d alternating %.0f s runs after "
                + "a warm-up each until its JIT is quiet (%s s)%n", version(SPRING_BOOT), IN_FLIGHT, ROUNDS, SECONDS,
                apps.stream().map(a -> String.format("%s %.0f", a.name, a.warmedFor)).collect(Collectors.joining(", ")));
        double plain = median(apps.get(0).rates);
        Map<String, Double> none = Cpu.median(apps.get(0).cpus);
        Map<String, Double> mem = Cpu.median(apps.get(1).cpus);
        Map<String, Double> red = Cpu.median(apps.get(2).cpus);
        int cores = Runtime.getRuntime().availableProcessors();
        record(with(line("Spring Boot app, no limiter", plain, "req/s"), SPRING_BOOT));
        Map<String, Object> onMemory = against(line("Spring polylimit filter, memory store", median(apps.get(1).rates),
                "req/s"), "no limiter", plain);
        onMemory.put("bound", String.format("CPU per request: app %.1f µs, %.1f of it JIT compiling (no limiter %.1f µs, "
                + "%.1f JIT), load generator %.1f µs (%.1f µs); the machine %.2f of %d cores busy, %s; each round's ratio %s",
                mem.get("app"), mem.get("app jit"), none.get("app"), none.get("app jit"), mem.get("load"), none.get("load"),
                mem.get("busy"), cores, load, ratios(apps.get(1), apps.get(0))));
        onMemory.put("warmup_s", apps.get(1).warmedFor);
        onMemory.put("baseline_warmup_s", apps.get(0).warmedFor);
        record(with(onMemory, SPRING_BOOT));
        Map<String, Object> onRedis = against(line("Spring polylimit filter, redis", median(apps.get(2).rates), "req/s"),
                "no limiter", plain);
        onRedis.put("bound", String.format("CPU per request: app %.1f µs, %.1f of it JIT compiling, + redis-server %.1f µs "
                + "(no limiter %.1f µs), load generator %.1f µs; the machine %.2f of %d cores busy, %s; each round's ratio %s",
                red.get("app"), red.get("app jit"), red.get("redis"), none.get("app"), red.get("load"), red.get("busy"), cores,
                load, ratios(apps.get(2), apps.get(0))));
        onRedis.put("warmup_s", apps.get(2).warmedFor);
        record(with(onRedis, SPRING_BOOT));
    }

    public static void main(String[] args) throws Exception {
        List<String> parts = args.length > 0 ? List.of(args) : List.of("decisions", "latency", "http");
        for (String part : parts) {
            if (!List.of("decisions", "latency", "http").contains(part)) {
                throw new IllegalArgumentException("unknown part " + part + " (decisions, latency, http)");
            }
        }
        System.out.printf("polylimit JVM benchmark: %s, %d cores, %s%n", Runtime.version(),
                Runtime.getRuntime().availableProcessors(), load());
        try (Redis redis = new Redis()) {
            for (String part : parts) {
                switch (part) {
                    case "decisions" -> decisions(redis);
                    case "latency" -> latency(redis);
                    default -> http(redis);
                }
            }
        }
        System.exit(0); // the native runtime's and Lettuce's threads are not daemons
    }
}
