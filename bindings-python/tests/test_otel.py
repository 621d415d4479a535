"""polylimit.otel (issue 38): a limiter's metrics through opentelemetry-sdk's
InMemoryMetricReader carry the names, labels and values of its Prometheus
text, on memory and a real Redis."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("opentelemetry.sdk.metrics", reason="opentelemetry-sdk is in requirements-dev.txt")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import (  # noqa: E402
    AggregationTemporality,
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Sum,
)

import polylimit  # noqa: E402
from polylimit.otel import MetricProducer, attach  # noqa: E402

NOW = 1_700_000_000_000
RULES = """
store: {store}
prefix: {prefix}
block_cache: true
anomaly_log: false
policies:
  api: {{ rate: 2/min }}
  watch: {{ rate: 1000/s, adaptive: {{ window: 1s, horizon: 4s, factor: 3, floor: 4/s }} }}
rules:
  - {{ match: {{ path: /api/* }}, key: [ip], policy: api }}
"""
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def prometheus(text: str) -> dict:
    """Samples of Prometheus text: (name, labels) → value."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        assert m, line
        labels = frozenset(LABEL.findall(m.group(2) or ""))
        samples[(m.group(1), labels)] = float(m.group(3))
    return samples


def fmt(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else repr(bound)


def otel_samples(data) -> dict:
    """The same samples from OpenTelemetry metrics (histograms as cumulative buckets)."""
    samples = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            if sm.scope.name != "polylimit":
                continue
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    labels = frozenset(p.attributes.items())
                    if isinstance(metric.data, Histogram):
                        total = 0
                        for bound, n in zip(p.explicit_bounds, p.bucket_counts):
                            total += n
                            samples[(metric.name + "_bucket", labels | {("le", fmt(bound))})] = float(total)
                        samples[(metric.name + "_bucket", labels | {("le", "+Inf")})] = float(p.count)
                        samples[(metric.name + "_sum", labels)] = float(p.sum)
                        samples[(metric.name + "_count", labels)] = float(p.count)
                    else:
                        samples[(metric.name, labels)] = float(p.value)
    return samples


def exercised(store: str, prefix: str) -> polylimit.Limiter:
    limiter = polylimit.Limiter(rules=RULES.format(store=store, prefix=prefix))
    request = {"method": "GET", "path": "/api/x", "route": "/api/{id}", "peer": "203.0.113.7", "now_ms": NOW}
    for _ in range(3):
        limiter.check_request_sync(request)
    for _ in range(4):
        limiter.check_sync("user:2", now_ms=NOW)
    return limiter


def test_the_otel_metrics_are_the_prometheus_text(store) -> None:
    limiter = exercised(store, f"otel-{id(store)}")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[attach(reader, MetricProducer(limiter))])
    try:
        data = reader.get_metrics_data()
        # Read after the collection: nothing is checked in between.
        text = limiter.metrics_text()
    finally:
        provider.shutdown()
    exported = otel_samples(data)
    expected = prometheus(text)
    # The latency sum is a float rendered twice; the rest are exact.
    key = ("polylimit_store_latency_seconds_sum", frozenset())
    assert exported.pop(key) == pytest.approx(expected.pop(key))
    assert exported == expected
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert "rate_limit_blocked_total" in names and "polylimit_anomalies_total" in names
    assert ("polylimit_breaker_state" in names) == (store != "memory")
    routed = ("polylimit_requests_total", frozenset({("policy", "api"), ("route", "/api/*"), ("decision", "denied"), ("source", "store")}))
    assert exported[routed] == 1


def test_kinds_and_temporality() -> None:
    limiter = exercised("memory", "kinds")
    by_name = {}
    for scope in MetricProducer(limiter).produce():
        assert scope.scope.name == "polylimit" and scope.scope.version == polylimit.__version__
        by_name.update({m.name: m for m in scope.metrics})
    requests = by_name["polylimit_requests_total"].data
    assert isinstance(requests, Sum) and requests.is_monotonic
    assert requests.aggregation_temporality == AggregationTemporality.CUMULATIVE
    assert isinstance(by_name["polylimit_anomalous_keys"].data, Gauge)
    latency = by_name["polylimit_store_latency_seconds"].data
    assert isinstance(latency, Histogram) and latency.aggregation_temporality == AggregationTemporality.CUMULATIVE
    point = latency.data_points[0]
    assert len(point.bucket_counts) == len(point.explicit_bounds) + 1 and sum(point.bucket_counts) == point.count
    start = limiter.metrics_snapshot()["start_unix_nanos"]
    assert requests.data_points[0].start_time_unix_nano == start > 0


def test_attach_keeps_the_providers_own_metrics_and_works_after_registration() -> None:
    limiter = exercised("memory", "beside")
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        attach(reader, MetricProducer(limiter))
        provider.get_meter("app").create_counter("app_requests").add(2)
        first = reader.get_metrics_data()
        limiter.check_sync("user:3", now_ms=NOW)
        second = reader.get_metrics_data()
    finally:
        provider.shutdown()
    scopes = {sm.scope.name for rm in first.resource_metrics for sm in rm.scope_metrics}
    assert scopes == {"app", "polylimit"}

    def allowed(data) -> float:
        key = ("polylimit_requests_total", frozenset({("policy", "api"), ("route", ""), ("decision", "allowed"), ("source", "store")}))
        return otel_samples(data)[key]

    assert allowed(second) == allowed(first) + 1, "cumulative: each collection reads the counters now"


def test_attach_needs_a_producer() -> None:
    with pytest.raises(ValueError, match="producers"):
        attach(InMemoryMetricReader())
