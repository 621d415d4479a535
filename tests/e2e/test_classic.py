"""The three classic scenarios against every app, on one real Redis
(token bucket, 1/s, burst 10, keyed by client IP)."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

from conftest import statuses


def test_15_sequential_requests_give_10_ok_then_5_refusals(app, run):
    responses = [app.request("/api/classic", headers=run) for _ in range(15)]
    assert statuses(responses) == [200] * 10 + [429] * 5
    assert [r.header("X-RateLimit-Remaining") for r in responses] == [str(n) for n in range(9, -1, -1)] + ["0"] * 5
    for refused in responses[10:]:
        assert refused.header("Retry-After") == "1"
        assert json.loads(refused.body) == {
            "error": "rate_limit_exceeded",
            "message": "Too Many Requests",
            "retry_after": 1,
        }
        assert refused.body == b'{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":1}'


def test_50_concurrent_requests_admit_exactly_10(app, run):
    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(lambda _: app.request("/api/classic", headers=run), range(50)))
    assert sorted(statuses(responses)) == [200] * 10 + [429] * 40


def test_a_drained_key_refills_one_request_per_second(app, run):
    drained = [app.request("/api/classic", headers=run) for _ in range(11)]
    assert statuses(drained) == [200] * 10 + [429]
    time.sleep(2)
    assert statuses(app.request("/api/classic", headers=run) for _ in range(3)) == [200, 200, 429]
