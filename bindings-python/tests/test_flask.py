"""polylimit.flask: the HTTP vectors through the extension on memory and a real Redis, and Flask's
test client through the extension, ``@polylimit.limit`` (sync and async views), count-after-response,
concurrency release and ``flask polylimit config``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import unique_prefix
from flask import Flask, g, request
from http_vectors import Answer, Recorder, play, rate_headers
from test_conformance import files

import polylimit
from polylimit.flask import Polylimit

EXTRA = ("now_ms", "route", "user", "api_key", "key", "cost", "case_insensitive", "ignore_trailing_slash")
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


class VectorPolylimit(Polylimit):
    """The extension with the vector's fields a Flask request cannot carry (clock, route, user…)."""

    slept: List[float]

    def request_info(self, hooks):
        info = super().request_info(hooks)
        info.pop("route", None)  # the catch-all rule is no route of the vector's
        info.update(request.environ["polylimit.vector"])
        return info

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def vector_app(recorder: Recorder, status: int, raises: bool):
    app = Flask(__name__)
    app.testing = True  # a view's exception reaches the client: a request without a response

    @app.route("/", defaults={"p": ""}, methods=METHODS)
    @app.route("/<path:p>", methods=METHODS)
    def view(p: str):
        if raises:
            raise RuntimeError("the view failed")
        return "ok", status, {"X-View": "1"}

    ext = VectorPolylimit(app, limiter=recorder)
    ext.slept = []
    return app, ext


def serve(recorder: Recorder, req: Dict[str, Any], status: int, raises: bool) -> Answer:
    app, ext = vector_app(recorder, status, raises)
    headers: Dict[str, str] = {}
    given = req.get("headers", {})
    for name, value in given.items() if isinstance(given, dict) else given:
        key = name.lower()
        headers[key] = f"{headers[key]},{value}" if key in headers else value  # as a WSGI server joins them
    environ = {"polylimit.vector": {k: req[k] for k in EXTRA if k in req}, "REMOTE_ADDR": req.get("peer", "")}
    try:
        response = app.test_client().open(req.get("path", "/"), method=req.get("method", "GET"), headers=headers,
                                          environ_overrides=environ)
    except RuntimeError:
        return Answer(None, [], None, round(sum(ext.slept) * 1000))
    delay = round(sum(ext.slept) * 1000)
    if "X-View" in response.headers:
        return Answer(None, rate_headers(response.headers.items()), None, delay)
    return Answer(response.status_code, rate_headers(response.headers.items()), response.get_data(as_text=True), delay)


@pytest.mark.parametrize("vectors", files("http"), ids=lambda p: p.stem)
def test_http_vectors(vectors: Path, store: str) -> None:
    failures = play(vectors, store, serve)
    assert not failures, f"{len(failures)} mismatches on {store}:\n" + "\n".join(failures)


def rules(rules_: List[Dict[str, Any]], **policy: Any) -> Dict[str, Any]:
    return {"rules": {"policies": {"p": dict({"rate": "10/min", "burst": 2}, **policy)}, "rules": rules_},
            "prefix": unique_prefix("fl")}


def make_app(config: Any = None) -> Flask:
    app = Flask(__name__)
    if config is not None:
        app.config["POLYLIMIT"] = config
    limiter = Polylimit(app)

    @app.route("/items/<int:item_id>")
    def item(item_id: int):
        return {"item": item_id}

    @app.route("/own/<int:item_id>")
    @limiter.limit(key="ip", rate="10/min", burst=2)
    def own(item_id: int):
        return {"item": item_id}

    @app.route("/async/<int:item_id>")
    @limiter.limit(key="ip", rate="10/min", burst=2)
    async def async_own(item_id: int):
        return {"item": item_id}

    @app.route("/login")
    @limiter.limit(key=lambda req: req.headers.get("x-login-user"), rate="10/min", burst=5, count="failed")
    def login():
        return {"ok": False}, 401 if request.args.get("fail") else 200

    @app.route("/boom")
    def boom():
        raise RuntimeError("the view failed")

    return app


def test_extension_from_config_keys_the_url_rule() -> None:
    app = make_app(rules([{"match": {"path": "/items/*"}, "key": ["route"], "policy": "p"}]))
    client = app.test_client()
    answers = [client.get(f"/items/{i}") for i in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[0].headers["X-RateLimit-Remaining"] == "1"
    assert answers[2].headers["Content-Type"] == "application/json"
    assert json.loads(answers[2].data)["error"] == "rate_limit_exceeded"
    assert client.get("/nowhere").status_code == 404


def test_decorator_sync_and_async_views() -> None:
    client = make_app().test_client()  # no app-wide rules: only the decorated views
    assert [client.get(f"/own/{i}").status_code for i in range(3)] == [200, 200, 429]
    assert [client.get(f"/async/{i}").status_code for i in range(3)] == [200, 200, 429]
    assert [client.get(f"/items/{i}").status_code for i in range(3)] == [200, 200, 200]


def test_decorator_count_failed_gives_successes_back() -> None:
    client = make_app().test_client()
    user = {"X-Login-User": "ann"}
    assert [client.get("/login", headers=user).status_code for _ in range(8)] == [200] * 8
    assert [client.get("/login?fail=1", headers=user).status_code for _ in range(6)] == [401] * 5 + [429]
    assert client.get("/login").status_code == 200  # no key: not limited


def test_concurrency_released_after_a_view_error() -> None:
    doc = {"rules": {"policies": {"c": {"algorithm": "concurrency", "limit": 1, "lease": "60s"}},
                     "rules": [{"match": {"path": "/boom"}, "key": ["ip"], "policy": "c"}]}}
    client = make_app(doc).test_client()
    assert [client.get("/boom").status_code for _ in range(3)] == [500, 500, 500]


def test_hooks_from_config() -> None:
    config = rules([{"match": {"path": "/items/*"}, "key": ["user"], "policy": "p"}])
    config["user"] = lambda req: req.headers.get("x-user")
    client = make_app(config).test_client()
    assert [client.get("/items/1", headers={"X-User": "u1"}).status_code for _ in range(3)] == [200, 200, 429]
    assert client.get("/items/1", headers={"X-User": "u2"}).status_code == 200
    assert client.get("/items/1").status_code == 200


def test_app_factory_pattern_builds_decorated_rules_at_the_first_request() -> None:
    polylimit_ = Polylimit()  # at import, before any app

    @polylimit_.limit(key="ip", policy="p")  # a policy of the app's config, which does not exist yet
    def view():
        return {"ok": True}

    def create_app() -> Flask:
        app = Flask(__name__)
        app.config["POLYLIMIT"] = rules([])
        polylimit_.init_app(app)
        app.add_url_rule("/v", view_func=view)
        return app

    client = create_app().test_client()
    answers = [client.get("/v") for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    assert answers[0].headers["RateLimit-Policy"] == '"p";q=2;w=12'  # the config's policy p


def test_cli_prints_the_cores_effective_config(tmp_path) -> None:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(rules([{"match": {"path": "/*"}, "key": ["ip"], "policy": "p"}])["rules"]))
    app = make_app(str(path))
    result = app.test_cli_runner().invoke(args=["polylimit", "config"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == polylimit.effective_config(rules_file=str(path))


def test_bad_config_names_the_field() -> None:
    with pytest.raises(polylimit.ConfigError) as err:
        make_app({"rules": {"policies": {"p": {"rate": "fast"}}, "rules": []}})
    assert "rate" in err.value.field


# --- Cost: a cost function, and the actual cost the view reports on g.polylimit_cost -------------


def _report() -> None:
    if "used" in request.args:
        g.polylimit_cost = int(request.args["used"])  # the view's actual cost (an LLM call's tokens)


def llm_rules(store: str, **fields: Any) -> Dict[str, Any]:
    # 10 000 tokens an hour per client; a request reserves x-reserve tokens (1000 without it).
    rule = {"match": {"path": "/v1/*"}, "key": ["ip"], "policy": "llm",
            "cost": "header:x-reserve", "cost_default": 1000, "max_cost": 4000, "count": "successful"}
    rule.update(fields)
    return {"store": store, "prefix": unique_prefix("flllm"), "timeout": "10s", "headers": "legacy",
            "policies": {"llm": {"algorithm": "token_bucket", "rate": "10000/h"}},
            "rules": [{k: v for k, v in rule.items() if v is not None}]}


def llm_app(limiter: Any, **hooks: Any) -> Flask:
    app = Flask(__name__)
    ext = Polylimit(app, limiter=limiter, **hooks)

    @app.post("/v1/chat")
    def chat():
        _report()
        return "ok", int(request.args.get("status", "200"))

    @app.get("/reported")
    @ext.limit(key="ip", rate="1000/h", count="successful", cost=lambda req: int(req.headers.get("x-reserve", "1")))
    def reported():
        _report()
        return {}

    return app


def test_extension_settles_the_cost_the_view_reports(store: str) -> None:
    client = llm_app(polylimit.Limiter.from_rules(llm_rules(store))).test_client()
    assert client.post("/v1/chat?used=3400").headers["X-RateLimit-Remaining"] == "9000", "reserved 1000"
    # 3400 charged for the first, 1000 reserved for this one (a little refill in between).
    second = int(client.post("/v1/chat?used=1000").headers["X-RateLimit-Remaining"])
    assert 5600 <= second <= 5610
    # A cost the core refuses is logged and the request completed without it: a 500, which the rule
    # does not count, is given back whole.
    assert client.post("/v1/chat?used=-1&status=500").status_code == 500
    assert second - 1000 <= int(client.post("/v1/chat").headers["X-RateLimit-Remaining"]) <= second - 1000 + 10
    bad = client.post("/v1/chat", headers={"X-Reserve": "lots"})
    assert bad.status_code == 400 and bad.get_json()["error"] == "invalid_cost"


def test_extension_cost_function_is_checked_against_max_cost(store: str) -> None:
    limiter = polylimit.Limiter.from_rules(llm_rules(store, cost=None, cost_default=None))
    client = llm_app(limiter, cost=lambda req: int(req.headers.get("x-estimate", "1"))).test_client()
    assert client.post("/v1/chat", headers={"X-Estimate": "2500"}).headers["X-RateLimit-Remaining"] == "7500"
    too_much = client.post("/v1/chat", headers={"X-Estimate": "4001"})
    assert too_much.status_code == 400 and too_much.get_json()["field"] == "cost"


def test_config_cost_hook() -> None:
    config = rules([{"match": {"path": "/items/*"}, "key": ["ip"], "policy": "p"}], rate="10/min", burst=10)
    config["cost"] = lambda req: int(req.headers.get("x-estimate", "1"))
    client = make_app(config).test_client()
    assert client.get("/items/1", headers={"X-Estimate": "4"}).headers["X-RateLimit-Remaining"] == "6"


def test_decorator_cost_function_and_reported_cost() -> None:
    client = llm_app(None).test_client()  # no app-wide rules: only the decorated view
    first = client.get("/reported?used=500", headers={"X-Reserve": "100"})
    assert first.headers["X-RateLimit-Remaining"] == "900", "the cost function reserved 100"
    # The view used 500: 400 more charged after the response; this request reserves 1.
    assert 499 <= int(client.get("/reported").headers["X-RateLimit-Remaining"]) <= 501
