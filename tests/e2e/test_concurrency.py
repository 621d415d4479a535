"""Concurrency limits (requests in flight per key) against every app, on one
real Redis: the rules file's `reports` rule allows 10 `GET /reports/{id}` in
flight per client and run (`algorithm: concurrency, limit: 10, lease: 5s`).
Each app counts the requests inside its handler (`GET /stats`): that count is
what the limit is measured by, not the statuses alone. The middleware acquires
a slot before the handler and releases it after the response, also after an
error, a panic or a client gone; a killed app's slots end with their lease
(the one place these tests wait on the wall clock: 5 s)."""

import json
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException
from pathlib import Path
from typing import Dict

import pytest
from conftest import APP_NAMES, statuses
from servers import App

RULES = Path(__file__).parent / "polylimit.yaml"
LIMIT = 10
LEASE_S = 5.0
POLICY = '"reports";q=10;qu="concurrent-requests"'


def a_run():
    return {"X-Run": uuid.uuid4().hex}


def stats(app):
    return json.loads(app.request("/stats").body)


def wait_for(app, in_flight, timeout=5.0):
    """Polls the app's own gauge until `in_flight` requests are inside its handler."""
    deadline = time.monotonic() + timeout
    while True:
        now = stats(app)
        if now["in_flight"] == in_flight:
            return now
        assert time.monotonic() < deadline, f"{app.label}: {now} in flight, waited for {in_flight}"
        time.sleep(0.02)


def quiet(app):
    """No request of an earlier test inside the handler; the gauge's maximum and count start over."""
    wait_for(app, 0, timeout=10)
    assert app.request("/stats", method="DELETE").status == 200


def report(app, run, i, ms, fail=False, timeout=20):
    """One report request; a connection dropped by the app (a Go panic) is status 0."""
    path = f"/reports/{i}?ms={ms}" + ("&fail=1" if fail else "")
    try:
        return app.request(path, headers=run, timeout=timeout)
    except (OSError, HTTPException):
        return None


def at_once(calls):
    """Runs the calls all at once; their results in order."""
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def refused_by_the_concurrency_rule(response):
    assert response.status == 429
    assert response.header("RateLimit-Policy") == POLICY
    retry = int(response.header("Retry-After"))
    assert 1 <= retry <= LEASE_S  # until the oldest lease would end
    assert json.loads(response.body) == {
        "error": "rate_limit_exceeded", "message": "Too Many Requests", "retry_after": retry}


def test_100_slow_requests_with_limit_10_run_at_most_10_at_once(app):
    quiet(app)
    run = a_run()
    # Each admitted request holds 3 s (within the 5 s lease): all 100 arrive while the first 10 are inside.
    responses = at_once([lambda i=i: report(app, run, i, 3000) for i in range(100)])
    measured = stats(app)
    assert sorted(statuses(responses)) == [200] * LIMIT + [429] * (100 - LIMIT)
    assert measured["max_in_flight"] == LIMIT  # never more than 10 inside the handler
    assert measured["started"] == LIMIT  # exactly the admitted ones ran
    for i, r in enumerate(responses):
        assert r.header("RateLimit-Policy") == POLICY
        if r.status == 429:
            refused_by_the_concurrency_rule(r)
        else:
            assert json.loads(r.body) == {"report": str(i)}
    print(f"\n{app.label}: 100 requests, limit 10: max in flight {measured['max_in_flight']}, "
          f"admitted {statuses(responses).count(200)}, refused {statuses(responses).count(429)}")
    # They are over: their 10 slots came back on success, long before their lease ends.
    again = at_once([lambda i=i: report(app, run, i, 1000) for i in range(LIMIT + 1)])
    assert sorted(statuses(again)) == [200] * LIMIT + [429]
    assert stats(app)["max_in_flight"] == LIMIT


def test_a_failing_handler_releases_its_slot(app):
    quiet(app)
    run = a_run()
    failed = at_once([lambda i=i: report(app, run, i, 300, fail=True) for i in range(LIMIT)])
    if app.name == "go":
        # A panic: the Go middleware releases and panics on; net/http recovers it and drops the connection.
        assert failed == [None] * LIMIT
    else:
        assert statuses(failed) == [500] * LIMIT
    assert stats(app)["started"] == LIMIT
    # Well within the 5 s lease, every slot is free again.
    after = at_once([lambda i=i: report(app, run, i, 1000) for i in range(LIMIT + 1)])
    assert sorted(statuses(after)) == [200] * LIMIT + [429]


def hold_and_hang_up(app, run, count, ms):
    """`count` requests that the app admits and holds `ms`, whose clients then hang up."""
    socks = []
    for i in range(count):
        s = socket.create_connection(("127.0.0.1", app.port), timeout=5)
        s.sendall(f"GET /reports/{i}?ms={ms} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Run: {run['X-Run']}\r\n\r\n".encode())
        socks.append(s)
    return socks


def test_a_client_that_hangs_up_releases_its_slot(app):
    quiet(app)
    run = a_run()
    socks = hold_and_hang_up(app, run, LIMIT, 1500)
    wait_for(app, LIMIT)
    acquired = time.monotonic()
    assert report(app, run, "x", 0).status == 429  # all 10 slots are held
    for s in socks:
        s.close()
    # Released once the handler ends (FastAPI, Express, Fastify and Spring Boot: after its 1.5 s, when it ends
    # the response nobody reads; Go: at once, its handler sees the request's context end), well
    # before the 5 s lease would give the slots back, and never while the handler still runs.
    while True:
        probe = at_once([lambda i=i: report(app, run, i, 0) for i in range(LIMIT)])
        if statuses(probe) == [200] * LIMIT:
            break
        assert time.monotonic() - acquired < LEASE_S - 1, f"{app.label}: slots still held: {statuses(probe)}"
        time.sleep(0.1)
    released = time.monotonic() - acquired
    measured = stats(app)["max_in_flight"]
    print(f"\n{app.label}: 10 hung-up requests released {released:.2f} s after they were admitted;"
          f" max in the handler {measured}")
    assert measured == LIMIT


def a_killed_apps_slots_come_back(victim: App, fresh: App) -> str:
    """The victim takes all 10 slots and is killed (SIGKILL: nothing is released); `fresh`, another process
    of the same app on the same Redis, is refused until the dead one's leases end, then has every slot.
    What it measured, or an AssertionError."""
    run = a_run()
    with ThreadPoolExecutor(max_workers=LIMIT) as pool:
        before = time.time()
        holding = [pool.submit(report, victim, run, i, 30_000) for i in range(LIMIT)]
        wait_for(victim, LIMIT)
        held = time.time()
        victim.proc.kill()
        victim.proc.wait()
        assert [h.result() for h in holding] == [None] * LIMIT
    # Another process on the same Redis: the dead one's leases hold every slot...
    refused_by_the_concurrency_rule(report(fresh, run, "x", 0))
    assert time.time() < before + LEASE_S
    # ...until the lease ends (Redis's clock on this machine), then every slot is free.
    while (r := report(fresh, run, "x", 0)).status == 429:
        assert time.time() < held + LEASE_S + 2, f"{fresh.label}: slots still held after their lease"
        time.sleep(0.05)
    came_back = time.time()
    assert r.status == 200
    assert came_back >= before + LEASE_S - 0.05  # not one moment before the lease ends
    # The first slot came back with the first lease's end; the dead app took
    # its 10 slots over a while (a loaded machine spreads them out), and the
    # last ends by `held` + the lease, Redis's clock being this machine's.
    while time.time() < held + LEASE_S + 0.05:
        time.sleep(0.05)
    assert sorted(statuses(at_once([lambda i=i: report(fresh, run, i, 500) for i in range(LIMIT + 1)]))) == (
        [200] * LIMIT + [429])
    return f"{fresh.label}: a killed app's 10 slots came back {came_back - before:.2f} s after they were taken"


# Scenarios run side by side, this many at once: each waits out a 5 s lease, and
# one at a time they took 14 x 5 s; more at once would crowd 2 cores' timing.
KILLED_AT_ONCE = 5


@pytest.fixture(scope="module")
def killed_apps(redis, apps) -> Dict[str, object]:
    """Every app's killed-app scenario, run side by side: a second process of each app (the victim, started
    together with the others) beside the session's one. Each app's measurement, or the error it raised."""
    env = {"REDIS_URL": redis.url, "POLYLIMIT_RULES": str(RULES)}
    victims = [App(name, env) for name in APP_NAMES]
    for victim in victims:
        victim.log = victim.log.with_name(f"{victim.name}-victim.log")
        victim.start()

    def scenario(victim: App):
        try:
            victim.wait_ready()
            return a_killed_apps_slots_come_back(victim, apps[victim.name])
        except Exception as error:  # noqa: BLE001  (re-raised by the app's own test)
            return error

    try:
        with ThreadPoolExecutor(max_workers=KILLED_AT_ONCE) as pool:
            return dict(zip(APP_NAMES, pool.map(scenario, victims)))
    finally:
        for victim in victims:
            victim.stop()


@pytest.mark.parametrize("name", APP_NAMES)
def test_a_killed_apps_slots_come_back_when_their_lease_ends(name, killed_apps):
    measured = killed_apps[name]
    if isinstance(measured, BaseException):
        raise measured
    print(f"\n{measured} (lease {LEASE_S:.0f} s)")


@pytest.mark.parametrize(
    "pair", [("fastapi", "go"), ("express", "fastify"), ("spring", "go"), ("webflux", "ktor")], ids="+".join
)
def test_one_keys_slots_are_shared_by_every_language(pair, apps):
    for app in apps.values():
        quiet(app)
    run = a_run()
    first, second = (apps[name] for name in pair)
    with ThreadPoolExecutor(max_workers=LIMIT) as pool:
        # Held 3 s: the 10 must still be inside while every app (five) is asked, on a busy machine too.
        holding = [pool.submit(report, first if i % 2 else second, run, i, 3000) for i in range(LIMIT)]
        wait_for(first, LIMIT // 2)
        wait_for(second, LIMIT // 2)
        # 5 in flight on each of two apps: the 11th is refused by every app, whatever its language.
        for name in APP_NAMES:
            refused_by_the_concurrency_rule(report(apps[name], run, "x", 0))
        assert statuses(h.result() for h in holding) == [200] * LIMIT
    assert [stats(apps[name])["max_in_flight"] for name in pair] == [LIMIT // 2] * 2
    # Released by the apps that held them: all 10 slots are free again, on any app.
    spread = at_once([lambda i=i: report(apps[APP_NAMES[i % len(APP_NAMES)]], run, i, 500) for i in range(LIMIT + 1)])
    assert sorted(statuses(spread)) == [200] * LIMIT + [429]
