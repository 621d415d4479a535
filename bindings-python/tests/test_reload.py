"""Reload through Python (issue 38): ``reload`` / ``reload_sync`` read the rules
file again and swap the rules at once, keeping the state of unchanged
windows; a bad file raises ConfigError naming the field and keeps serving;
``watch`` picks up a changed file; a middleware sees the reload without a
restart. On the memory store and a real Redis."""

import asyncio
import time

import httpx
from conftest import unique_prefix
from fastapi import FastAPI

import polylimit
from polylimit.fastapi import PolylimitMiddleware
from test_fastapi import Server

NOW = 1_700_000_040_000


def rules(rate: str) -> str:
    return f"policies:\n  api: {{ algorithm: fixed_window, rate: {rate} }}\nrules:\n  - {{ key: [ip], policy: api }}\n"


def test_reload_keeps_the_window_and_a_bad_file_keeps_serving(store, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(rules("3/min"))
    lim = polylimit.Limiter.from_file(path, store=store, timeout="10s", prefix=unique_prefix("reload"))
    assert [lim.check_sync("k", now_ms=NOW).allowed for _ in range(3)] == [True] * 3
    path.write_text(rules("5/min"))
    assert lim.reload_sync() is None
    d = lim.check_sync("k", now_ms=NOW)
    assert (d.allowed, d.limit, d.remaining) == (True, 5, 1)

    path.write_text(rules("often"))
    try:
        lim.reload_sync()
        raise AssertionError("a bad file must raise")
    except polylimit.ConfigError as e:
        assert e.field == "policies.api.rate"
    # The old rules still decide, on their state.
    d = lim.check_sync("k", now_ms=NOW)
    assert (d.allowed, d.limit, d.remaining) == (True, 5, 0)

    async def run():
        path.write_text(rules("9/min"))
        await lim.reload()
        return await lim.check("k", now_ms=NOW)

    d = asyncio.run(run())
    assert (d.limit, d.remaining) == (9, 3)
    text = lim.metrics_text()
    assert 'polylimit_config_reloads_total{result="ok"} 2' in text
    assert 'polylimit_config_reloads_total{result="error"} 1' in text


def test_watch_picks_up_a_changed_file(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(rules("3/min"))
    lim = polylimit.Limiter(rules_file=str(path), watch=0.05)
    path.write_text(rules("7/min"))
    deadline = time.monotonic() + 10
    while lim.peek_sync("k", now_ms=NOW).limit != 7 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lim.peek_sync("k", now_ms=NOW).limit == 7
    lim.close()
    try:
        polylimit.Limiter({"rate": "1/s"}, watch=True)
        raise AssertionError("watch needs rules_file")
    except polylimit.ConfigError as e:
        assert e.field == "watch"


def test_the_middleware_sees_a_reload(store, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(rules("2/min"))
    lim = polylimit.Limiter.from_file(path, store=store, timeout="10s", prefix=unique_prefix("reload-mw"))
    app = FastAPI()
    app.add_middleware(PolylimitMiddleware, limiter=lim)

    @app.get("/api/hello")
    async def hello():
        return {"hello": "world"}

    server = Server(app)
    try:
        with httpx.Client(base_url=server.url) as client:
            assert [client.get("/api/hello").status_code for _ in range(3)] == [200, 200, 429]
            path.write_text(rules("4/min"))
            lim.reload_sync()
            # The same window: 2 of the new 4 are left.
            statuses = [client.get("/api/hello") for _ in range(3)]
            assert [r.status_code for r in statuses] == [200, 200, 429]
            assert statuses[0].headers["x-ratelimit-limit"] == "4"
    finally:
        server.stop()
