'use strict';
// polylimit/otel (issue 38): a limiter's metrics, collected by an @opentelemetry/sdk-metrics
// reader through PolylimitMetricProducer, carry the names, labels and values of its Prometheus
// text, on memory and a real Redis.
const test = require('node:test');
const assert = require('node:assert/strict');
const {
  MeterProvider,
  MetricReader,
  AggregationTemporality,
  DataPointType,
  InMemoryMetricExporter,
  PeriodicExportingMetricReader,
} = require('@opentelemetry/sdk-metrics');
const { Limiter } = require('..');
const { PolylimitMetricProducer } = require('../otel');
const { RedisServer } = require('./support');

const NOW = 1_700_000_000_000;
let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

const rules = (store, prefix) => `
store: ${store}
prefix: ${prefix}
block_cache: true
anomaly_log: false
policies:
  api: { rate: 2/min }
  watch: { rate: 1000/s, adaptive: { window: 1s, horizon: 4s, factor: 3, floor: 4/s } }
rules:
  - { match: { path: /api/* }, key: [ip], policy: api }
`;

async function exercised(store, prefix) {
  const limiter = Limiter.fromRules(rules(store, prefix));
  const request = { method: 'GET', path: '/api/x', route: '/api/{id}', peer: '203.0.113.7', nowMs: NOW };
  for (let i = 0; i < 3; i++) await limiter.checkRequest(request);
  for (let i = 0; i < 4; i++) await limiter.check('user:2', { nowMs: NOW });
  return limiter;
}

const sample = (name, labels) =>
  `${name}{${Object.keys(labels)
    .sort()
    .map((k) => `${k}=${labels[k]}`)
    .join(',')}}`;

/** Prometheus text → { sample: value }. */
function prometheus(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, line);
    const labels = {};
    for (const kv of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[kv[1]] = kv[2];
    out[sample(m[1], labels)] = Number(m[3]);
  }
  return out;
}

/** The same samples from the polylimit scope of a collection (histograms as cumulative buckets). */
function otelSamples(resourceMetrics) {
  const out = {};
  for (const scope of resourceMetrics.scopeMetrics) {
    if (scope.scope.name !== 'polylimit') continue;
    for (const metric of scope.metrics) {
      const name = metric.descriptor.name;
      for (const p of metric.dataPoints) {
        if (metric.dataPointType === DataPointType.HISTOGRAM) {
          let total = 0;
          p.value.buckets.boundaries.forEach((bound, i) => {
            total += p.value.buckets.counts[i];
            out[sample(`${name}_bucket`, { ...p.attributes, le: String(bound) })] = total;
          });
          out[sample(`${name}_bucket`, { ...p.attributes, le: '+Inf' })] = p.value.count;
          out[sample(`${name}_sum`, p.attributes)] = p.value.sum;
          out[sample(`${name}_count`, p.attributes)] = p.value.count;
        } else {
          out[sample(name, p.attributes)] = p.value;
        }
      }
    }
  }
  return out;
}

/** A reader whose collect() is called by the test. */
class TestReader extends MetricReader {
  async onForceFlush() {}
  async onShutdown() {}
}

for (const store of ['memory', 'redis']) {
  test(`the OpenTelemetry metrics are the Prometheus text (${store})`, async () => {
    const limiter = await exercised(store === 'memory' ? 'memory' : redis.url, `otel-node-${store}`);
    const reader = new TestReader({ metricProducers: [new PolylimitMetricProducer(limiter)] });
    const provider = new MeterProvider({ readers: [reader] });
    try {
      const { resourceMetrics, errors } = await reader.collect();
      assert.deepEqual(errors, []);
      const exported = otelSamples(resourceMetrics);
      const expected = prometheus(limiter.metricsText());
      const sum = 'polylimit_store_latency_seconds_sum{}';
      assert.ok(Math.abs(exported[sum] - expected[sum]) < 1e-9, `${exported[sum]} ${expected[sum]}`);
      delete exported[sum];
      delete expected[sum];
      assert.deepEqual(exported, expected);
      assert.equal('polylimit_breaker_state{}' in expected, store === 'redis');
      const denied = sample('polylimit_requests_total', { policy: 'api', route: '/api/*', decision: 'denied', source: 'store' });
      assert.equal(exported[denied], 1);
    } finally {
      await provider.shutdown();
      limiter.close();
    }
  });
}

test('kinds, temporality and start time; beside the provider’s own metrics, through an exporter', async () => {
  const limiter = await exercised('memory', 'otel-node-kinds');
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({
    exporter,
    exportIntervalMillis: 3_600_000,
    metricProducers: [new PolylimitMetricProducer(limiter)],
  });
  const provider = new MeterProvider({ readers: [reader] });
  try {
    provider.getMeter('app').createCounter('app_requests').add(2);
    await reader.forceFlush();
    const [batch] = exporter.getMetrics();
    const scopes = batch.scopeMetrics.map((s) => s.scope.name).sort();
    assert.deepEqual(scopes, ['app', 'polylimit']);
    const byName = Object.fromEntries(
      batch.scopeMetrics.find((s) => s.scope.name === 'polylimit').metrics.map((m) => [m.descriptor.name, m]),
    );
    const requests = byName.polylimit_requests_total;
    assert.equal(requests.dataPointType, DataPointType.SUM);
    assert.equal(requests.isMonotonic, true);
    assert.equal(requests.aggregationTemporality, AggregationTemporality.CUMULATIVE);
    assert.equal(byName.polylimit_anomalous_keys.dataPointType, DataPointType.GAUGE);
    const latency = byName.polylimit_store_latency_seconds.dataPoints[0].value;
    assert.equal(latency.buckets.counts.length, latency.buckets.boundaries.length + 1);
    const [seconds] = requests.dataPoints[0].startTime;
    assert.equal(seconds, Math.floor(limiter.metricsSnapshot().startUnixNanos / 1e9));
  } finally {
    await provider.shutdown();
    limiter.close();
  }
});

test('a snapshot that fails is an error of the collection, not a crash', async () => {
  const failing = { metricsSnapshot: () => { throw new Error('boom'); } };
  const { resourceMetrics, errors } = await new PolylimitMetricProducer(failing).collect();
  assert.deepEqual(resourceMetrics.scopeMetrics, []);
  assert.equal(errors.length, 1);
  assert.throws(() => new PolylimitMetricProducer({}), /limiter/);
});
