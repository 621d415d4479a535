"""Redis killed mid-run: each app follows each policy's on_store_error, never
answers 500, and goes back to Redis when it returns."""

import threading
import time
from collections import Counter

from conftest import statuses


def test_redis_killed_mid_run_then_back(apps, redis, run):
    paths = ["/api/local", "/api/open", "/api/closed"]
    seen = Counter()
    stop = threading.Event()
    flowing = threading.Event()

    def background_load():
        # Traffic that keeps flowing through the kill and the restart.
        while not stop.is_set():
            for app in apps.values():
                for path in paths:
                    seen[(path, app.request(path, headers={"X-Run": "load"}).status)] += 1
            flowing.set()

    load = threading.Thread(target=background_load)
    load.start()
    try:
        # The kill lands with traffic in flight: after one full round of it, not after a fixed time.
        assert flowing.wait(10), "the background load did not get through one round"
        redis.kill()
        for app in apps.values():
            key = {"X-Run": f"{run['X-Run']}-{app.name}"}
            # local: the same policy in process memory (burst 5), as if nothing happened.
            assert statuses(app.request("/api/local", headers=key) for _ in range(7)) == [200] * 5 + [429] * 2, app.label
            # fail_open: everything passes, past the limit too.
            assert statuses(app.request("/api/open", headers=key) for _ in range(7)) == [200] * 7, app.label
            # fail_closed: 503 with the core's body and a Retry-After.
            closed = app.request("/api/closed", headers=key)
            assert closed.status == 503, app.label
            assert closed.body.startswith(b'{"error":"rate_limiter_unavailable"'), (app.label, closed.body)
            assert closed.header("Retry-After") and closed.header("Retry-After").isdigit(), app.label

        redis.start()  # the same port, empty: no persistence
        # Back when each app's breaker has closed: five fresh keys in a row
        # decided by the store (a fail_closed policy answers 200, not 503).
        # This polls: the breakers' cooldown (1 s of wall clock) ending is what is tested.
        deadline = time.monotonic() + 15
        pending = set(apps)
        probe = 0
        while pending and time.monotonic() < deadline:
            for name in list(pending):
                answers = []
                for _ in range(5):
                    probe += 1
                    answers.append(apps[name].request("/api/closed", headers={"X-Run": f"{run['X-Run']}-{probe}"}))
                if statuses(answers) == [200] * 5:
                    pending.discard(name)
            time.sleep(0.1)
        assert not pending, f"still refusing after Redis came back: {sorted(pending)}"
    finally:
        stop.set()
        load.join()

    # Back on Redis, the store decides again: the apps share one bucket (burst 5).
    shared = {"X-Run": f"{run['X-Run']}-shared"}
    servers = list(apps.values())
    assert statuses(servers[i % len(servers)].request("/api/local", headers=shared) for i in range(7)) == (
        [200] * 5 + [429] * 2
    )
    assert not {s for (_, s) in seen} - {200, 429, 503}, seen
    assert all(path == "/api/closed" for (path, s) in seen if s == 503), seen
