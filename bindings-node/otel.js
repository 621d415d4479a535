'use strict';
// OpenTelemetry metrics for a limiter, beside its Prometheus text: a MetricProducer of
// @opentelemetry/sdk-metrics (the SDK's hook for metrics aggregated elsewhere) hands a reader every
// family of the limiter's snapshot at each collection, with the same names, labels (as attributes)
// and values, cumulative. No metric name or label is written here: they come from the core.
const { AggregationTemporality, DataPointType } = require('@opentelemetry/sdk-metrics');
const { ValueType } = require('@opentelemetry/api');
const { version } = require('./package.json');

/** The instrumentation scope of every metric the producer hands over. */
const SCOPE = { name: 'polylimit', version };

/** [seconds, nanoseconds] of a time in nanoseconds since the epoch (a double). */
function hrTime(nanos) {
  const seconds = Math.floor(nanos / 1e9);
  return [seconds, Math.max(0, Math.round(nanos - seconds * 1e9))];
}

/** The resource of a producer's result (a reader keeps its provider's own, so this one is unused). */
function emptyResource() {
  try {
    return require('@opentelemetry/resources').emptyResource();
  } catch {
    return { attributes: {}, merge: (other) => other };
  }
}

/** The OpenTelemetry metrics (MetricData) of one `limiter.metricsSnapshot()`, read at `now` (ns). */
function toMetricData(snapshot, now = Date.now() * 1e6) {
  const start = hrTime(snapshot.startUnixNanos);
  const end = hrTime(now);
  return snapshot.families.map((family) => {
    const descriptor = {
      name: family.name,
      description: family.help,
      unit: '',
      valueType: family.kind === 'histogram' ? ValueType.DOUBLE : ValueType.INT,
    };
    if (family.kind === 'histogram') {
      return {
        descriptor,
        aggregationTemporality: AggregationTemporality.CUMULATIVE,
        dataPointType: DataPointType.HISTOGRAM,
        dataPoints: family.points.map((p) => ({
          attributes: { ...p.labels },
          startTime: start,
          endTime: end,
          value: { buckets: { boundaries: p.bounds, counts: p.bucketCounts }, sum: p.sum, count: p.count },
        })),
      };
    }
    const counter = family.kind === 'counter';
    return {
      descriptor,
      aggregationTemporality: AggregationTemporality.CUMULATIVE,
      dataPointType: counter ? DataPointType.SUM : DataPointType.GAUGE,
      ...(counter ? { isMonotonic: true } : {}),
      dataPoints: family.points.map((p) => ({
        attributes: { ...p.labels },
        startTime: counter ? start : end,
        endTime: end,
        value: p.value,
      })),
    };
  });
}

/**
 * `new PeriodicExportingMetricReader({ exporter, metricProducers: [new PolylimitMetricProducer(limiter)] })`:
 * each collection of that reader carries the limiter's metrics under the `polylimit` scope.
 */
class PolylimitMetricProducer {
  /** @param {import('./index').Limiter} limiter */
  constructor(limiter) {
    if (!limiter || typeof limiter.metricsSnapshot !== 'function') {
      throw new TypeError('PolylimitMetricProducer: limiter: not a polylimit Limiter');
    }
    this._limiter = limiter;
    this._resource = emptyResource();
  }

  /** The limiter's metrics now (a snapshot that throws: an error in `errors`, no metrics). */
  async collect() {
    let metrics = [];
    const errors = [];
    try {
      metrics = toMetricData(this._limiter.metricsSnapshot());
    } catch (err) {
      errors.push(err);
    }
    return {
      resourceMetrics: { resource: this._resource, scopeMetrics: metrics.length ? [{ scope: SCOPE, metrics }] : [] },
      errors,
    };
  }
}

module.exports = { PolylimitMetricProducer, toMetricData, SCOPE };
