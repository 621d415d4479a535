"""Cost from the request and reconciled after the response: ``complete(token, status, cost=)``
through the API, and the ASGI middleware with a handler that reports its actual cost on
``request.state.polylimit_cost`` (served by uvicorn, driven by httpx), on the memory store and
a real Redis. The exact numbers per algorithm are the vectors in tests/conformance/cost."""

from __future__ import annotations

import json

import pytest
from conftest import unique_prefix
from fastapi import Depends, FastAPI, Request
from test_fastapi import Server

import polylimit
from polylimit.fastapi import PolylimitMiddleware, install

T0 = 1_700_000_000_000


def llm_rules(store: str) -> dict:
    # 10 000 tokens a minute per API key; a request reserves x-reserve tokens (1000 without it).
    return {
        "store": store,
        "prefix": unique_prefix("cost"),
        "timeout": "10s",
        "headers": "legacy",
        "policies": {"llm": {"algorithm": "token_bucket", "rate": "10000/min"}},
        "rules": [{"match": {"path": "/v1/*"}, "key": ["header:x-api-key"], "policy": "llm",
                   "cost": "header:x-reserve", "cost_default": 1000, "max_cost": 4000}],
    }


def request(reserve: str | None = None, now_ms: int = T0) -> dict:
    headers = {"x-api-key": "k1"}
    if reserve is not None:
        headers["x-reserve"] = reserve
    return {"method": "POST", "path": "/v1/chat", "peer": "203.0.113.7", "headers": headers, "now_ms": now_ms}


def test_complete_with_the_actual_cost(store: str) -> None:
    limiter = polylimit.Limiter.from_rules(llm_rules(store))
    first = limiter.check_request_sync(request())
    assert first.status is None and first.completion is not None
    # Reserved 1000, used 3400: 2400 more charged (a forced debit).
    limiter.complete_sync(first.completion, 200, cost=3400, now_ms=T0)
    second = limiter.check_request_sync(request())
    assert second.decisions[0]["remaining"] == 5600
    # Reserved 1000, used 200: 800 given back.
    limiter.complete_sync(second.completion, 200, cost=200)
    assert limiter.check_request_sync(request()).decisions[0]["remaining"] == 5400
    # Bad costs are the core's errors, naming the field.
    third = limiter.check_request_sync(request())
    for bad in (-1, 1.5, "x"):
        with pytest.raises(polylimit.ConfigError) as err:
            limiter.complete_sync(third.completion, 200, cost=bad)
        assert err.value.field == "cost"


def test_a_bad_cost_header_is_a_400_naming_it(store: str) -> None:
    limiter = polylimit.Limiter.from_rules(llm_rules(store))
    outcome = limiter.check_request_sync(request("lots"))
    assert outcome.status == 400
    body = json.loads(outcome.body)
    assert body["error"] == "invalid_cost" and body["field"] == "header:x-reserve" and body["value"] == "lots"
    assert limiter.check_request_sync(request("4000")).decisions[0]["remaining"] == 6000, "nothing was charged"
    # The refusal is counted in the request metrics, under the policy it would have charged.
    refused = [line for line in limiter.metrics_text().splitlines() if 'decision="invalid_cost"' in line]
    assert len(refused) == 1 and 'policy="llm"' in refused[0] and 'source="cost"' in refused[0], refused
    assert refused[0].endswith(" 1")


def test_the_middleware_settles_the_cost_the_handler_reports(store: str) -> None:
    limiter = polylimit.Limiter.from_rules(llm_rules(store))
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, limiter=limiter)

    @app.post("/v1/chat")
    async def chat(request: Request):
        used = int(request.query_params.get("used", "0"))
        request.state.polylimit_cost = used  # the tokens the model used
        return {"used": used}

    server = Server(app)
    try:
        with server.client() as client:
            headers = {"x-api-key": "k1"}
            first = client.post("/v1/chat?used=3400", headers=headers)
            assert first.status_code == 200
            assert first.headers["x-ratelimit-remaining"] == "9000", "reserved 1000"
            second = client.post("/v1/chat?used=1000", headers=headers)
            # 3400 charged for the first, 1000 reserved for this one (a little refill in between).
            assert 5600 <= int(second.headers["x-ratelimit-remaining"]) <= 5610
            bad = client.post("/v1/chat", headers={**headers, "x-reserve": "0"})
            assert bad.status_code == 400
            assert bad.json()["error"] == "invalid_cost"
            # 4000 allowed, then a request reserving 4000 no longer fits: the debt is real.
            assert client.post("/v1/chat?used=4000", headers={**headers, "x-reserve": "4000"}).status_code == 200
            assert client.post("/v1/chat", headers={**headers, "x-reserve": "4000"}).status_code == 429
    finally:
        server.stop()


def test_a_cost_function_gives_the_cost_checked_against_max_cost(store: str) -> None:
    rules = llm_rules(store)
    rules["rules"][0].pop("cost")
    rules["rules"][0].pop("cost_default")
    limiter = polylimit.Limiter.from_rules(rules)
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, limiter=limiter,
                       cost=lambda request: int(request.headers.get("x-estimate", "1")))

    @app.post("/v1/chat")
    async def chat():
        return {}

    server = Server(app)
    try:
        with server.client() as client:
            headers = {"x-api-key": "k1"}
            ok = client.post("/v1/chat", headers={**headers, "x-estimate": "2500"})
            assert ok.headers["x-ratelimit-remaining"] == "7500"
            too_much = client.post("/v1/chat", headers={**headers, "x-estimate": "4001"})
            assert too_much.status_code == 400 and too_much.json()["field"] == "cost"
    finally:
        server.stop()


def test_the_per_route_forms_take_a_cost_function_and_settle_the_reported_cost(store: str) -> None:
    limiter = polylimit.Limiter(policy={"rate": "1000/h"}, store=store, prefix=unique_prefix("costroute"),
                                timeout="10s")
    app = FastAPI()
    install(app)  # the Depends form completes after the response

    async def reserve(request: Request) -> int:  # a cost function may be async
        return int(request.headers.get("x-reserve", "1"))

    def report(request: Request) -> None:
        if "used" in request.query_params:
            request.state.polylimit_cost = int(request.query_params["used"])

    @app.get("/decorated")
    @limiter.limit(key="ip", count="successful", cost=reserve)
    async def decorated(request: Request):
        report(request)
        return {}

    @app.get("/depends", dependencies=[Depends(limiter.depends(key="ip", count="successful", cost=reserve))])
    async def depends(request: Request):
        report(request)
        return {}

    server = Server(app)
    try:
        with server.client() as client:
            for route in ("/decorated", "/depends"):  # each route has its own budget
                first = client.get(f"{route}?used=500", headers={"x-reserve": "100"})
                assert first.headers["x-ratelimit-remaining"] == "900", (route, "the cost function reserved 100")
                # The handler used 500: 400 more charged after the response; this request reserves 1.
                assert 499 <= int(client.get(route).headers["x-ratelimit-remaining"]) <= 501, route
    finally:
        server.stop()
