"""The example apps of every language on one real Redis Cluster (6 nodes, from
tests/topology): one key through every app is limited exactly, as on one
server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator

import pytest
from conftest import APP_NAMES, REPO

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
    # 300 payments by one user spread over the apps at once: burst 30, refill 1/min.
    servers = list(cluster_apps.values())
    user = {"X-User": f"user-{uuid.uuid4().hex}"}

    def pay(i):
        return servers[i % len(servers)].request(f"/api/payments/{i}", method="POST", headers=user)

    with ThreadPoolExecutor(max_workers=32) as pool:
        responses = list(pool.map(pay, range(300)))
    assert sorted(r.status for r in responses) == [200] * 30 + [429] * 270
    # Decided by the cluster, not by a fallback: each app's metrics count no store error.
    for app in servers:
        metrics = app.request("/metrics").body.decode()
        assert "polylimit_store_errors_total 0\n" in metrics, app.label
