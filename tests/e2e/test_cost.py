"""Cost reconciliation through every example app on a real Redis: POST /api/llm reserves its
X-Reserve header before the handler (the rules' `llm` rule: a token bucket of 10 000 an hour, `max_cost: 5000`), the handler reports X-Actual-Cost
and the app's middleware completes with it. N concurrent requests reserving r and reporting m
take the key at most N × (m − r) past its limit, exactly as many tokens as the admitted ones
used beyond the burst; a smaller actual cost gives the difference back; a bad X-Reserve is the
core's 400 invalid_cost. The apps are the session's (conftest.py), on tests/e2e/polylimit.yaml;
each test's X-Run header is a key of its own."""

from __future__ import annotations

import json
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Dict

from servers import App

BURST = 10_000
TOKEN_S = 3600 / 10_000  # the llm policy refills a token every 0.36 s
MAX_COST = 5000


def llm(app: App, run: str, reserve: str | None, actual: int | None = None):
    headers: Dict[str, str] = {"X-Run": run}
    if reserve is not None:
        headers["X-Reserve"] = reserve
    if actual is not None:
        headers["X-Actual-Cost"] = str(actual)
    return app.request("/api/llm", method="POST", headers=headers)


def test_the_overshoot_is_what_the_admitted_requests_used_past_the_burst(app):
    n, r, m = 10, 1000, 3000  # 10 reservations of 1000 fill the burst exactly; each uses 3000
    run = uuid.uuid4().hex
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(lambda _: llm(app, run, str(r), m), range(n)))
    assert {a.status for a in answers} <= {200, 429}, [a.status for a in answers]
    admitted = sum(a.status == 200 for a in answers)
    # However the checks and completions interleave, each admitted request nets m: the key ends
    # admitted × m − burst tokens in debt (4 are admitted even one after another: 1000, then 3000 each).
    debt = admitted * m - BURST
    assert 4 <= admitted <= n, app.label
    assert 0 < debt <= n * (m - r), app.label
    if admitted == n:
        assert debt == n * (m - r), app.label
    # The next request (cost 1) waits the debt off: Retry-After (debt + 1) × 0.36 s, less the
    # refill since the first request. The completions may land just after their responses: ask
    # again (a refused request charges nothing) until they have.
    want_high = math.ceil((debt + 1) * TOKEN_S)
    deadline = time.monotonic() + 10
    while True:
        follow = llm(app, run, "1")
        elapsed = time.monotonic() - started
        retry = int(follow.header("Retry-After") or 0)
        if follow.status == 429 and retry >= (debt + 1) * TOKEN_S - elapsed - 1 or time.monotonic() > deadline:
            break
        time.sleep(0.02)  # the completions, not a refill
    assert follow.status == 429, (app.label, follow.body)
    assert follow.header("X-RateLimit-Remaining") == "0", app.label
    assert (debt + 1) * TOKEN_S - elapsed - 1 <= retry <= want_high, (app.label, retry, debt, elapsed)


def test_a_smaller_actual_cost_is_given_back(app):
    run = uuid.uuid4().hex
    started = time.monotonic()
    first = llm(app, run, "1000", 200)
    assert first.status == 200, (app.label, first.body)
    assert first.header("X-RateLimit-Remaining") == str(BURST - 1000), app.label
    # Follow-ups reserving 1 (and using 1) until the 800 given back shows.
    for i in range(1, 50):
        follow = llm(app, run, "1", 1)
        assert follow.status == 200, (app.label, follow.body)
        remaining = int(follow.header("X-RateLimit-Remaining"))
        if remaining >= BURST - 200 - i:  # far above BURST - 1000 - i plus any refill
            break
    want = BURST - 200 - i
    refill = math.ceil((time.monotonic() - started) / TOKEN_S)
    assert want <= remaining <= want + refill, (app.label, remaining, want)


def test_a_bad_reservation_is_the_cores_400(app):
    run = uuid.uuid4().hex
    for value in ("abc", "2.5", "0", str(MAX_COST + 1)):
        bad = llm(app, run, value, 10)
        assert bad.status == 400, (app.label, value, bad.body)
        body = json.loads(bad.body)
        assert (body["error"], body["field"], body["max_cost"]) == ("invalid_cost", "header:x-reserve", MAX_COST), (
            app.label,
            body,
        )
        assert bad.header("X-RateLimit-Remaining") is None, app.label
    # Nothing was charged.
    ok = llm(app, run, "1")
    assert (ok.status, ok.header("X-RateLimit-Remaining")) == (200, str(BURST - 1)), app.label
