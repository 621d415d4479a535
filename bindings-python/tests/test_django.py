"""polylimit.django: the HTTP vectors through the middleware (sync and async) on memory and a
real Redis, and Django's own test clients through the settings' middleware and ``@ratelimit``
(sync and async views, route templates, count-after-response, concurrency release)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Dict, List

import django
import pytest
from django.conf import settings

if not settings.configured:
    settings.configure(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        MIDDLEWARE=["polylimit.django.PolylimitMiddleware"],
        POLYLIMIT={"rules": {"policies": {"p": {"rate": "10/min", "burst": 3}}, "rules": []}},
    )
    django.setup()

from conftest import unique_prefix  # noqa: E402
from django.http import HttpResponse, JsonResponse  # noqa: E402
from django.test import AsyncClient, Client, RequestFactory, override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from http_vectors import Answer, Recorder, play, rate_headers  # noqa: E402
from test_conformance import files  # noqa: E402

import polylimit  # noqa: E402
import polylimit.django as pdj  # noqa: E402
from polylimit.django import PolylimitMiddleware, ratelimit  # noqa: E402

# The request fields a Django request cannot carry; the runner's subclass adds them.
EXTRA = ("now_ms", "route", "user", "api_key", "key", "cost", "case_insensitive", "ignore_trailing_slash")


class NoRoutes:
    """A URLconf that matches nothing: the vectors give the route themselves, or none."""

    urlpatterns: List[Any] = []


class VectorMiddleware(PolylimitMiddleware):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slept: List[float] = []

    def request_info(self, request, hooks):
        info = super().request_info(request, hooks)
        info.update(request.META["polylimit.vector"])
        return info

    def sleep(self, seconds: float) -> Any:
        self.slept.append(seconds)
        return asyncio.sleep(0) if self.is_async else None


def django_request(req: Dict[str, Any]):
    headers = req.get("headers", {})
    meta: Dict[str, str] = {}
    for name, value in headers.items() if isinstance(headers, dict) else headers:
        name = name.upper().replace("-", "_")
        name = name if name in ("CONTENT_TYPE", "CONTENT_LENGTH") else "HTTP_" + name
        meta[name] = f"{meta[name]},{value}" if name in meta else value  # as a WSGI server joins them
    request = RequestFactory().generic(req.get("method", "GET"), req.get("path", "/"), **meta)
    del request.META["REMOTE_ADDR"]
    if req.get("peer"):
        request.META["REMOTE_ADDR"] = req["peer"]
    request.META["polylimit.vector"] = {k: req[k] for k in EXTRA if k in req}
    request.urlconf = NoRoutes
    return request


def answer(response, middleware: VectorMiddleware) -> Answer:
    delay = round(sum(middleware.slept) * 1000)
    if response is None:  # the view raised
        return Answer(None, [], None, delay)
    if response.has_header("X-View"):
        return Answer(None, rate_headers(response.items()), None, delay)
    return Answer(response.status_code, rate_headers(response.items()), response.content.decode(), delay)


def serve_sync(recorder: Recorder, req: Dict[str, Any], status: int, raises: bool) -> Answer:
    def view(request):
        if raises:
            raise RuntimeError("the view failed")
        return HttpResponse("ok", status=status, headers={"X-View": "1"})

    middleware = VectorMiddleware(view, limiter=recorder)
    try:
        response = middleware(django_request(req))
    except RuntimeError:
        response = None
    return answer(response, middleware)


def serve_async(recorder: Recorder, req: Dict[str, Any], status: int, raises: bool) -> Answer:
    async def view(request):
        if raises:
            raise RuntimeError("the view failed")
        return HttpResponse("ok", status=status, headers={"X-View": "1"})

    middleware = VectorMiddleware(view, limiter=recorder)
    assert middleware.is_async

    async def run():
        try:
            return await middleware(django_request(req))
        except RuntimeError:
            return None

    return answer(asyncio.run(run()), middleware)


@pytest.mark.parametrize("serve", [serve_sync, serve_async], ids=["sync", "async"])
@pytest.mark.parametrize("vectors", files("http"), ids=lambda p: p.stem)
def test_http_vectors(vectors: Path, store: str, serve) -> None:
    failures = play(vectors, store, serve)
    assert not failures, f"{len(failures)} mismatches on {store}:\n" + "\n".join(failures)


# --- Django's own handler: settings, URLconf, decorator -------------------------------------

limiter = polylimit.Limiter(policy={"rate": "10/min", "burst": 2}, prefix=unique_prefix("dj"))
stats = {"in_flight": 0}


@ratelimit(key="ip", rate="10/min", burst=2)
def sync_item(request, item_id: int):
    return JsonResponse({"item": item_id})


@ratelimit(key="ip", limiter=limiter)
async def async_item(request, item_id: int):
    return JsonResponse({"item": item_id})


@ratelimit(key=lambda request: request.headers.get("x-login-user"), rate="10/min", burst=5, count="failed")
def login(request):
    return JsonResponse({"ok": False}, status=401 if request.GET.get("fail") else 200)


def boom(request):
    raise RuntimeError("the view failed")


def _reserve(request) -> int:
    return int(request.headers.get("x-reserve", "1"))


def _report(request) -> None:
    if "used" in request.GET:
        request.polylimit_cost = int(request.GET["used"])  # the view's actual cost (an LLM call's tokens)


cost_limiter = polylimit.Limiter(policy={"rate": "1000/h"}, prefix=unique_prefix("djcost"))


@ratelimit(key="ip", limiter=cost_limiter, count="successful", cost=_reserve)
def reported(request):
    _report(request)
    return JsonResponse({})


@ratelimit(key="ip", limiter=cost_limiter, count="successful", cost=_reserve)
async def async_reported(request):
    _report(request)
    return JsonResponse({})


urlpatterns = [
    path("reported", reported),
    path("async_reported", async_reported),
    path("sync/<int:item_id>", sync_item),
    path("async/<int:item_id>", async_item),
    path("login", login),
    path("rules/<str:name>", lambda request, name: HttpResponse(name)),
    path("boom", boom),
]


def test_decorator_sync_view_is_limited_per_route_template() -> None:
    client = Client()
    answers = [client.get(f"/sync/{i}") for i in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[0]["X-RateLimit-Remaining"] == "1"  # one budget for the template, not per id
    assert answers[2]["Content-Type"] == "application/json"
    body = json.loads(answers[2].content)
    assert body["error"] == "rate_limit_exceeded" and answers[2]["Retry-After"] == body["retry_after"].__str__()


def test_decorator_async_view() -> None:
    async def run() -> List[int]:
        client = AsyncClient()
        return [(await client.get(f"/async/{i}")).status_code for i in range(3)]

    assert asyncio.run(run()) == [200, 200, 429]


def test_decorator_count_failed_gives_successes_back() -> None:
    client = Client()
    user = {"HTTP_X_LOGIN_USER": "ann"}
    assert [client.get("/login", **user).status_code for _ in range(8)] == [200] * 8  # never charged
    failed = [client.get("/login?fail=1", **user).status_code for _ in range(6)]
    assert failed == [401] * 5 + [429]
    assert client.get("/login").status_code == 200  # no key: not limited


def rules(rules_: List[Dict[str, Any]], **policy: Any) -> Dict[str, Any]:
    return {"rules": {"policies": {"p": dict({"rate": "10/min", "burst": 2}, **policy)}, "rules": rules_},
            "prefix": unique_prefix("djs")}


@pytest.fixture
def settings_rules():
    """``settings.POLYLIMIT`` for one test: a new Client's middleware builds its limiter from it."""
    return lambda value: override_settings(POLYLIMIT=value)


def test_middleware_from_settings_keys_the_route_template(settings_rules) -> None:
    with settings_rules(rules([{"match": {"path": "/rules/*"}, "key": ["route"], "policy": "p"}])):
        client = Client()
        assert [client.get(f"/rules/{n}").status_code for n in "abc"] == [200, 200, 429]
        assert client.get("/nowhere").status_code == 404  # unmatched: its own key, not limited by the rule


def test_middleware_async_stack(settings_rules) -> None:
    with settings_rules(rules([{"match": {"path": "/rules/*"}, "key": ["ip"], "policy": "p"}])):
        async def run() -> List[int]:
            client = AsyncClient()
            return [(await client.get(f"/rules/{n}")).status_code for n in "abc"]

        assert asyncio.run(run()) == [200, 200, 429]


def test_middleware_releases_concurrency_after_a_view_error(settings_rules, tmp_path) -> None:
    doc = {"policies": {"c": {"algorithm": "concurrency", "limit": 1, "lease": "60s"}},
           "rules": [{"match": {"path": "/boom"}, "key": ["ip"], "policy": "c"}]}
    path_ = tmp_path / "rules.json"
    path_.write_text(json.dumps(doc))
    with settings_rules(str(path_)):
        client = Client(raise_request_exception=False)
        # Each 500 releases the one slot: the next request is let in again.
        assert [client.get("/boom").status_code for _ in range(3)] == [500, 500, 500]


def test_middleware_hooks_from_settings(settings_rules) -> None:
    value = rules([{"match": {"path": "/rules/*"}, "key": ["user"], "policy": "p"}])
    value["user"] = lambda request: request.headers.get("x-user")
    with settings_rules(value):
        client = Client()
        assert [client.get("/rules/a", HTTP_X_USER="u1").status_code for _ in range(3)] == [200, 200, 429]
        assert client.get("/rules/a", HTTP_X_USER="u2").status_code == 200
        assert client.get("/rules/a").status_code == 200  # no user: the rule is skipped


def test_bad_settings_name_the_field(settings_rules) -> None:
    with settings_rules({"rules": {"policies": {"p": {"rate": "fast"}}, "rules": []}}):
        with pytest.raises(polylimit.ConfigError) as err:
            pdj.settings_limiter()
        assert "rate" in err.value.field
    with settings_rules(42), pytest.raises(TypeError, match="POLYLIMIT"):
        pdj.settings_limiter()


# --- Cost: a cost function, and the actual cost the view reports on request.polylimit_cost -----


def test_decorator_cost_function_and_reported_cost() -> None:
    client = Client()
    first = client.get("/reported?used=500", HTTP_X_RESERVE="100")
    assert first["X-RateLimit-Remaining"] == "900", "the cost function reserved 100"
    # The view used 500: 400 more charged after the response; this request reserves 1.
    assert 499 <= int(client.get("/reported")["X-RateLimit-Remaining"]) <= 501

    async def run() -> List[str]:
        client = AsyncClient()
        first = await client.get("/async_reported?used=500", headers={"x-reserve": "100"})
        return [first["X-RateLimit-Remaining"], (await client.get("/async_reported"))["X-RateLimit-Remaining"]]

    first_async, second_async = asyncio.run(run())
    assert first_async == "900" and 499 <= int(second_async) <= 501


def llm_rules(store: str, **fields: Any) -> Dict[str, Any]:
    # 10 000 tokens an hour per client; a request reserves x-reserve tokens (1000 without it).
    rule = {"match": {"path": "/v1/*"}, "key": ["ip"], "policy": "llm",
            "cost": "header:x-reserve", "cost_default": 1000, "max_cost": 4000, "count": "successful"}
    rule.update(fields)
    return {"store": store, "prefix": unique_prefix("djllm"), "timeout": "10s", "headers": "legacy",
            "policies": {"llm": {"algorithm": "token_bucket", "rate": "10000/h"}},
            "rules": [{k: v for k, v in rule.items() if v is not None}]}


def llm_middleware(limiter: Any, mode: str, **hooks: Any) -> PolylimitMiddleware:
    def view(request):
        _report(request)
        return HttpResponse("ok", status=int(request.GET.get("status", "200")))

    async def async_view(request):
        return view(request)

    return PolylimitMiddleware(async_view if mode == "async" else view, limiter=limiter, **hooks)


def post(middleware: PolylimitMiddleware, path_: str, **meta: str):
    request = RequestFactory().post(path_, **meta)
    request.urlconf = NoRoutes
    response = middleware(request)
    return asyncio.run(response) if middleware.is_async else response


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_middleware_settles_the_cost_the_view_reports(store: str, mode: str) -> None:
    middleware = llm_middleware(polylimit.Limiter.from_rules(llm_rules(store)), mode)
    assert post(middleware, "/v1/chat?used=3400")["X-RateLimit-Remaining"] == "9000", "reserved 1000"
    # 3400 charged for the first, 1000 reserved for this one (a little refill in between).
    second = int(post(middleware, "/v1/chat?used=1000")["X-RateLimit-Remaining"])
    assert 5600 <= second <= 5610
    # A cost the core refuses is logged and the request completed without it: a 500, which the rule
    # does not count, is given back whole.
    assert post(middleware, "/v1/chat?used=-1&status=500").status_code == 500
    assert second - 1000 <= int(post(middleware, "/v1/chat")["X-RateLimit-Remaining"]) <= second - 1000 + 10
    bad = post(middleware, "/v1/chat", HTTP_X_RESERVE="lots")
    assert bad.status_code == 400 and json.loads(bad.content)["error"] == "invalid_cost"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_middleware_cost_function_is_checked_against_max_cost(store: str, mode: str) -> None:
    limiter = polylimit.Limiter.from_rules(llm_rules(store, cost=None, cost_default=None))

    def estimate(request) -> int:
        return int(request.headers.get("x-estimate", "1"))

    async def async_estimate(request) -> int:
        return estimate(request)

    middleware = llm_middleware(limiter, mode, cost=async_estimate if mode == "async" else estimate)
    assert post(middleware, "/v1/chat", HTTP_X_ESTIMATE="2500")["X-RateLimit-Remaining"] == "7500"
    too_much = post(middleware, "/v1/chat", HTTP_X_ESTIMATE="4001")
    assert too_much.status_code == 400 and json.loads(too_much.content)["field"] == "cost"
