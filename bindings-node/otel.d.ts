import type { MetricData, MetricProducer, CollectionResult } from '@opentelemetry/sdk-metrics';
import type { Limiter, MetricsSnapshot } from './index';

/** The instrumentation scope of every metric the producer hands over. */
export declare const SCOPE: { name: 'polylimit'; version: string };

/** The OpenTelemetry metrics of one `limiter.metricsSnapshot()`, read at `now` (nanoseconds since the epoch). */
export declare function toMetricData(snapshot: MetricsSnapshot, now?: number): MetricData[];

/**
 * A MetricProducer of @opentelemetry/sdk-metrics: `metricProducers: [new PolylimitMetricProducer(limiter)]`
 * on a reader makes each collection carry the limiter's metrics (the names, labels and values of
 * its Prometheus text; counters and the histogram cumulative).
 */
export declare class PolylimitMetricProducer implements MetricProducer {
  constructor(limiter: Limiter);
  /** The limiter's metrics now. */
  collect(): Promise<CollectionResult>;
}
