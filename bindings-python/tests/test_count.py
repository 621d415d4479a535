"""``count``: charged before the handler, given back after the response when its status does not
count, through the decorator, the ``Depends`` form and the ASGI middleware (uvicorn on loopback,
memory and a real Redis), also when the endpoint raises; and the API (``complete``)."""

from __future__ import annotations

import asyncio
from typing import Iterator

import httpx
import pytest
from conftest import unique_prefix
from fastapi import Depends, FastAPI, HTTPException, Response
from fastapi.responses import JSONResponse
from test_fastapi import Server

import polylimit
from polylimit.fastapi import PolylimitMiddleware, install

# 3 per hour: nothing comes back during a test but what `count` gives back.
WINDOW = {"algorithm": "fixed_window", "rate": "3/h"}


def login_app(limiter: polylimit.Limiter) -> FastAPI:
    """Each route answers the status its `status` query parameter asks for (`raise` raises)."""
    app = FastAPI()
    install(app)

    def answer(status: int):
        if status == 0:
            raise RuntimeError("the handler failed")
        if status >= 400:
            raise HTTPException(status_code=status, detail="no")
        if status == 200:
            return {"ok": True}
        return JSONResponse({"ok": True}, status_code=status)

    @app.post("/decorated")
    @limiter.limit(key="ip", count="failed")
    async def decorated(status: int = 200):
        return answer(status)

    @app.post("/plain")
    @limiter.limit(key="ip", count="failed")
    def plain(response: Response, status: int = 200):  # a sync endpoint setting the injected response's status
        if status >= 400:
            response.status_code = status
        return {"ok": status < 400}

    @app.post("/depends", dependencies=[Depends(limiter.depends(key="ip", count="failed"))])
    async def with_depends(status: int = 200):
        return answer(status)

    return app


@pytest.fixture
def server(store: str) -> Iterator[Server]:
    limiter = polylimit.Limiter(policy=WINDOW, store=store, timeout="10s", prefix=unique_prefix("count"))
    srv = Server(login_app(limiter))
    yield srv
    srv.stop()


@pytest.mark.parametrize("path", ["/decorated", "/plain", "/depends"])
def test_successes_are_free_and_failures_count(server: Server, path: str) -> None:
    with server.client() as c:
        ok = [c.post(f"{path}?status=200") for _ in range(6)]
        assert [r.status_code for r in ok] == [200] * 6
        assert [r.headers["x-ratelimit-remaining"] for r in ok] == ["2"] * 6
        moved = c.post(f"{path}?status=302")  # a redirect is not a failure (the plain route answers 200)
        assert moved.status_code in (200, 302)
        failed = [c.post(f"{path}?status=401") for _ in range(3)]
        assert [r.status_code for r in failed] == [401] * 3
        locked = c.post(f"{path}?status=200")
        assert locked.status_code == 429
        assert locked.json()["error"] == "rate_limit_exceeded"


def crashed(server: Server, target: str) -> int:
    """The status of a request whose handler raises: 500, or 0 when uvicorn drops the connection."""
    try:
        with server.client() as c:
            return c.post(target).status_code
    except httpx.HTTPError:
        return 0


@pytest.mark.parametrize("path", ["/decorated", "/depends"])
def test_a_handler_exception_counts_as_failed(server: Server, path: str) -> None:
    assert [crashed(server, f"{path}?status=0") for _ in range(3)] in ([500] * 3, [0] * 3)
    with server.client() as c:
        assert c.post(f"{path}?status=200").status_code == 429


def test_the_asgi_middleware_settles_a_rules_file_count(store: str) -> None:
    rules = {
        "store": store,
        "prefix": unique_prefix("count-mw"),
        "policies": {"login": WINDOW},
        "rules": [{"match": {"method": "POST", "path": "/login"}, "key": ["ip"], "policy": "login", "count": "failed"}],
    }
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, limiter=polylimit.Limiter.from_rules(rules))

    @app.post("/login")
    async def login(password: str = ""):
        if password == "boom":
            raise RuntimeError("the handler failed")
        if password != "right":
            raise HTTPException(status_code=401, detail="wrong")
        return {"ok": True}

    srv = Server(app)
    try:
        with srv.client() as c:
            assert [c.post("/login?password=right").status_code for _ in range(5)] == [200] * 5
            assert c.post("/login?password=wrong").status_code == 401
            assert crashed(srv, "/login?password=boom") in (500, 0)  # the app sent nothing: counted
            assert c.post("/login?password=wrong").status_code == 401
            refused = c.post("/login?password=right")
            assert refused.status_code == 429
            assert refused.headers["retry-after"]
    finally:
        srv.stop()


def test_the_limiter_option_and_complete() -> None:
    limiter = polylimit.Limiter(policy=WINDOW, count=["4xx", 503])
    request = {"method": "POST", "path": "/x", "peer": "203.0.113.7", "now_ms": 1_700_000_000_000}
    outcome = limiter.check_request_sync(request)
    assert outcome.completion is not None and outcome.completion.startswith("pl1;")
    assert "completion" in outcome.to_dict()
    limiter.complete_sync(outcome.completion, 500)  # not counted: given back

    async def no_response() -> None:
        await limiter.complete(limiter.check_request_sync(request).completion, 0)  # no response: counted

    asyncio.run(no_response())
    for _ in range(2):
        limiter.complete_sync(limiter.check_request_sync(request).completion, 404)
    assert limiter.check_request_sync(request).status == 429
    # Without count, nothing to settle.
    assert polylimit.Limiter(policy=WINDOW).check_request_sync(request).completion is None


def test_bad_values_name_their_field() -> None:
    with pytest.raises(polylimit.ConfigError) as e:
        polylimit.Limiter(policy=WINDOW, count="sometimes")
    assert e.value.field == "count"
    limiter = polylimit.Limiter(policy=WINDOW)
    with pytest.raises(polylimit.ConfigError) as e:
        limiter.limit("ip", count=["4xx", 99])
    assert e.value.field == "count[1]"
    with pytest.raises(polylimit.ConfigError) as e:
        limiter.complete_sync("not a token", 200)
    assert e.value.field == "token"


def test_the_asgi_middleware_settles_before_the_last_byte(store: str) -> None:
    """The same client's next request must see a success given back: the middleware settles before
    it sends the response's last message, never after the client could have read it. Checked in
    the send callable itself, as the last body message goes out (no server, no timing)."""
    rules = {
        "store": store,
        "prefix": unique_prefix("count-order"),
        "headers": "legacy",
        "policies": {"login": WINDOW},
        "rules": [{"match": {"method": "POST", "path": "/login"}, "key": ["ip"], "policy": "login", "count": "failed"}],
    }
    limiter = polylimit.Limiter.from_rules(rules)
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, limiter=limiter)

    @app.post("/login")
    async def login(password: str = ""):
        if password != "right":
            raise HTTPException(status_code=401, detail="wrong")
        return {"ok": True}

    request = {"method": "POST", "path": "/login", "peer": "203.0.113.7"}

    async def remaining_as_the_last_byte_goes(password: str) -> str:
        seen = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                peeked = await limiter.peek_request(request)  # counts the peeked request as admitted
                seen.append(dict(peeked.headers)["X-RateLimit-Remaining"])

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": "/login", "raw_path": b"/login", "root_path": "",
            "query_string": f"password={password}".encode(), "headers": [],
            "client": ("203.0.113.7", 40000), "server": ("127.0.0.1", 8000),
        }
        await app(scope, receive, send)
        return seen[0]

    async def main():
        # A success is given back before its last byte: a request now would leave 2 of 3.
        assert await remaining_as_the_last_byte_goes("right") == "2"
        # A failure stays charged: a request now would leave 1.
        assert await remaining_as_the_last_byte_goes("wrong") == "1"

    asyncio.run(main())


def test_ended_status_is_the_core_rule() -> None:
    """The status the FastAPI middlewares settle with comes from the core (SPEC §6): a client that
    left after the app answered is charged as that answer; nothing written is no response."""
    from polylimit import _polylimit

    assert _polylimit.ended_status(200, True, False, True) == 200
    assert _polylimit.ended_status(500, True, True, False) == 500
    assert _polylimit.ended_status(200, False, True, False) is None
    assert _polylimit.ended_status(200, False, False, True) is None
    assert _polylimit.ended_status(200, False, False, False) == 200
    assert _polylimit.ended_status(0, True, False, False) is None
