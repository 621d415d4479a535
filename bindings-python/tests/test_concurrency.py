"""Concurrency limits (issue 18) from Python: Limiter.acquire / acquire_sync and Lease (release,
idempotence, ``with`` / ``async with``), the config fields, and 100 acquires at once on a real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta

import pytest
from conftest import unique_prefix
from redis_server import RedisServer

import polylimit

POLICY = {"algorithm": "concurrency", "limit": 2, "lease": "10s"}


def make(store: str, policy=POLICY, **options) -> polylimit.Limiter:
    options.setdefault("timeout", "10s")  # decisions, not latency; a test of timeouts gives its own
    return polylimit.Limiter(policy=policy, store=store, prefix=unique_prefix("conc"), **options)


def test_acquire_sync_release_idempotent(store: str) -> None:
    limiter = make(store)
    d1, a = limiter.acquire_sync("k", now_ms=1_000)
    d2, b = limiter.acquire_sync("k", now_ms=1_000)
    d3, c = limiter.acquire_sync("k", now_ms=1_000)
    assert (d1.allowed, d1.remaining, d2.allowed, d2.remaining) == (True, 1, True, 0)
    assert isinstance(a, polylimit.Lease) and isinstance(b, polylimit.Lease)
    assert (d3.allowed, d3.retry_after_ms, c) == (False, 10_000, None)
    assert not a.released
    assert a.release_sync(now_ms=2_000) == 1
    assert a.released
    assert a.release_sync(now_ms=2_000) == 0, "a second release gives nothing back"
    d4, e = limiter.acquire_sync("k", now_ms=2_000)
    assert d4.allowed and e is not None
    assert not limiter.acquire_sync("k", now_ms=2_000)[0].allowed, "released once, one slot came back"


def test_async_with_releases_on_exception(store: str) -> None:
    limiter = make(store, policy={"algorithm": "concurrency", "limit": 1})

    async def main():
        decision, lease = await limiter.acquire("k")
        assert decision.allowed
        with pytest.raises(RuntimeError):
            async with lease as held:
                assert held is lease
                assert not (await limiter.acquire("k"))[0].allowed
                raise RuntimeError("handler failed")
        assert lease.released
        assert await lease.release(now_ms=5_000) == 0
        decision, lease = await limiter.acquire("k")
        assert decision.allowed, "async with released the slot"
        assert await lease.release(now_ms=5_000) == 1

    asyncio.run(main())


def test_with_releases(store: str) -> None:
    limiter = make(store, policy={"algorithm": "concurrency", "limit": 1})
    decision, lease = limiter.acquire_sync("k")
    with pytest.raises(KeyError):
        with lease:
            raise KeyError("x")
    assert lease.released
    decision, lease = limiter.acquire_sync("k")
    assert decision.allowed
    with lease:
        pass
    assert limiter.acquire_sync("k")[0].allowed


def test_no_lease_without_a_concurrency_policy() -> None:
    limiter = make("memory", policy={"algorithm": "gcra", "rate": "1/s"})
    decision, lease = limiter.acquire_sync("k", now_ms=0)
    assert decision.allowed and lease is None
    decision, lease = limiter.acquire_sync("k", now_ms=0)
    assert not decision.allowed and lease is None


def test_check_refuses_a_concurrency_policy() -> None:
    limiter = make("memory")
    with pytest.raises(polylimit.ConfigError) as err:
        limiter.check_sync("k")
    assert err.value.field == "policy"
    assert "is a concurrency policy" in str(err.value) and "acquire" in str(err.value)

    async def main():
        with pytest.raises(polylimit.ConfigError, match="is a concurrency policy"):
            await limiter.check("k")

    asyncio.run(main())


def test_config_fields_reach_the_core() -> None:
    typed = polylimit.Policy(algorithm="concurrency", limit=3, lease="5s")
    assert make("memory", policy=typed).acquire_sync("k", now_ms=0)[0].to_dict()["limit"] == 3
    d, _ = make("memory", policy={"algorithm": "concurrency", "limit": 3, "lease": timedelta(seconds=5)}).acquire_sync("k", now_ms=0)
    assert (d.limit, d.remaining, d.reset_after_ms) == (3, 2, 5_000)
    with pytest.raises(polylimit.ConfigError) as err:
        make("memory", policy={"algorithm": "concurrency", "limit": 0})
    assert err.value.field == "policy.limit" and "is not an integer from 1 to 100000" in str(err.value)
    with pytest.raises(polylimit.ConfigError) as err:
        make("memory", policy={"algorithm": "concurrency"})
    assert err.value.field == "policy.limit" and "is required for concurrency" in str(err.value)
    with pytest.raises(polylimit.ConfigError) as err:
        make("memory", policy={"algorithm": "concurrency", "limit": 2, "lease": "soon"})
    assert err.value.field == "policy.lease"
    with pytest.raises(polylimit.ConfigError) as err:
        make("memory", policy={"algorithm": "concurrency", "limit": 2}).acquire_sync("k", now_ms="x")
    assert err.value.field == "now_ms"


def test_hundred_acquires_at_once_on_redis(redis_server) -> None:
    limiter = make(redis_server.url, policy={"algorithm": "concurrency", "limit": 10, "lease": "30s"})

    async def main():
        results = await asyncio.gather(*(limiter.acquire("api") for _ in range(100)))
        leases = [lease for decision, lease in results if lease is not None]
        assert all(d.allowed == (lease is not None) for d, lease in results)
        assert len(leases) == 10, f"{len(leases)} admitted"
        assert sum(await asyncio.gather(*(lease.release() for lease in leases))) == 10
        again = await asyncio.gather(*(limiter.acquire("api") for _ in range(100)))
        assert sum(1 for d, _ in again if d.allowed) == 10
        assert "polylimit_store_errors_total 0\n" in limiter.metrics_text()
        for _, lease in again:
            if lease is not None:
                await lease.release()

    asyncio.run(main())


def test_release_after_close(store: str) -> None:
    """A request in flight when the limiter closes still gives its slot back."""
    limiter = make(store, policy={"algorithm": "concurrency", "limit": 1})
    decision, lease = limiter.acquire_sync("k")
    limiter.close()
    with pytest.raises(polylimit.ClosedError):
        limiter.acquire_sync("k")
    assert lease.release_sync() == 1


def test_cancelled_acquire_gives_its_slot_back() -> None:
    """An acquire cancelled while Redis has not answered (wait_for) gives back the slot it takes
    when it completes, rather than holding it until its lease ends (60s)."""
    server = RedisServer()
    try:
        limiter = make(server.url, policy={"algorithm": "concurrency", "limit": 1}, timeout="10s")
        assert limiter.acquire_sync("warm")[1].release_sync() == 1

        async def main():
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(limiter.acquire("k"), 0.05)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            deadline = time.monotonic() + 5
            while True:
                decision, lease = await limiter.acquire("k")
                if decision.allowed:
                    await lease.release()
                    return
                assert time.monotonic() < deadline, f"the cancelled acquire kept its slot: {decision!r}"
                await asyncio.sleep(0.01)

        asyncio.run(main())
    finally:
        server.kill()


def test_a_collected_lease_gives_its_slot_back(store: str) -> None:
    limiter = make(store, policy={"algorithm": "concurrency", "limit": 1})
    decision, lease = limiter.acquire_sync("k")
    assert decision.allowed and not limiter.acquire_sync("k")[0].allowed
    del lease  # refcounting drops it at once; the release runs on the runtime
    deadline = time.monotonic() + 5
    while not limiter.acquire_sync("k")[0].allowed:
        assert time.monotonic() < deadline, "a collected lease kept its slot"
        time.sleep(0.01)


def test_cancelled_check_request_gives_its_slot_back() -> None:
    """Issue 32 item 5: a ``check_request`` cancelled while Redis has not answered (a client that
    hung up, a ``wait_for``) takes a concurrency slot once Redis answers; the outcome nobody
    awaits is settled as "no response", so the slot is free again rather than held for the
    whole 30s lease."""
    server = RedisServer()
    try:
        limiter = make(server.url, policy={"algorithm": "concurrency", "limit": 1, "lease": "30s"}, timeout="10s")
        request = {"method": "GET", "path": "/", "peer": "10.0.0.1"}

        async def admitted() -> bool:
            outcome = await limiter.check_request(request)
            if outcome.completion is not None:
                await limiter.complete(outcome.completion, 200)
            return outcome.status is None

        async def main():
            assert await admitted()
            os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(limiter.check_request(request), 0.05)
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            deadline = time.monotonic() + 5
            while not await admitted():
                assert time.monotonic() < deadline, "the cancelled check_request kept its slot"
                await asyncio.sleep(0.01)

        asyncio.run(main())
    finally:
        server.kill()


def test_check_request_in_flight_when_its_loop_ends_gives_its_slot_back() -> None:
    """A ``check_request`` still waiting for Redis when its event loop ends (``asyncio.run``
    returned) takes a concurrency slot once Redis answers; nobody can await that outcome, so it
    is settled as "no response" when the next loop starts calling, rather than holding the slot
    for the whole 30s lease."""
    server = RedisServer()
    try:
        limiter = make(server.url, policy={"algorithm": "concurrency", "limit": 1, "lease": "30s"}, timeout="10s")
        request = {"method": "GET", "path": "/", "peer": "10.0.0.1"}

        async def admitted() -> bool:
            outcome = await limiter.check_request(request)
            if outcome.completion is not None:
                await limiter.complete(outcome.completion, 200)
            return outcome.status is None

        async def leave_one_in_flight():
            assert await admitted()
            os.kill(server.proc.pid, signal.SIGSTOP)
            limiter.check_request(request)  # never awaited: the loop ends with it in flight

        try:
            asyncio.run(leave_one_in_flight())
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)

        async def main():
            deadline = time.monotonic() + 5
            while not await admitted():
                assert time.monotonic() < deadline, "the call of a finished loop kept its slot"
                await asyncio.sleep(0.01)

        asyncio.run(main())
    finally:
        server.kill()
