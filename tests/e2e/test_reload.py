"""Reload through every example app (issue 38), on a real Redis: each app is started on a copy
of a rules file in a temp dir (the apps only get its path, POLYLIMIT_RULES) whose own `watch:
100ms` makes the app poll it. The test rewrites the file, and every app enforces the new
limit on its next requests, with no restart: 3/h becomes 5/h on /api/reloaded (a key that
spent its 3 gets 2 more: the state is kept) and a new rule limits /api/added. A bad file then
keeps those rules serving, counted in polylimit_config_reloads_total{result="error"}, and a
good one after it applies again.

The 14 apps start side by side and each phase runs in every app at once (threads), so the test
takes about one app start plus a few polls. Waiting for the file poll is its one wall-clock
wait, bounded: it asks again every 50 ms until the app's answers show the new rules."""

from __future__ import annotations

import os
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional

import pytest

from conftest import APP_NAMES
from servers import LOGS, App, Response

RULES = """# tests/e2e/test_reload.py: the apps watch this file (a copy in a temp dir).
watch: 100ms
store: ${{REDIS_URL}}
timeout: 10s
headers: both
policies:
  reloaded: {{ algorithm: fixed_window, rate: {rate} }}
{added_policy}rules:
  - {{ name: reloaded, match: {{ path: /api/reloaded }}, key: [ip, "header:x-run"], policy: reloaded }}
{added_rule}"""
ADDED_POLICY = "  added: { algorithm: fixed_window, rate: 1/h }\n"
ADDED_RULE = '  - { name: added, match: { path: /api/added }, key: [ip, "header:x-run"], policy: added }\n'
WAIT_S = 15  # the longest wait for a poll: 100 ms here, slower on a loaded machine


def rules(rate: str, added: bool = False) -> str:
    return RULES.format(rate=rate, added_policy=ADDED_POLICY if added else "", added_rule=ADDED_RULE if added else "")


def replace(path: Path, text: str) -> None:
    """Writes `text` to `path` whole: a poll never reads half a file."""
    part = path.with_suffix(".part")
    part.write_text(text)
    os.replace(part, path)


@pytest.fixture(scope="module")
def watched(redis, tmp_path_factory) -> Iterator[tuple]:
    path = tmp_path_factory.mktemp("reload") / "polylimit.yaml"
    path.write_text(rules("3/h"))
    env = {"REDIS_URL": redis.url, "POLYLIMIT_RULES": str(path)}
    apps = [App(name, env) for name in APP_NAMES]
    for app in apps:
        app.log = LOGS / f"{app.name}-reload.log"  # beside the session's apps, not over their logs
    started = time.monotonic()
    try:
        for app in apps:
            app.start()
        for app in apps:
            app.wait_ready()
        print(f"\n{len(apps)} apps ready in {time.monotonic() - started:.1f} s")
        yield path, apps
    finally:
        for app in apps:
            app.stop()


def every_app(apps: List[App], phase: Callable[[App], None]) -> None:
    """`phase` in every app at once; fails naming each app it failed in."""
    with ThreadPoolExecutor(max_workers=len(apps)) as pool:
        futures = {app.label: pool.submit(phase, app) for app in apps}
    failed = {}
    for label, future in futures.items():
        try:
            future.result()
        except AssertionError as e:
            failed[label] = str(e)
    assert not failed, failed


def get(app: App, path: str, run: str) -> Response:
    return app.request(path, headers={"X-Run": run})


def limited(app: App, path: str, limit: str) -> Response:
    """Asks `path` with a new key every 50 ms until the answer is limited by `limit` (the rules
    the test wrote have been applied), at most WAIT_S seconds; the last answer."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = get(app, path, uuid.uuid4().hex)
        if answer.header("X-RateLimit-Limit") == limit or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)  # the app's next file poll, not a refill


def reloads(app: App) -> Dict[str, int]:
    text = app.request("/metrics").body.decode()
    return {
        result: int(m.group(1)) if (m := re.search(rf'^polylimit_config_reloads_total{{result="{result}"}} (\d+)$', text, re.M)) else -1
        for result in ("ok", "error")
    }


def answers(app: App, path: str, run: str, n: int) -> List[tuple]:
    got = [get(app, path, run) for _ in range(n)]
    return [(a.status, a.header("X-RateLimit-Limit"), a.header("X-RateLimit-Remaining")) for a in got]


def test_every_app_takes_a_changed_rules_file_without_a_restart(watched):
    path, apps = watched
    started = time.monotonic()
    runs: Dict[str, str] = {app.name: uuid.uuid4().hex for app in apps}

    def before(app: App) -> None:
        assert answers(app, "/api/reloaded", runs[app.name], 4) == [
            (200, "3", "2"), (200, "3", "1"), (200, "3", "0"), (429, "3", "0")
        ], app.label
        unruled = get(app, "/api/added", runs[app.name])
        assert (unruled.status, unruled.header("X-RateLimit-Limit")) == (200, None), app.label
        assert reloads(app) == {"ok": 0, "error": 0}, app.label

    every_app(apps, before)

    # 3/h → 5/h, and a rule for /api/added.
    replace(path, rules("5/h", added=True))

    def after(app: App) -> None:
        probe = limited(app, "/api/reloaded", "5")
        assert probe.header("X-RateLimit-Limit") == "5", (app.label, "no reload in", WAIT_S, "s", probe.headers)
        # The key that spent 3 of 3 has 2 more of 5: the state is kept.
        assert answers(app, "/api/reloaded", runs[app.name], 3) == [
            (200, "5", "1"), (200, "5", "0"), (429, "5", "0")
        ], app.label
        assert answers(app, "/api/added", runs[app.name], 2) == [(200, "1", "0"), (429, "1", "0")], app.label
        assert reloads(app) == {"ok": 1, "error": 0}, app.label

    every_app(apps, after)
    applied = time.monotonic()

    # A bad file: counted, and the rules in force keep serving.
    replace(path, rules("often", added=True))

    def bad(app: App) -> None:
        deadline = time.monotonic() + WAIT_S
        while (counted := reloads(app))["error"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the app's next file poll
        assert counted == {"ok": 1, "error": 1}, app.label
        assert answers(app, "/api/reloaded", runs[app.name], 1) == [(429, "5", "0")], app.label
        assert answers(app, "/api/reloaded", uuid.uuid4().hex, 1) == [(200, "5", "4")], app.label
        assert answers(app, "/api/added", runs[app.name], 1) == [(429, "1", "0")], app.label

    every_app(apps, bad)

    # Fixed: the next good file applies (the watch goes on after a bad one).
    replace(path, rules("7/h"))

    def fixed(app: App) -> None:
        probe = limited(app, "/api/reloaded", "7")
        assert probe.header("X-RateLimit-Limit") == "7", (app.label, probe.headers)
        assert answers(app, "/api/reloaded", runs[app.name], 1) == [(200, "7", "1")], app.label
        unruled = get(app, "/api/added", runs[app.name])
        assert (unruled.status, unruled.header("X-RateLimit-Limit")) == (200, None), app.label
        assert reloads(app) == {"ok": 2, "error": 1}, app.label

    every_app(apps, fixed)
    print(f"reload phases: {applied - started:.1f} s to the first reload, {time.monotonic() - started:.1f} s in all")
