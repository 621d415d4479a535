package dev.polylimit.otel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.polylimit.HttpRequest;
import dev.polylimit.Limiter;
import dev.polylimit.testkit.RedisServer;
import io.opentelemetry.api.common.AttributeKey;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.sdk.metrics.SdkMeterProvider;
import io.opentelemetry.sdk.metrics.data.AggregationTemporality;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.data.MetricDataType;
import io.opentelemetry.sdk.testing.exporter.InMemoryMetricReader;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The metrics an InMemoryMetricReader collects through the producer are the
 * limiter's Prometheus text: the same names, labels and values, on memory and
 * a real Redis.
 */
class PolylimitMetricProducerTest {
    private static final long NOW = 1_700_000_000_000L;
    private static final Pattern LINE = Pattern.compile("^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\\{(.*)\\})? (\\S+)$");
    private static final Pattern LABEL = Pattern.compile("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\"");
    private static RedisServer redis;

    @BeforeAll
    static void start() throws Exception {
        redis = new RedisServer();
    }

    @AfterAll
    static void stop() throws Exception {
        redis.close();
    }

    private static String rules(String store, String prefix) {
        return "store: " + store + "\nprefix: " + prefix + "\nblock_cache: true\nanomaly_log: false\n"
            + "policies:\n  api: { rate: 2/min }\n"
            + "  watch: { rate: 1000/s, adaptive: { window: 1s, horizon: 4s, factor: 3, floor: 4/s } }\n"
            + "rules:\n  - { match: { path: /api/* }, key: [ip], policy: api }\n";
    }

    private static Limiter exercised(String store, String prefix) throws Exception {
        Limiter limiter = Limiter.Companion.fromRules(rules(store, prefix));
        HttpRequest request = new HttpRequest();
        request.setPath("/api/x");
        request.setRoute("/api/{id}");
        request.setPeer("203.0.113.7");
        request.setNowMs(NOW);
        for (int i = 0; i < 3; i++) limiter.checkRequest(request);
        for (int i = 0; i < 4; i++) limiter.check("user:2", null, NOW);
        return limiter;
    }

    private static String sample(String name, Map<String, String> labels) {
        return name + new TreeMap<>(labels);
    }

    private static Map<String, Double> prometheus(String text) {
        Map<String, Double> out = new HashMap<>();
        for (String line : text.split("\n")) {
            if (line.isEmpty() || line.startsWith("#")) continue;
            Matcher m = LINE.matcher(line);
            assertTrue(m.matches(), line);
            Map<String, String> labels = new HashMap<>();
            Matcher kv = LABEL.matcher(m.group(2) == null ? "" : m.group(2));
            while (kv.find()) labels.put(kv.group(1), kv.group(2));
            out.put(sample(m.group(1), labels), Double.parseDouble(m.group(3)));
        }
        return out;
    }

    private static Map<String, String> labels(Attributes attributes) {
        Map<String, String> out = new HashMap<>();
        attributes.forEach((k, v) -> out.put(k.getKey(), String.valueOf(v)));
        return out;
    }

    private static String bound(double b) {
        return java.math.BigDecimal.valueOf(b).stripTrailingZeros().toPlainString();
    }

    private static Map<String, Double> otel(Collection<MetricData> metrics) {
        Map<String, Double> out = new HashMap<>();
        for (MetricData m : metrics) {
            if (!m.getInstrumentationScopeInfo().getName().equals(PolylimitMetricProducer.SCOPE_NAME)) continue;
            switch (m.getType()) {
                case LONG_SUM -> {
                    assertTrue(m.getLongSumData().isMonotonic(), m.getName());
                    assertEquals(AggregationTemporality.CUMULATIVE, m.getLongSumData().getAggregationTemporality());
                    for (LongPointData p : m.getLongSumData().getPoints()) out.put(sample(m.getName(), labels(p.getAttributes())), (double) p.getValue());
                }
                case LONG_GAUGE -> {
                    for (LongPointData p : m.getLongGaugeData().getPoints()) out.put(sample(m.getName(), labels(p.getAttributes())), (double) p.getValue());
                }
                case HISTOGRAM -> {
                    assertEquals(AggregationTemporality.CUMULATIVE, m.getHistogramData().getAggregationTemporality());
                    for (HistogramPointData p : m.getHistogramData().getPoints()) {
                        Map<String, String> l = labels(p.getAttributes());
                        long total = 0;
                        for (int i = 0; i < p.getBoundaries().size(); i++) {
                            total += p.getCounts().get(i);
                            Map<String, String> le = new HashMap<>(l);
                            le.put("le", bound(p.getBoundaries().get(i)));
                            out.put(sample(m.getName() + "_bucket", le), (double) total);
                        }
                        Map<String, String> inf = new HashMap<>(l);
                        inf.put("le", "+Inf");
                        out.put(sample(m.getName() + "_bucket", inf), (double) p.getCount());
                        out.put(sample(m.getName() + "_sum", l), p.getSum());
                        out.put(sample(m.getName() + "_count", l), (double) p.getCount());
                    }
                }
                default -> throw new AssertionError(m.getName() + ": " + m.getType());
            }
        }
        return out;
    }

    private static void sameAsText(String store) throws Exception {
        try (Limiter limiter = exercised(store, "otel-jvm-" + store.hashCode())) {
            InMemoryMetricReader reader = InMemoryMetricReader.create();
            try (SdkMeterProvider provider = SdkMeterProvider.builder()
                    .registerMetricReader(reader)
                    .registerMetricProducer(new PolylimitMetricProducer(limiter))
                    .build()) {
                provider.get("app").counterBuilder("app_requests").build().add(2);
                Collection<MetricData> collected = reader.collectAllMetrics();
                assertTrue(collected.stream().anyMatch(m -> m.getName().equals("app_requests")), "the provider's own metrics stay");
                Map<String, Double> exported = otel(collected);
                Map<String, Double> expected = prometheus(limiter.metricsText());
                String sum = sample("polylimit_store_latency_seconds_sum", Map.of());
                assertEquals(expected.remove(sum), exported.remove(sum), 1e-9);
                assertEquals(new TreeMap<>(expected), new TreeMap<>(exported));
                assertEquals(!store.equals("memory"), expected.containsKey(sample("polylimit_breaker_state", Map.of())));
                String denied = sample("polylimit_requests_total",
                    Map.of("policy", "api", "route", "/api/*", "decision", "denied", "source", "store"));
                assertEquals(1.0, exported.get(denied));
                MetricData requests = collected.stream().filter(m -> m.getName().equals("polylimit_requests_total")).findFirst().orElseThrow();
                assertEquals(MetricDataType.LONG_SUM, requests.getType());
                long start = limiter.metricsSnapshot().getStartUnixNanos();
                assertEquals(start, requests.getLongSumData().getPoints().iterator().next().getStartEpochNanos());
                assertEquals("api", requests.getLongSumData().getPoints().iterator().next().getAttributes().get(AttributeKey.stringKey("policy")));
            }
        }
    }

    @Test
    void theOtelMetricsAreThePrometheusTextOnMemory() throws Exception {
        sameAsText("memory");
    }

    @Test
    void theOtelMetricsAreThePrometheusTextOnRedis() throws Exception {
        sameAsText(redis.url());
    }
}
