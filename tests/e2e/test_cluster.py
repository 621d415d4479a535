"""The example apps of every language on one real Redis Cluster (6 nodes, from
tests/topology): one key through every app is limited exactly, as on one
server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator

import pytest
from conftest import APP_NAMES, REPO, pay_through_every_app

from servers import App, running


@pytest.fixture(scope="module")
def cluster_apps() -> Iterator[Dict[str, App]]:
    harness = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "topology" / "redis_topology.py"), "cluster"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = harness.stdout.readline()
        assert line, "the cluster harness did not start"
        env = {"REDIS_URL": json.loads(line)["url"], "POLYLIMIT_RULES": str(Path(__file__).parent / "polylimit.yaml")}
        with running(APP_NAMES, env) as started:
            yield {app.name: app for app in started}
    finally:
        harness.stdin.close()
        harness.wait(timeout=30)


def test_one_key_through_every_app_on_a_cluster_admits_exactly_the_burst(cluster_apps):
    servers = list(cluster_apps.values())
    assert pay_through_every_app(servers) == [200] * 30 + [429] * 270
    # Decided by the cluster, not by a fallback: each app's metrics count no store error.
    for app in servers:
        metrics = app.request("/metrics").body.decode()
        assert "polylimit_store_errors_total 0\n" in metrics, app.label
