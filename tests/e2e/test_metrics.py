"""Every app serves the core's Prometheus metrics: decisions per policy and
rule, never a raw key or address in a label."""

import re

ALLOWED = 'polylimit_requests_total{policy="classic",route="classic",decision="allowed",source="store"}'
DENIED = 'polylimit_requests_total{policy="classic",route="classic",decision="denied",source="store"}'
BLOCKED = 'rate_limit_blocked_total{policy="classic",route="classic"}'


def counters(app):
    text = app.request("/metrics").body.decode()
    values = {name: int(m.group(1)) if (m := re.search(rf"^{re.escape(name)} (\d+)$", text, re.M)) else 0
              for name in (ALLOWED, DENIED, BLOCKED)}
    return text, values


def test_metrics_count_decisions_with_bounded_labels(app, run):
    _, before = counters(app)
    for _ in range(11):
        app.request("/api/classic", headers=run)
    text, after = counters(app)
    assert {name: after[name] - before[name] for name in after} == {ALLOWED: 10, DENIED: 1, BLOCKED: 1}, text
    assert "polylimit_store_latency_seconds_count" in text and "polylimit_breaker_state" in text
    assert run["X-Run"] not in text and "127.0.0.1" not in text
