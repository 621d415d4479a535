"""The three classic scenarios against every app, on one real Redis
(token bucket, 1/s, burst 10, keyed by client IP)."""

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import statuses

import polylimit

RULES = Path(__file__).parent / "polylimit.yaml"


def test_15_sequential_requests_give_10_ok_then_5_refusals(app, run):
    responses = [app.request("/api/classic", headers=run) for _ in range(15)]
    assert statuses(responses) == [200] * 10 + [429] * 5
    assert [r.header("X-RateLimit-Remaining") for r in responses] == [str(n) for n in range(9, -1, -1)] + ["0"] * 5
    for refused in responses[10:]:
        assert refused.header("Retry-After") == "1"
        assert json.loads(refused.body) == {
            "error": "rate_limit_exceeded",
            "message": "Too Many Requests",
            "retry_after": 1,
        }
        assert refused.body == b'{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":1}'


def test_50_concurrent_requests_admit_exactly_10(app, run):
    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(lambda _: app.request("/api/classic", headers=run), range(50)))
    assert sorted(statuses(responses)) == [200] * 10 + [429] * 40


def test_a_drained_key_refills_one_request_per_second(app, run, redis, monkeypatch):
    # No sleep: the key is drained 2 s in the past (now_ms) through the core
    # with the apps' own rules file and Redis, as a request from this client
    # would be; the app then decides on Redis's clock, now.
    monkeypatch.setenv("REDIS_URL", redis.url)  # as the apps are given it
    limiter = polylimit.Limiter.from_file(RULES)
    two_seconds_ago = int(time.time() * 1000) - 2000
    request = {"method": "GET", "path": "/api/classic", "peer": "127.0.0.1",
               "headers": [["X-Run", run["X-Run"]]], "now_ms": two_seconds_ago}
    try:
        drained = [limiter.check_request_sync(request).status for _ in range(11)]
    finally:
        limiter.close()
    assert drained == [None] * 10 + [429]
    assert statuses(app.request("/api/classic", headers=run) for _ in range(3)) == [200, 200, 429]
