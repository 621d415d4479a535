"""The example apps on one real redis-server, for the end-to-end tests."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterator, List, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "examples"), str(REPO / "bindings-python" / "tests")]

from redis_server import RedisServer  # noqa: E402  (bindings-python/tests: start, PING, kill by pid)
from servers import App, running  # noqa: E402  (examples/servers.py: the example apps)

# Every app the examples ship. The issue names Express, FastAPI and Go; Fastify comes along;
# Spring Boot is the JVM's (issue 21); Django, Flask, Koa, Hono, NestJS, gin, echo, WebFlux and Ktor
# came with issue 37.
APP_NAMES = ["fastapi", "django", "flask", "express", "fastify", "koa", "hono", "nestjs", "go", "gin", "echo",
             "spring", "webflux", "ktor"]


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


def pay_through_every_app(servers: Sequence[App], count: int = 300) -> List[int]:
    """`count` payments by one new user on `count` ids, spread over the apps at
    once: the route template is the key (burst 30, refill 1/min). The statuses, sorted."""
    user = {"X-User": f"user-{uuid.uuid4().hex}"}

    def pay(i):
        return servers[i % len(servers)].request(f"/api/payments/{i}", method="POST", headers=user)

    with ThreadPoolExecutor(max_workers=32) as pool:
        return sorted(r.status for r in pool.map(pay, range(count)))
