"""polylimit.client: the Retry-After arithmetic with an injected clock and sleep (no waiting),
then for real against polylimit's FastAPI middleware on loopback (a 1 s window)."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import subprocess
import sys
import time
from typing import List

import httpx
import pytest
from conftest import REPO
from fastapi import FastAPI
from test_fastapi import Server

from polylimit.client import AsyncRetryTransport, RetryPolicy, RetryTransport, parse_retry_after
from polylimit.fastapi import PolylimitMiddleware

T0 = 1_700_000_000.0


class Clock:
    """A wall clock that only the injected sleep moves."""

    def __init__(self) -> None:
        self.now = T0
        self.slept: List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def scripted(*answers):
    """A transport answering each request with the next (status, headers); the requests it saw."""
    seen: List[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        request.read()
        status, headers = answers[min(len(seen) - 1, len(answers) - 1)]
        return httpx.Response(status, headers=headers, content=b"{}")

    return httpx.MockTransport(handler), seen


def client(transport, clock: Clock, **options) -> httpx.Client:
    options.setdefault("jitter", 0)
    return httpx.Client(transport=RetryTransport(transport, sleep=clock.sleep, clock=clock, random=lambda: 0.5,
                                                 **options))


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after("0", T0) == 0
    assert parse_retry_after(" 7 ", T0) == 7
    assert parse_retry_after(email.utils.formatdate(T0 + 30, usegmt=True), T0) == 30  # IMF-fixdate
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", 784111777 - 5) == 5  # RFC 850
    assert parse_retry_after("Sun Nov  6 08:49:37 1994", 784111777 - 5) == 5  # asctime, GMT
    assert parse_retry_after(email.utils.formatdate(T0 - 30, usegmt=True), T0) == 0  # past: now
    for garbage in [None, "", "-1", "1.5", "soon", "+3", "١"]:
        assert parse_retry_after(garbage, T0) is None, garbage


def test_shared_vectors() -> None:
    """tests/conformance/client/retry_after.json, which the JavaScript and Go helpers play too."""
    v = json.loads((REPO / "tests" / "conformance" / "client" / "retry_after.json").read_text())
    now = v["now_ms"] / 1000
    for c in v["parse"]:
        got = parse_retry_after(c["value"], now)
        want = c["wait_ms"]
        assert (got is None) if want is None else got * 1000 == pytest.approx(want), c
    for c in v["decide"]:
        o = c["options"]
        policy = RetryPolicy(max_retries=o["max_retries"], max_wait=o["max_wait_ms"] / 1000,
                             budget=o["budget_ms"] / 1000, jitter=o["jitter"], statuses=o["statuses"],
                             retry_non_idempotent=o.get("retry_non_idempotent", False),
                             clock=lambda: now, random=lambda c=c: c["random"])
        headers = {} if c["retry_after"] is None else {"retry-after": c["retry_after"]}
        got = policy.wait(c["status"], headers, c["retries"], now - c["elapsed_ms"] / 1000,
                          c.get("method", "GET"))
        want = c["wait_ms"]
        assert (got is None) if want is None else got * 1000 == pytest.approx(want), c["name"]


def test_waits_retry_after_with_jitter_then_returns_success() -> None:
    clock = Clock()
    transport, seen = scripted((429, {"Retry-After": "2"}), (200, {}))
    with client(transport, clock, jitter=0.2) as c:
        assert c.get("http://api/x").status_code == 200
    assert len(seen) == 2
    assert clock.slept == [pytest.approx(2 * (1 + 0.2 * 0.5))]  # jitter only lengthens the wait


def test_http_date_and_503() -> None:
    clock = Clock()
    transport, seen = scripted((503, {"Retry-After": email.utils.formatdate(T0 + 3, usegmt=True)}), (200, {}))
    with client(transport, clock) as c:
        assert c.get("http://api/x").status_code == 200
    assert clock.slept == [3]


@pytest.mark.parametrize("answer", [(429, {}), (429, {"Retry-After": "later"}), (500, {"Retry-After": "1"}),
                                    (429, {"Retry-After": "61"})])
def test_gives_up_at_once(answer) -> None:
    """No or unreadable Retry-After, a status not retried, a wait over max_wait (60 s)."""
    clock = Clock()
    transport, seen = scripted(answer, (200, {}))
    with client(transport, clock) as c:
        assert c.get("http://api/x").status_code == answer[0]
    assert (len(seen), clock.slept) == (1, [])


def test_jitter_is_capped_by_max_wait() -> None:
    clock = Clock()
    transport, _ = scripted((429, {"Retry-After": "10"}), (200, {}))
    with client(transport, clock, jitter=1, max_wait=12) as c:
        assert c.get("http://api/x").status_code == 200
    assert clock.slept == [12]


def test_max_retries_then_the_last_response() -> None:
    clock = Clock()
    transport, seen = scripted((429, {"Retry-After": "1"}))
    with client(transport, clock, max_retries=2) as c:
        assert c.get("http://api/x").status_code == 429
    assert (len(seen), clock.slept) == (3, [1, 1])


def test_budget_counts_from_the_first_attempt() -> None:
    clock = Clock()
    transport, seen = scripted((429, {"Retry-After": "4"}))
    with client(transport, clock, max_retries=10, budget=10) as c:
        assert c.get("http://api/x").status_code == 429
    assert (len(seen), clock.slept) == (3, [4, 4])  # a third wait would end at 12 s > 10 s


def test_bodies_are_replayed_streams_are_not() -> None:
    clock = Clock()
    transport, seen = scripted((429, {"Retry-After": "1"}), (200, {}))
    with client(transport, clock) as c:
        assert c.post("http://api/x", content=b"payload").status_code == 200
    assert [r.content for r in seen] == [b"payload", b"payload"]

    transport, seen = scripted((429, {"Retry-After": "1"}), (200, {}))
    with client(transport, clock) as c:
        assert c.post("http://api/x", content=iter([b"once"])).status_code == 429
    assert len(seen) == 1


def test_bad_options_name_the_option() -> None:
    for bad, field in [({"jitter": 2}, "jitter"), ({"max_retries": -1}, "max_retries"), ({"budget": -1}, "budget")]:
        with pytest.raises(ValueError, match=field):
            RetryPolicy(**bad)
    with pytest.raises(TypeError):
        RetryTransport(policy=RetryPolicy(), max_retries=1)
    policy = RetryPolicy(clock=lambda: T0, random=lambda: 0.5)
    policy.max_wait = 1  # an option set later is used, and checked
    assert policy.wait(429, {"retry-after": "2"}, 0, T0) is None
    with pytest.raises(ValueError, match="^jitter: 2 is not a fraction from 0 to 1$"):
        policy.jitter = 2
    assert policy.jitter == 0.1


def test_bad_options_raise_the_core_error() -> None:
    """tests/conformance/client/retry_options.json: the core's text, field and value as Python gives them."""
    v = json.loads((REPO / "tests" / "conformance" / "client" / "retry_options.json").read_text())
    cases = [c for c in v["invalid"] if c["naming"] == "snake"]
    assert cases
    for c in cases:
        with pytest.raises(ValueError) as raised:
            RetryPolicy(**c["options"])
        assert str(raised.value) == c["error"]
        with pytest.raises(ValueError, match="^" + re.escape(c["error"]) + "$"):
            RetryTransport(**c["options"])


def test_async_transport_and_cancellation() -> None:
    async def main() -> None:
        clock = Clock()
        transport, seen = scripted((429, {"Retry-After": "2"}), (200, {}))
        wrapped = AsyncRetryTransport(transport, sleep=clock.asleep, clock=clock, jitter=0)
        async with httpx.AsyncClient(transport=wrapped) as c:
            assert (await c.get("http://api/x")).status_code == 200
        assert clock.slept == [2]

        # The real asyncio.sleep: cancelling the task ends a 50 s wait at once.
        transport, seen = scripted((429, {"Retry-After": "50"}), (200, {}))
        async with httpx.AsyncClient(transport=AsyncRetryTransport(transport)) as c:
            task = asyncio.ensure_future(c.get("http://api/x"))
            while not seen:
                await asyncio.sleep(0.001)
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started < 1
        assert len(seen) == 1

    asyncio.run(main())


def test_import_is_safe_without_httpx() -> None:
    code = ("import sys; sys.modules['httpx'] = None\n"
            "from polylimit.client import parse_retry_after, RetryTransport\n"
            "assert parse_retry_after('3', 0) == 3\n"
            "try:\n    RetryTransport()\nexcept ImportError as e:\n    print('ImportError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ImportError") and "httpx" in out


def one_per_second_app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, policy={"algorithm": "fixed_window", "rate": "1/s"}, key=["ip"])

    @app.get("/api/x")
    async def x():
        return {"ok": True}

    return app


def test_real_server_429_wait_then_success_and_budget_exceeded() -> None:
    """The wall clock is what is tested: polylimit answers 429 with Retry-After: 1 (the rest of the
    1 s window), the transport waits it out and the retry succeeds; with a budget under the wait
    it returns the 429."""
    server = Server(one_per_second_app())
    try:
        with httpx.Client(base_url=server.url, transport=RetryTransport(jitter=0, max_retries=2)) as c:
            assert c.get("/api/x").status_code == 200
            started = time.monotonic()
            answer = c.get("/api/x")
            elapsed = time.monotonic() - started
            assert answer.status_code == 200 and answer.json() == {"ok": True}
            assert 0.3 < elapsed < 2.5  # waited out (part of) the window, at most one Retry-After
        # Budget 0.5 s, Retry-After 1 s: the 429 comes back at once. (Drain the window first; try
        # again in the rare case that the window turned between the drain and the request.)
        with httpx.Client(base_url=server.url) as plain, \
                httpx.Client(base_url=server.url, transport=RetryTransport(jitter=0, budget=0.5)) as c:
            for _ in range(3):
                while plain.get("/api/x").status_code != 429:
                    pass
                started = time.monotonic()
                answer = c.get("/api/x")
                if answer.status_code == 429:
                    break
            assert answer.status_code == 429 and answer.headers["retry-after"] == "1"
            assert time.monotonic() - started < 1  # at once: short of the 1 s Retry-After it would wait out
    finally:
        server.stop()
