"""The example apps on one real redis-server, for the end-to-end tests."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Dict, Iterator, List

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "bindings-python" / "tests")]

from redis_server import RedisServer  # noqa: E402  (bindings-python/tests: start, PING, kill by pid)
from servers import App, running  # noqa: E402  (examples/servers.py: the example apps)

# Every app the examples ship. The issue names Express, FastAPI and Go; Fastify comes along.
APP_NAMES = ["fastapi", "express", "fastify", "go"]


@pytest.fixture(scope="session")
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.kill()


@pytest.fixture(scope="session")
def apps(redis: RedisServer) -> Iterator[Dict[str, App]]:
    env = {"REDIS_URL": redis.url, "POLYLIMIT_RULES": str(Path(__file__).parent / "polylimit.yaml")}
    with running(APP_NAMES, env) as started:
        yield {app.name: app for app in started}


@pytest.fixture(params=APP_NAMES)
def app(request, apps: Dict[str, App]) -> App:
    return apps[request.param]


@pytest.fixture
def run() -> Dict[str, str]:
    """Headers naming a key no other test uses."""
    return {"X-Run": uuid.uuid4().hex}


def statuses(responses) -> List[int]:
    return [r.status for r in responses]
