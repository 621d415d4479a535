"""FastAPI apps served by uvicorn on loopback, driven by httpx: the decorator
(route without a Request parameter), the Depends form and the ASGI middleware,
on the memory store and on a real Redis."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from typing import Iterator, List, Optional

import httpx
import pytest
import uvicorn
from conftest import unique_prefix
from fastapi import Depends, FastAPI
from redis_server import RedisServer, free_port

import polylimit
from polylimit.fastapi import PolylimitMiddleware, install

# 10 per minute: nothing refills during a test (one token per 6 s).
SLOW = {"algorithm": "token_bucket", "rate": "10/min", "burst": 10}
# One token per second, burst 10: drained 2 s ago, exactly 2 are back.
REFILL = {"algorithm": "token_bucket", "rate": "1/s", "burst": 10}
RATE_HEADERS = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit",
                "retry-after"]


class Server:
    """``app`` served by uvicorn on loopback TCP, or on the Unix socket ``uds`` (as behind nginx)."""

    def __init__(self, app: FastAPI, uds: Optional[str] = None) -> None:
        self.port = free_port()
        # proxy_headers=False: the peer stays the peer; polylimit reads the forwarding headers itself.
        where = {"uds": uds} if uds else {"host": "127.0.0.1", "port": self.port}
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", proxy_headers=False,
                                                    **where))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port}"
        self.uds = uds

    def client(self) -> httpx.Client:
        if self.uds:
            return httpx.Client(transport=httpx.HTTPTransport(uds=self.uds), base_url="http://unix")
        return httpx.Client(base_url=self.url)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(5)


def build_app(limiter: polylimit.Limiter) -> FastAPI:
    app = FastAPI()
    install(app)

    @app.get("/decorated")
    @limiter.limit(key="ip")
    async def decorated():  # no Request parameter
        return {"ok": True}

    @app.get("/items/{item_id}")
    @limiter.limit(key="ip")
    def sync_item(item_id: int):  # a sync endpoint with a path parameter
        return {"item": item_id}

    @app.get("/depends", dependencies=[Depends(limiter.depends(key="ip"))])
    async def with_depends():
        return {"ok": True}

    return app


@pytest.fixture
def app_server(store: str) -> Iterator[Server]:
    limiter = polylimit.Limiter(policy=SLOW, store=store, timeout="10s", prefix=unique_prefix("fa"))
    server = Server(build_app(limiter))
    yield server
    server.stop()


def rate_headers(response: httpx.Response):
    return [(k.decode().lower(), v.decode()) for k, v in response.headers.raw if k.decode().lower() in RATE_HEADERS]


@pytest.mark.parametrize("path", ["/decorated", "/items/7", "/depends"])
def test_fifteen_sequential(app_server: Server, path: str) -> None:
    with httpx.Client(base_url=app_server.url) as client:
        statuses = [client.get(path).status_code for _ in range(15)]
    assert statuses == [200] * 10 + [429] * 5


@pytest.mark.parametrize("path", ["/decorated", "/depends"])
def test_fifty_concurrent(app_server: Server, path: str) -> None:
    async def main():
        async with httpx.AsyncClient(base_url=app_server.url, limits=httpx.Limits(max_connections=50)) as client:
            return await asyncio.gather(*(client.get(path) for _ in range(50)))

    responses = asyncio.run(main())
    statuses = [r.status_code for r in responses]
    assert statuses.count(200) == 10 and statuses.count(429) == 40


def test_routes_are_limited_separately(app_server: Server) -> None:
    with httpx.Client(base_url=app_server.url) as client:
        assert [client.get("/decorated").status_code for _ in range(11)][-1] == 429
        assert client.get("/items/1").status_code == 200
        assert client.get("/items/2").json() == {"item": 2}  # the template is the route: same limit
        assert client.get("/depends").status_code == 200


def test_exact_headers_and_body(app_server: Server) -> None:
    with httpx.Client(base_url=app_server.url) as client:
        before = time.time()
        first = client.get("/decorated")
        after = time.time()
        assert first.status_code == 200 and first.json() == {"ok": True}
        headers = rate_headers(first)
        reset = int(headers[2][1])
        assert math.ceil(before + 6) <= reset <= math.ceil(after + 6)
        assert headers == [
            ("x-ratelimit-limit", "10"), ("x-ratelimit-remaining", "9"), ("x-ratelimit-reset", str(reset)),
            ("ratelimit-policy", '"default";q=10;w=60'), ("ratelimit", '"default";r=9;t=6'),
        ]
        for _ in range(9):
            client.get("/decorated")
        denied = client.get("/decorated")
        assert denied.status_code == 429
        assert denied.headers["content-type"] == "application/json"
        assert denied.content == b'{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":6}'
        h = dict(rate_headers(denied))
        assert (h["x-ratelimit-remaining"], h["retry-after"], h["ratelimit"]) == ("0", "6", '"default";r=0;t=60')
        # The Depends form answers the same bytes once install(app) is called.
        for _ in range(10):
            client.get("/depends")
        denied = client.get("/depends")
        assert denied.status_code == 429
        assert denied.content == b'{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":6}'
        assert dict(rate_headers(denied))["retry-after"] == "6"


def test_drain_then_wait_two_seconds(store: str) -> None:
    """Drained 2 s ago, the route has refilled 2. No sleep: the drain goes through the check the
    decorator makes (the same rule and key), with ``now_ms`` 2 s in the past; the requests that
    follow are decided on the store's clock, now."""
    limiter = polylimit.Limiter(policy=REFILL, store=store, timeout="10s", prefix=unique_prefix("drain"))
    server = Server(build_app(limiter))
    try:
        with httpx.Client(base_url=server.url) as client:
            rule = limiter.route_rule(["route", "ip"])  # the decorator's rule (per_route, key="ip")
            two_seconds_ago = int(time.time() * 1000) - 2000
            request = {"method": "GET", "path": "/decorated", "route": "/decorated", "peer": "127.0.0.1",
                       "now_ms": two_seconds_ago}
            drained = 0
            while limiter.check_route_sync(request, rule).status is None:
                drained += 1
            assert drained == 10
            assert [client.get("/decorated").status_code for _ in range(3)] == [200, 200, 429]
    finally:
        server.stop()


RULES = {
    "policies": {
        "api": {"algorithm": "token_bucket", "rate": "10/min", "burst": 10},
        "pay": {"algorithm": "gcra", "rate": "10/min", "burst": 2, "on_store_error": "fail_closed"},
    },
    "rules": [
        {"match": {"path": "/api/pay"}, "key": ["ip"], "policy": "pay"},
        {"match": {"path": "/api/*"}, "key": ["ip"], "policy": "api"},
    ],
}


def middleware_app(limiter: polylimit.Limiter) -> FastAPI:
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, limiter=limiter)

    @app.get("/api/hello")
    async def hello():
        return {"hello": "world"}

    @app.get("/api/pay")
    async def pay():
        return {"paid": True}

    @app.get("/health")
    async def health():
        return {"ok": True}

    return app


def test_middleware_rules_file(store: str, tmp_path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(RULES))
    limiter = polylimit.Limiter.from_file(path, store=store, timeout="10s", prefix=unique_prefix("mw"))
    server = Server(middleware_app(limiter))
    try:
        with httpx.Client(base_url=server.url) as client:
            assert [client.get("/api/hello").status_code for _ in range(15)] == [200] * 10 + [429] * 5
            health = client.get("/health")
            assert health.status_code == 200 and rate_headers(health) == []
            pay = [client.get("/api/pay") for _ in range(3)]
            assert [r.status_code for r in pay] == [429, 429, 429]  # api is drained too: both rules apply
    finally:
        server.stop()
    limiter = polylimit.Limiter.from_file(path, store=store, timeout="10s", prefix=unique_prefix("mw"))
    server = Server(middleware_app(limiter))
    try:
        with httpx.Client(base_url=server.url) as client:
            pay = [client.get("/api/pay") for _ in range(3)]
            assert [r.status_code for r in pay] == [200, 200, 429]
            assert dict(rate_headers(pay[0]))["ratelimit-policy"] == '"pay";q=2;w=12'
            assert pay[0].json() == {"paid": True}
    finally:
        server.stop()


def test_middleware_takes_the_options_of_limiter(store: str) -> None:
    # No limiter: the middleware builds one through the core from Limiter's own options.
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, policy={"rate": "10/min", "burst": 2}, key=["header:x-user"],
                       store=store, timeout="10s", prefix=unique_prefix("mwopt"), headers="ietf")

    @app.get("/health")
    async def health():
        return {"ok": True}

    server = Server(app)
    try:
        with httpx.Client(base_url=server.url) as client:
            first = client.get("/health", headers={"x-user": "a"})
            assert [r.status_code for r in [first] + [client.get("/health", headers={"x-user": "a"}) for _ in range(2)]] == [200, 200, 429]
            assert client.get("/health", headers={"x-user": "b"}).status_code == 200  # its own key
            names = {k for k, _ in rate_headers(first)}
            assert "ratelimit-policy" in names and "x-ratelimit-limit" not in names
    finally:
        server.stop()
    with pytest.raises(TypeError):
        PolylimitMiddleware(app, polylimit.Limiter(policy=SLOW), policy=SLOW)
    with pytest.raises(polylimit.ConfigError) as err:
        PolylimitMiddleware(app, policy=SLOW, trusted_proxies=["nowhere"])
    assert err.value.field.startswith("trusted_proxies")


def test_fail_closed_503_when_redis_is_down(tmp_path) -> None:
    redis = RedisServer()
    rules = dict(RULES, timeout="10s")  # the first request is the store's; a killed Redis refuses at once
    limiter = polylimit.Limiter.from_rules(rules, store=redis.url, prefix=unique_prefix("down"))
    server = Server(middleware_app(limiter))
    try:
        with httpx.Client(base_url=server.url) as client:
            assert client.get("/api/pay").status_code == 200
            redis.kill()
            down = client.get("/api/pay")
            assert down.status_code == 503
            body = json.loads(down.content)
            assert body["error"] == "rate_limiter_unavailable" and body["message"] == "Service Unavailable"
            assert down.content == (
                b'{"error":"rate_limiter_unavailable","message":"Service Unavailable","retry_after":'
                + down.headers["retry-after"].encode() + b"}"
            )
            # The local fallback still answers the other policy.
            assert client.get("/api/hello").status_code == 200
    finally:
        server.stop()
        redis.kill()


def test_shape_mode_delay_is_awaited() -> None:
    """A shaped request is held with asyncio.sleep: other requests are served meanwhile."""
    limiter = polylimit.Limiter(
        policy={"algorithm": "leaky_bucket", "mode": "shape", "rate": "2/s", "burst": 10}, prefix=unique_prefix("shape")
    )
    app = FastAPI()

    @app.get("/shaped")
    @limiter.limit(key="ip")
    async def shaped():
        return {"ok": True}

    @app.get("/free")
    async def free():
        return {"ok": True}

    server = Server(app)

    async def main():
        async with httpx.AsyncClient(base_url=server.url) as client:
            start = time.monotonic()
            shaped = asyncio.ensure_future(asyncio.gather(*(client.get("/shaped") for _ in range(3))))
            await asyncio.sleep(0.1)
            free = await client.get("/free")
            free_at = time.monotonic() - start
            results = await shaped
            return free, free_at, results, time.monotonic() - start

    try:
        free, free_at, results, total = asyncio.run(main())
        assert free.status_code == 200 and free_at < 0.5
        assert [r.status_code for r in results] == [200, 200, 200]
        assert total >= 0.95  # the third waited 1 s (two intervals of 500 ms)
    finally:
        server.stop()


def trust_app(limiter: polylimit.Limiter) -> FastAPI:
    app = FastAPI()

    @app.get("/api/items")
    @limiter.limit(key="ip")
    async def items():
        return {"ok": True}

    return app


def raw_status(server: Server, target: str, method: str = "GET") -> int:
    """Sends ``method target`` as is (an absolute-form target included) and returns the status."""
    import socket

    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


@pytest.mark.parametrize("trusted, want", [(["10.0.0.0/8"], [200, 429, 429]), (["unix"], [200, 429, 200])])
def test_unix_socket_peer(store: str, tmp_path, trusted: List[str], want: List[int]) -> None:
    """uvicorn --uds gives no client address: without ``unix`` trusted every request is the one client
    ``unknown`` (limited, never skipped); with it, X-Forwarded-For names the client."""
    limiter = polylimit.Limiter.from_rules(
        {"policies": {"api": {"rate": "1/min", "burst": 1}}}, store=store, timeout="10s", prefix=unique_prefix("uds"),
        trusted_proxies=trusted,
    )
    server = Server(trust_app(limiter), uds=str(tmp_path / "app.sock"))
    try:
        with server.client() as client:
            got = [client.get("/api/items", headers={"X-Forwarded-For": ip}).status_code
                   for ip in ("198.51.100.1", "198.51.100.1", "198.51.100.2")]
        assert got == want
    finally:
        server.stop()


def test_forwarded_header_kwarg(store: str) -> None:
    """``forwarded_header="forwarded"``: an X-Forwarded-For added by the client does not pick the key."""
    limiter = polylimit.Limiter.from_rules(
        {"policies": {"api": {"rate": "1/min", "burst": 1}}}, store=store, timeout="10s", prefix=unique_prefix("fwd"),
        trusted_proxies=["127.0.0.0/8"], forwarded_header="forwarded",
    )
    server = Server(trust_app(limiter))
    try:
        with server.client() as client:
            got = [client.get("/api/items", headers=h).status_code for h in (
                {"Forwarded": "for=198.51.100.7", "X-Forwarded-For": "203.0.113.1"},
                {"Forwarded": "for=198.51.100.7", "X-Forwarded-For": "203.0.113.2"},
                {"Forwarded": "for=198.51.100.8"},
            )]
        assert got == [200, 429, 200]
    finally:
        server.stop()
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter.from_rules({"policies": {"api": {"rate": "1/s"}}}, forwarded_header="x-real-ip")
    assert err.value.field == "forwarded_header"
    assert '"x-real-ip" is not one of x-forwarded-for, forwarded' in str(err.value)


def test_head_and_absolute_form_targets_match_get_rules(store: str) -> None:
    """Through uvicorn: HEAD (served by the GET route) is limited by a GET rule, and an absolute-form
    target matches the rule of its path. (uvicorn's h11 puts the whole absolute-form target in
    ``scope["path"]``, so Starlette answers it 404; the limit still counts it.)"""
    rules = {
        "headers": "none",
        "policies": {"api": {"rate": "1/min", "burst": 1}},
        "rules": [{"match": {"method": "GET", "path": "/api/items"}, "key": ["global"], "policy": "api"}],
    }
    for first, method in (("/api/items", "HEAD"), ("http://evil.example/api/items?x=1", "GET")):
        limiter = polylimit.Limiter.from_rules(rules, store=store, timeout="10s", prefix=unique_prefix("norm"))
        app = FastAPI()
        app.add_middleware(PolylimitMiddleware, limiter=limiter)

        async def items(request):
            from starlette.responses import PlainTextResponse

            return PlainTextResponse("ok")

        app.add_route("/api/items", items, methods=["GET"])  # Starlette serves HEAD with it
        server = Server(app)
        try:
            got = [raw_status(server, first, method), raw_status(server, "/api/items")]
            assert got[0] in (200, 404) and got[1] == 429, (first, got)
        finally:
            server.stop()


# Decorators and dependencies check through the limiter they come from: one state, one set of
# metrics, one close(). Endpoints may declare their own Request and Response parameters.

from fastapi import Request, Response  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402


def shared_app(limiter: polylimit.Limiter, handle_closed: bool = True) -> FastAPI:
    app = FastAPI()
    install(app)
    if handle_closed:

        @app.exception_handler(polylimit.ClosedError)
        async def closed(request: Request, exc: Exception):
            return JSONResponse({"closed": type(exc).__name__}, status_code=503)

    @app.get("/a")
    @limiter.limit(key="ip", per_route=False)
    async def a():
        return {"route": "a"}

    @app.get("/b")
    @limiter.limit(key="ip", per_route=False)
    def b():
        return {"route": "b"}

    @app.get("/c", dependencies=[Depends(limiter.depends(key="ip", per_route=False))])
    async def c():
        return {"route": "c"}

    return app


def test_decorators_and_dependencies_share_the_parent(store: str) -> None:
    limiter = polylimit.Limiter(policy=SLOW, store=store, timeout="10s", prefix=unique_prefix("share"))
    server = Server(shared_app(limiter))
    try:
        with httpx.Client(base_url=server.url) as client:
            statuses = [client.get(path).status_code for path in ["/a", "/b", "/c"] * 4]
        assert statuses == [200] * 10 + [429] * 2
        metrics = limiter.metrics_text()
        for line in [
            'polylimit_requests_total{policy="default",route="route_rule",decision="allowed",source="store"} 10',
            'polylimit_requests_total{policy="default",route="route_rule",decision="denied",source="store"} 2',
            'rate_limit_blocked_total{policy="default",route="route_rule"} 2',
        ]:
            assert line in metrics, metrics
        # The parent's own checks see the same state: the client's `ip` key is drained.
        assert not limiter.check_sync("ip=127.0.0.1").allowed
    finally:
        server.stop()


def test_closed_parent_refuses_through_decorator_and_dependency() -> None:
    limiter = polylimit.Limiter(policy=SLOW, prefix=unique_prefix("closed"))
    handled, unhandled = Server(shared_app(limiter)), Server(shared_app(limiter, handle_closed=False))
    try:
        with httpx.Client(base_url=handled.url) as client:
            assert [client.get(path).status_code for path in ("/a", "/b", "/c")] == [200, 200, 200]
            limiter.close()
            for path in ("/a", "/b", "/c"):
                answer = client.get(path)
                assert (answer.status_code, answer.json()) == (503, {"closed": "ClosedError"}), path
        with httpx.Client(base_url=unhandled.url) as client:
            assert client.get("/a").status_code == 500  # ClosedError, unhandled by the app
    finally:
        handled.stop()
        unhandled.stop()


def request_response_app(limiter: polylimit.Limiter) -> FastAPI:
    app = FastAPI()

    @app.get("/request")
    @limiter.limit("ip")
    async def with_request(request: Request):
        return {"path": request.url.path}

    @app.get("/response")
    @limiter.limit("ip")
    def with_response(response: Response):
        response.headers["x-own"] = "yes"
        return {"ok": True}

    @app.get("/both/{item_id}")
    @limiter.limit("ip")
    async def with_both(item_id: int, request: Request, response: Response):
        response.headers["x-own"] = "both"
        return {"item": item_id, "path": request.url.path}

    return app


def test_endpoints_declaring_request_or_response(store: str) -> None:
    limiter = polylimit.Limiter(policy=SLOW, store=store, timeout="10s", prefix=unique_prefix("reqresp"))
    server = Server(request_response_app(limiter))
    try:
        with httpx.Client(base_url=server.url) as client:
            first = client.get("/request")
            assert (first.status_code, first.json()) == (200, {"path": "/request"})
            assert dict(rate_headers(first))["x-ratelimit-remaining"] == "9"
            own = client.get("/response")
            assert (own.status_code, own.headers["x-own"]) == (200, "yes")
            assert dict(rate_headers(own))["x-ratelimit-remaining"] == "9"
            both = client.get("/both/3")
            assert (both.status_code, both.json(), both.headers["x-own"]) == (200, {"item": 3, "path": "/both/3"}, "both")
            assert dict(rate_headers(both))["x-ratelimit-remaining"] == "9"
            assert [client.get("/request").status_code for _ in range(10)] == [200] * 9 + [429]
    finally:
        server.stop()


def test_the_shorthand_key_defaults_are_the_cores() -> None:
    # The decorator's and dependency's key: no key is ip, a callable is key, per route puts route first.
    from polylimit.fastapi import _Check

    limiter = polylimit.Limiter(policy=SLOW)
    cases = [
        ((None, True), '["route", "ip"]'),
        ((None, False), '["ip"]'),
        ((lambda request: "k", True), '["route", "key"]'),
        ((lambda request: "k", False), '["key"]'),
        ((["user", "route"], True), '["user", "route"]'),
        (("header:x-tenant", True), '["route", "header:x-tenant"]'),
    ]
    for (key, per_route), dims in cases:
        rule = _Check(limiter, key, None, 1, per_route).rule
        assert repr(rule) == f'<RouteRule {{ key: {dims}, policies: ["default"] }}>', (key, per_route)
    # The same rules through route_rule itself.
    assert repr(limiter.route_rule(key_function=True)) == '<RouteRule { key: ["key"], policies: ["default"] }>'
    with pytest.raises(polylimit.ConfigError) as err:
        limiter.route_rule(["ip"], key_function=True)
    assert (err.value.field, err.value.value) == ("key", '["ip"]')


def test_middleware_key_hook_keys_the_rule_built_from_policy(store: str) -> None:
    # key=callable with policy: the core keys the one rule by the hook's result, not by the client IP.
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, policy={"rate": "10/min", "burst": 1}, store=store,
                       timeout="10s", prefix=unique_prefix("mwkey"), key=lambda request: request.headers.get("x-tenant"))

    @app.get("/x")
    async def x():
        return {"ok": True}

    # A limiter keyed by ip and a key hook: the hook would be ignored, so every request fails.
    given = FastAPI()
    given.add_middleware(PolylimitMiddleware, limiter=polylimit.Limiter(policy=SLOW),
                         key=lambda request: "k")

    @given.get("/x")
    async def given_x():
        return {"ok": True}

    server, other = Server(app), Server(given)
    try:
        with httpx.Client(base_url=server.url) as client:
            got = [client.get("/x", headers={"x-tenant": t}).status_code for t in ("a", "b", "a", "b")]
            assert got == [200, 200, 429, 429]
        with httpx.Client(base_url=other.url) as client:
            assert client.get("/x").status_code == 500
    finally:
        server.stop()
        other.stop()
    # A key hook beside a key list that leaves `key` out cannot happen (one argument); beside a rules
    # document no rule of which reads `key`, it is refused when the middleware is built.
    with pytest.raises(polylimit.ConfigError) as err:
        PolylimitMiddleware(app, rules={"policies": {"api": {"rate": "1/s"}}, "rules": [{"key": ["ip"], "policy": "api"}]},
                            key=lambda request: "k")
    assert err.value.field == "key_function"
