package dev.polylimit.otel;

import dev.polylimit.Limiter;
import dev.polylimit.MetricFamily;
import dev.polylimit.MetricLabel;
import dev.polylimit.MetricPoint;
import dev.polylimit.MetricsSnapshot;
import io.opentelemetry.api.common.Attributes;
import io.opentelemetry.api.common.AttributesBuilder;
import io.opentelemetry.sdk.common.InstrumentationScopeInfo;
import io.opentelemetry.sdk.metrics.data.AggregationTemporality;
import io.opentelemetry.sdk.metrics.data.Data;
import io.opentelemetry.sdk.metrics.data.GaugeData;
import io.opentelemetry.sdk.metrics.data.HistogramData;
import io.opentelemetry.sdk.metrics.data.HistogramPointData;
import io.opentelemetry.sdk.metrics.data.LongPointData;
import io.opentelemetry.sdk.metrics.data.MetricData;
import io.opentelemetry.sdk.metrics.data.MetricDataType;
import io.opentelemetry.sdk.metrics.data.SumData;
import io.opentelemetry.sdk.metrics.export.MetricProducer;
import io.opentelemetry.sdk.resources.Resource;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Objects;

/**
 * The metrics of one limiter for an OpenTelemetry reader: every family of
 * {@code limiter.metricsSnapshot()} with the names, labels (as attributes)
 * and values of its Prometheus text, counters as monotonic cumulative sums,
 * gauges as gauges, the store latency as a cumulative explicit-bucket
 * histogram (without min and max, which the core does not record).
 *
 * <pre>{@code
 * SdkMeterProvider provider = SdkMeterProvider.builder()
 *     .registerMetricReader(reader)
 *     .registerMetricProducer(new PolylimitMetricProducer(limiter))
 *     .build();
 * }</pre>
 */
public final class PolylimitMetricProducer implements MetricProducer {
    /** The instrumentation scope name of every metric this producer hands over. */
    public static final String SCOPE_NAME = "polylimit";

    private final Limiter limiter;
    private final InstrumentationScopeInfo scope;

    /** The producer of {@code limiter}'s metrics, read from the core at each collection. */
    public PolylimitMetricProducer(Limiter limiter) {
        this.limiter = Objects.requireNonNull(limiter, "limiter");
        this.scope = InstrumentationScopeInfo.builder(SCOPE_NAME).setVersion(dev.polylimit.Polylimit_jvmKt.version()).build();
    }

    /** The limiter's metrics now, under {@code resource} and the polylimit scope. */
    @Override
    public Collection<MetricData> produce(Resource resource) {
        return metrics(limiter.metricsSnapshot(), resource, scope, System.currentTimeMillis() * 1_000_000L);
    }

    /** The OpenTelemetry metrics of one snapshot read at {@code nowNanos} (since the epoch). */
    public static List<MetricData> metrics(MetricsSnapshot snapshot, Resource resource, InstrumentationScopeInfo scope, long nowNanos) {
        long start = snapshot.getStartUnixNanos();
        List<MetricData> out = new ArrayList<>(snapshot.getFamilies().size());
        for (MetricFamily family : snapshot.getFamilies()) {
            MetricDataType type;
            Data<?> data;
            switch (family.getKind()) {
                case "counter", "gauge" -> {
                    boolean counter = family.getKind().equals("counter");
                    List<LongPointData> points = new ArrayList<>();
                    for (MetricPoint p : family.getPoints()) {
                        points.add(LongPointData.create(counter ? start : nowNanos, nowNanos, attributes(p), p.getValue()));
                    }
                    if (counter) {
                        type = MetricDataType.LONG_SUM;
                        data = SumData.createLongSumData(true, AggregationTemporality.CUMULATIVE, points);
                    } else {
                        type = MetricDataType.LONG_GAUGE;
                        data = GaugeData.createLongGaugeData(points);
                    }
                }
                case "histogram" -> {
                    List<HistogramPointData> points = new ArrayList<>();
                    for (MetricPoint p : family.getPoints()) {
                        points.add(HistogramPointData.create(start, nowNanos, attributes(p), p.getSum(),
                            false, 0, false, 0, p.getBounds(), p.getBucketCounts()));
                    }
                    type = MetricDataType.HISTOGRAM;
                    data = HistogramData.create(AggregationTemporality.CUMULATIVE, points);
                }
                default -> throw new IllegalStateException(
                    "metric " + family.getName() + ": kind " + family.getKind() + " is not counter, gauge or histogram");
            }
            out.add(new Metric(resource, scope, family.getName(), family.getHelp(), type, data));
        }
        return out;
    }

    private static Attributes attributes(MetricPoint point) {
        AttributesBuilder builder = Attributes.builder();
        for (MetricLabel label : point.getLabels()) {
            builder.put(label.getName(), label.getValue());
        }
        return builder.build();
    }

    /** One metric: the SDK's MetricData interface over the values above. */
    private record Metric(Resource resource, InstrumentationScopeInfo scope, String name, String description,
                          MetricDataType type, Data<?> data) implements MetricData {
        @Override public Resource getResource() { return resource; }
        @Override public InstrumentationScopeInfo getInstrumentationScopeInfo() { return scope; }
        @Override public String getName() { return name; }
        @Override public String getDescription() { return description; }
        @Override public String getUnit() { return ""; }
        @Override public MetricDataType getType() { return type; }
        @Override public Data<?> getData() { return data; }
    }
}
