from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from redis_server import RedisServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_prefixes = itertools.count()


def vectors_dir() -> Path:
    """``$POLYLIMIT_VECTORS`` (like the Rust runner), default ``tests/conformance``."""
    env = os.environ.get("POLYLIMIT_VECTORS")
    return Path(env) if env else REPO / "tests" / "conformance"


def unique_prefix(tag: str = "py") -> str:
    return f"{tag}-{os.getpid()}-{next(_prefixes)}"


@pytest.fixture(scope="session")
def redis_server():
    server = RedisServer()
    yield server
    server.kill()


@pytest.fixture(params=["memory", "redis"])
def store(request) -> str:
    """Each test using it runs on the memory store and on a real Redis."""
    if request.param == "memory":
        return "memory"
    return request.getfixturevalue("redis_server").url


@pytest.fixture(scope="session")
def redis_cluster():
    """A real 6-node Redis Cluster from the shared harness (tests/topology), for the session;
    closing its stdin stops every server it started."""
    harness = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "topology" / "redis_topology.py"), "cluster"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = harness.stdout.readline()
    assert line, "the cluster harness did not start"
    yield json.loads(line)["url"]
    harness.stdin.close()
    harness.wait(timeout=30)


@pytest.fixture(params=["memory", "redis", "cluster"])
def vector_store(request) -> str:
    """The conformance vectors run on the memory store, a real Redis and a real Redis Cluster."""
    if request.param == "memory":
        return "memory"
    if request.param == "redis":
        return request.getfixturevalue("redis_server").url
    return request.getfixturevalue("redis_cluster")
