"""The Grafana dashboard (docs/grafana/polylimit-dashboard.json) names only
metrics the core exports: the metric names of every panel's PromQL (and of
the template variables' queries) are read out of the expressions and looked
up in the families of a real limiter on a real Redis, after checks that
touch every family the dashboard shows. Run: `.venv/bin/python -m pytest -q
tests/docs/test_dashboard.py` (after `make python-build`; needs redis-server)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana" / "polylimit-dashboard.json"
sys.path.insert(0, str(REPO / "bindings-python" / "tests"))
from redis_server import RedisServer  # noqa: E402

import polylimit  # noqa: E402

NOW = 1_700_000_000_000
# PromQL words that are not metric names (functions are found by their "(").
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
            "group_right", "inf", "nan", "Inf", "NaN"}
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set:
    """The metric names a PromQL expression (or a Grafana label_values() query) reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"label_values\(\s*([^,)]+)(?:,[^)]*)?\)", r"\1", e)
    e = re.sub(r"\{[^}]*\}", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in IDENT.finditer(e):
        if m.start() > 0 and (e[m.start() - 1].isdigit() or e[m.start() - 1] in ".$"):
            continue  # 1e3, $var
        if e[m.end():].lstrip().startswith("(") or m.group() in KEYWORDS:
            continue
        names.add(m.group())
    return names


def expressions(dashboard: dict) -> list:
    """(where, expr) of every panel target and query variable."""
    found = []

    def panels(items):
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r} target {target['refId']}", target["expr"]))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found.append((f"variable {var['name']}", query))
    return found


def exported(snapshot: dict) -> set:
    """Every sample name a family exports (a histogram's _bucket, _sum, _count)."""
    names = set()
    for family in snapshot["families"]:
        if family["kind"] == "histogram":
            names.update(family["name"] + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family["name"])
    return names


@pytest.fixture(scope="module")
def families() -> set:
    redis = RedisServer()
    try:
        limiter = polylimit.Limiter(rules=f"""
store: {redis.url}
block_cache: true
overrides: true
anomaly_log: false
policies:
  api: {{ rate: 2/min }}
  watch: {{ rate: 1000/s, adaptive: {{ window: 1s, horizon: 4s, factor: 3, floor: 4/s }} }}
rules:
  - {{ match: {{ path: /api/* }}, key: [ip], policy: api }}
""")
        request = {"method": "GET", "path": "/api/x", "route": "/api/{id}", "peer": "203.0.113.7", "now_ms": NOW}
        for _ in range(3):
            limiter.check_request_sync(request)
        for _ in range(4):
            limiter.check_sync("user:1", now_ms=NOW)
        limiter.set_limit_sync(policy="api", rate="3/min")
        limiter.reload_sync()
        snapshot = limiter.metrics_snapshot()
        text = limiter.metrics_text()
        limiter.close()
    finally:
        redis.kill()
    names = exported(snapshot)
    for family in snapshot["families"]:
        assert f"# TYPE {family['name']} {family['kind']}" in text
    return names


def test_every_panel_names_only_exported_metrics(families) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    found = expressions(dashboard)
    assert found, "the dashboard has no queries"
    for where, expr in found:
        names = metric_names(expr)
        assert names, f"{where}: no metric name found in {expr!r}"
        missing = names - families
        assert not missing, f"{where}: {sorted(missing)} not exported by the core (expr {expr!r})"


def test_the_dashboard_shows_each_part() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    read = set().union(*(metric_names(e) for _, e in expressions(dashboard)))
    for name in ("polylimit_requests_total", "rate_limit_blocked_total", "polylimit_store_latency_seconds_bucket",
                 "polylimit_store_errors_total", "polylimit_breaker_state", "polylimit_anomalies_total",
                 "polylimit_config_reloads_total", "polylimit_limit_changes_total"):
        assert name in read, name
    var = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert var["datasource"]["type"] == "datasource" and var["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


def test_the_check_finds_a_name_the_core_does_not_export(families) -> None:
    expr = 'sum by (policy) (rate(polylimit_nope_total{policy=~"$policy"}[$__rate_interval])) / on(policy) polylimit_breaker_state'
    assert metric_names(expr) == {"polylimit_nope_total", "polylimit_breaker_state"}
    assert metric_names(expr) - families == {"polylimit_nope_total"}
    assert metric_names("histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))") == {"x_bucket"}
    assert metric_names("label_values(polylimit_requests_total, policy)") == {"polylimit_requests_total"}
