"""OpenTelemetry metrics for a limiter, beside its Prometheus text.

The core keeps one registry of counters; ``Limiter.metrics_snapshot()`` reads
it (the Prometheus text is rendered from the same snapshot), and this module
hands it to opentelemetry-sdk with the same names, labels (as attributes) and
values, cumulative, at each collection of a ``MetricReader``::

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from polylimit.otel import MetricProducer, attach

    reader = attach(PeriodicExportingMetricReader(exporter), MetricProducer(limiter))
    provider = MeterProvider(metric_readers=[reader])

``MetricProducer`` is the OpenTelemetry specification's bridge for
pre-aggregated metrics (``produce()`` returns them). opentelemetry-sdk for
Python has no ``metric_producers`` hook yet (open-telemetry/opentelemetry-python
issue 4768), so ``attach`` adds the producers' metrics to what the reader
collects from its ``MeterProvider``. Install with ``pip install polylimit[otel]``.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Sequence

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from . import __version__

__all__ = ["MetricProducer", "attach", "metrics"]

#: The instrumentation scope of every metric this module produces.
SCOPE = InstrumentationScope("polylimit", __version__)


def metrics(snapshot: Dict[str, Any], time_unix_nano: Optional[int] = None) -> List[Metric]:
    """The OpenTelemetry metrics of one ``Limiter.metrics_snapshot()``:
    counters as monotonic cumulative sums, gauges as gauges, histograms as
    cumulative explicit-bucket histograms (no min or max: the core does not
    record them)."""
    now = time.time_ns() if time_unix_nano is None else time_unix_nano
    start = snapshot["start_unix_nanos"]
    out = []
    for family in snapshot["families"]:
        kind = family["kind"]
        points = family["points"]
        if kind == "histogram":
            data: Any = Histogram(
                data_points=[
                    HistogramDataPoint(
                        attributes=dict(p["labels"]),
                        start_time_unix_nano=start,
                        time_unix_nano=now,
                        count=p["count"],
                        sum=p["sum"],
                        bucket_counts=list(p["bucket_counts"]),
                        explicit_bounds=list(p["bounds"]),
                        min=math.inf,
                        max=-math.inf,
                    )
                    for p in points
                ],
                aggregation_temporality=AggregationTemporality.CUMULATIVE,
            )
        else:
            numbers = [
                NumberDataPoint(
                    attributes=dict(p["labels"]),
                    start_time_unix_nano=start if kind == "counter" else 0,
                    time_unix_nano=now,
                    value=p["value"],
                )
                for p in points
            ]
            if kind == "counter":
                data = Sum(
                    data_points=numbers,
                    aggregation_temporality=AggregationTemporality.CUMULATIVE,
                    is_monotonic=True,
                )
            else:
                data = Gauge(data_points=numbers)
        out.append(Metric(name=family["name"], description=family["help"], unit="", data=data))
    return out


class MetricProducer:
    """The metrics of one limiter, read from the core at each ``produce()``."""

    def __init__(self, limiter: Any) -> None:
        self._limiter = limiter

    def produce(self, timeout_millis: float = 10_000) -> List[ScopeMetrics]:
        """The limiter's metrics now, under the ``polylimit`` scope."""
        del timeout_millis  # a snapshot is read from memory, never waited for
        found = metrics(self._limiter.metrics_snapshot())
        return [ScopeMetrics(scope=SCOPE, metrics=found, schema_url="")]


def _merged(data: Optional[MetricsData], producers: Sequence[MetricProducer], resource: Resource, timeout_millis: float) -> MetricsData:
    produced = [scope for producer in producers for scope in producer.produce(timeout_millis)]
    if data is None or not data.resource_metrics:
        return MetricsData(resource_metrics=[ResourceMetrics(resource=resource, scope_metrics=produced, schema_url="")])
    first, *rest = data.resource_metrics
    first = ResourceMetrics(
        resource=first.resource,
        scope_metrics=list(first.scope_metrics) + produced,
        schema_url=first.schema_url,
    )
    return MetricsData(resource_metrics=[first, *rest])


def attach(reader: MetricReader, *producers: MetricProducer, resource: Optional[Resource] = None) -> MetricReader:
    """Makes every collection of ``reader`` (an ``InMemoryMetricReader``, a
    ``PeriodicExportingMetricReader``, a Prometheus reader…) carry the
    producers' metrics beside those of its ``MeterProvider``; returns
    ``reader``. Call it before or after the reader is registered.
    ``resource`` is used only when the provider collected nothing (its
    own resource otherwise; default: ``Resource.create()``)."""
    if not producers:
        raise ValueError("attach: producers: none given")
    fallback = resource if resource is not None else Resource.create()

    def wrap(collect: Any) -> Any:
        if collect is None:
            return None

        def collect_with_producers(metric_reader: MetricReader, timeout_millis: float = 10_000) -> MetricsData:
            return _merged(collect(metric_reader, timeout_millis=timeout_millis), producers, fallback, timeout_millis)

        return collect_with_producers

    # The provider hands each reader its collect callback (MetricReader's
    # internal hook, present since opentelemetry-sdk 1.10): wrapped here now
    # if it was set, and whenever it is set later.
    register = reader._set_collect_callback
    reader._set_collect_callback = lambda func: register(wrap(func))  # type: ignore[method-assign]
    if reader._collect is not None:
        register(wrap(reader._collect))
    return reader

