"""Peek and reset through the Python API, on the memory store and a real Redis:
a peek is the decision (or outcome) a check would get and charges nothing;
reset_request forgets what a request would be charged, penalty blocks included."""

from __future__ import annotations

import asyncio

import pytest
from conftest import unique_prefix

import polylimit

NOW = 1_700_000_000_000

RULES = {
    "policies": {
        "api": {"rate": "100/min", "burst": 100},
        "login": {
            "algorithm": "fixed_window",
            "rate": "3/15m",
            "penalty": {"threshold": 2, "within": "15m", "cooldowns": ["1h"]},
        },
    },
    "rules": [
        {"match": {"path": "/api/*"}, "key": ["ip"], "policy": "api"},
        {"match": {"method": "POST", "path": "/api/login"}, "key": ["user", "ip"], "policy": "login"},
    ],
}


def login(ip: str, user: str, now_ms: int) -> dict:
    return {"method": "POST", "path": "/api/login", "peer": ip, "user": user, "now_ms": now_ms}


def seen(outcome: polylimit.Outcome) -> tuple:
    return (outcome.status, outcome.headers, outcome.body, [d["remaining"] for d in outcome.decisions])


def test_peek_is_the_next_check_and_charges_nothing(store: str) -> None:
    limiter = polylimit.Limiter(policy={"rate": "10/s", "burst": 3}, store=store, timeout="10s", prefix=unique_prefix("peek"))

    async def main() -> None:
        for i in range(5):
            first = await limiter.peek("k", now_ms=NOW)
            second = limiter.peek_sync("k", cost=1, now_ms=NOW)
            assert isinstance(first, polylimit.Decision)
            assert first.to_dict() == second.to_dict()
            checked = await limiter.check("k", now_ms=NOW)
            assert checked.to_dict() == first.to_dict(), i
        denied = await limiter.peek("k", cost=2, now_ms=NOW)
        assert (denied.allowed, denied.remaining, denied.retry_after_ms) == (False, 0, 200)

    asyncio.run(main())
    metrics = limiter.metrics_text()
    limiter.peek_sync("k", now_ms=NOW)
    if store == "memory":  # (a Redis peek adds to the store latency histogram)
        assert limiter.metrics_text() == metrics, "a peek is not counted as a request"
    with pytest.raises(polylimit.ConfigError) as e:
        limiter.peek_sync("k", cost=0)
    assert e.value.field == "cost"
    limiter.close()
    with pytest.raises(polylimit.ClosedError):
        limiter.peek_sync("k")


def test_peek_request_and_reset_request(store: str) -> None:
    limiter = polylimit.Limiter(rules=dict(RULES, store=store, timeout="10s", prefix=unique_prefix("req")))
    ann, bob = "203.0.113.7", "198.51.100.9"

    async def main() -> None:
        for i in range(6):
            req = login(ann, "ann", NOW + i * 1000)
            peeked = await limiter.peek_request(req)
            assert isinstance(peeked, polylimit.Outcome)
            assert seen(peeked) == seen(limiter.peek_request_sync(req))
            checked = await limiter.check_request(req)
            if i == 4:  # the denial that starts the block: a peek records nothing
                assert peeked.decisions[1]["source"] == "store"
                assert checked.decisions[1]["source"] == "penalty"
            else:
                assert seen(peeked) == seen(checked), i
            assert (checked.status is not None) == (i >= 3), i
        blocked = await limiter.peek_request(login(ann, "ann", NOW + 7000))
        assert blocked.status == 429
        assert ("Retry-After", "3597") in blocked.headers

        # Bob's state is made at the time of Ann's reset: made at NOW, it would be idle (full
        # again) by then, and the memory store's sampling sweep may reclaim idle state.
        bob_api = {"path": "/api/x", "peer": bob, "now_ms": NOW + 8000}
        await limiter.check_request(bob_api)
        assert await limiter.reset_request(login(ann, "ann", NOW + 8000)) == 2
        again = await limiter.check_request(login(ann, "ann", NOW + 8000))
        assert again.status is None
        assert [d["remaining"] for d in again.decisions] == [99, 2]
        bob_next = await limiter.check_request(bob_api)
        assert bob_next.decisions[0]["remaining"] == 98  # Bob's state stays

    asyncio.run(main())
    assert limiter.reset_request_sync({"path": "/health", "peer": ann}) == 0
    assert limiter.reset_request_sync(login(ann, "ann", NOW + 9000)) == 2


def test_reset_forgets_a_penalty_block(store: str) -> None:
    policy = {"rate": "1/h", "burst": 1, "penalty": {"threshold": 1, "within": "1m", "cooldowns": ["1h"]}}
    limiter = polylimit.Limiter(policy=policy, store=store, timeout="10s", prefix=unique_prefix("reset"))
    assert limiter.check_sync("k", now_ms=NOW).allowed
    assert limiter.check_sync("k", now_ms=NOW).source == "penalty"
    assert limiter.peek_sync("k", now_ms=NOW + 1000).source == "penalty"

    async def main() -> None:
        await limiter.reset("k")

    asyncio.run(main())
    assert limiter.peek_sync("k", now_ms=NOW + 1000).allowed
    assert limiter.check_sync("k", now_ms=NOW + 1000).allowed
    limiter.reset_sync("k")
    assert limiter.check_sync("k", now_ms=NOW + 1000).allowed


def test_a_policy_limiter_peeks_and_resets_requests_by_its_key() -> None:
    """``Limiter(policy=...)`` keys requests by ``ip`` (its one rule)."""
    limiter = polylimit.Limiter(policy={"rate": "10/s", "burst": 1}, prefix=unique_prefix("one"))
    req = {"path": "/", "peer": "203.0.113.7", "now_ms": NOW}
    assert limiter.peek_request_sync(req).status is None
    assert limiter.check_request_sync(req).status is None
    assert limiter.peek_request_sync(req).status == 429
    assert limiter.reset_request_sync(req) == 1
    assert limiter.check_request_sync(req).status is None
    with pytest.raises(polylimit.ConfigError):
        limiter.reset_request_sync({"path": "/", "cost": "x"})


def test_while_the_store_is_down_a_peek_answers_by_the_fallback() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on: every store call fails at once
        s.bind(("127.0.0.1", 0))
        store = f"redis://127.0.0.1:{s.getsockname()[1]}"
    limiter = polylimit.Limiter(policy={"rate": "2/min", "burst": 2, "on_store_error": "local"}, store=store)
    for _ in range(3):
        d = limiter.peek_sync("k", now_ms=NOW)
        assert (d.allowed, d.remaining, d.source) == (True, 1, "local")
    assert limiter.check_sync("k", now_ms=NOW).remaining == 1
    assert limiter.peek_sync("k", now_ms=NOW).remaining == 0
    closed = polylimit.Limiter(policy={"rate": "2/min", "on_store_error": "fail_closed"}, store=store)
    assert closed.peek_sync("k").source == "fail_closed"
    with pytest.raises(polylimit.StoreUnavailableError):
        closed.reset_request_sync({"path": "/", "peer": "203.0.113.7"})


def test_a_key_holding_foreign_data_is_a_store_error_naming_it(redis_server) -> None:
    key = unique_prefix("wrongtype")
    store_key = f"polylimit:token_bucket:default:p1000:{{{key}}}"
    assert redis_server.command(f"SET {store_key} hello") == "+OK"
    limiter = polylimit.Limiter(policy={"rate": "10/s"}, store=redis_server.url, timeout="10s")  # a slow CI check would fall back, not raise
    with pytest.raises(polylimit.StoreError) as raised:
        limiter.check_sync(key)
    assert raised.value.key == store_key
    assert raised.value.kind == "store"

    async def check() -> polylimit.Decision:
        return await limiter.check(key)

    with pytest.raises(polylimit.StoreError) as raised:
        asyncio.run(check())
    assert raised.value.key == store_key
    assert limiter.check_sync(key + "-other").allowed
