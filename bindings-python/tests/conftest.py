from __future__ import annotations

import itertools
import os
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
