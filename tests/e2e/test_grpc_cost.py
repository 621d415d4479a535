"""Cost reconciliation through every gRPC demo server (examples/servers.py GRPC_APPS) on a real Redis:
test_cost.py in gRPC form. /polylimit.demo.Llm/Generate reserves its x-reserve metadata before the
handler (tests/e2e/grpc.yaml's `llm` rule: a token bucket of 10 000 an hour, `max_cost: 5000`), the
handler reports x-actual-cost with its language's helper and the interceptor completes the call with
it. N concurrent calls reserving r and reporting m take the key at most N × (m − r) past its limit,
exactly as many tokens as the admitted ones used beyond the burst; a smaller actual cost gives the
difference back; a bad x-reserve is the core's INVALID_ARGUMENT invalid_cost. Each test's x-run
metadata is a key of its own."""

from __future__ import annotations

import json
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterator, List, Optional, Tuple

import grpc
import pytest
from google.protobuf.wrappers_pb2 import StringValue
from redis_server import RedisServer
from servers import GRPC_APPS, App, running
from test_grpc import CODEC, env

GENERATE = "/polylimit.demo.Llm/Generate"
BURST = 10_000
TOKEN_S = 3600 / 10_000  # the llm policy refills a token every 0.36 s
MAX_COST = 5000


@pytest.fixture(scope="module")
def servers(redis: RedisServer) -> Iterator[Dict[str, App]]:
    with running(list(GRPC_APPS), env(redis)) as started:
        yield {app.name: app for app in started}


@pytest.fixture(params=list(GRPC_APPS))
def server(request, servers: Dict[str, App]) -> App:
    return servers[request.param]


class Answer:
    """One Generate call's outcome as the client sees it."""

    def __init__(self, code: grpc.StatusCode, details: str, initial, trailing, reply: Optional[str]) -> None:
        self.code, self.details, self.reply = code, details, reply
        self.metadata = dict(initial or ())
        self.trailers = list(trailing or ())

    def remaining(self) -> Optional[str]:
        return self.metadata.get("x-ratelimit-remaining")

    def retry(self) -> int:
        return int(dict(self.trailers).get("retry-after", 0))


def generate(app: App, run: str, reserve: Optional[str], actual: Optional[int] = None) -> Answer:
    metadata: List[Tuple[str, str]] = [("x-run", run)]
    if reserve is not None:
        metadata.append(("x-reserve", reserve))
    if actual is not None:
        metadata.append(("x-actual-cost", str(actual)))
    with grpc.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        try:
            reply, done = channel.unary_unary(GENERATE, **CODEC).with_call(StringValue(value="prompt"), metadata=metadata,
                                                                          timeout=20)
            return Answer(done.code(), done.details(), done.initial_metadata(), done.trailing_metadata(), reply.value)
        except grpc.RpcError as err:
            return Answer(err.code(), err.details(), err.initial_metadata(), err.trailing_metadata(), None)


def test_the_overshoot_is_what_the_admitted_calls_used_past_the_burst(server: App) -> None:
    n, r, m = 10, 1000, 3000  # 10 reservations of 1000 fill the burst exactly; each uses 3000
    run = uuid.uuid4().hex
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=n) as pool:
        answers = list(pool.map(lambda _: generate(server, run, str(r), m), range(n)))
    codes = {a.code for a in answers}
    assert codes <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, (server.label, codes)
    ok = [a for a in answers if a.code == grpc.StatusCode.OK]
    assert {a.reply for a in ok} == {"generated, prompt"}, server.label
    admitted = len(ok)
    # However the checks and completions interleave, each admitted call nets m: the key ends
    # admitted × m − burst tokens in debt (4 are admitted even one after another: 1000, then 3000 each).
    debt = admitted * m - BURST
    assert 4 <= admitted <= n, server.label
    assert 0 < debt <= n * (m - r), server.label
    if admitted == n:
        assert debt == n * (m - r), server.label
    # The next call (cost 1) waits the debt off: retry-after (debt + 1) × 0.36 s, less the refill
    # since the first call. The completions may land just after their replies: ask again (a refused
    # call charges nothing) until they have.
    want_high = math.ceil((debt + 1) * TOKEN_S)
    deadline = time.monotonic() + 10
    while True:
        follow = generate(server, run, "1")
        elapsed = time.monotonic() - started
        retry = follow.retry()
        if (follow.code == grpc.StatusCode.RESOURCE_EXHAUSTED and retry >= (debt + 1) * TOKEN_S - elapsed - 1
                or time.monotonic() > deadline):
            break
        time.sleep(0.02)  # the completions, not a refill
    assert follow.code == grpc.StatusCode.RESOURCE_EXHAUSTED, (server.label, follow.code, follow.details)
    details = json.loads(follow.details)
    assert (details["error"], details["retry_after"]) == ("rate_limit_exceeded", retry), (server.label, details)
    assert follow.remaining() == "0", server.label
    assert (debt + 1) * TOKEN_S - elapsed - 1 <= retry <= want_high, (server.label, retry, debt, elapsed)


def test_a_smaller_actual_cost_is_given_back(server: App) -> None:
    run = uuid.uuid4().hex
    started = time.monotonic()
    first = generate(server, run, "1000", 200)
    assert first.code == grpc.StatusCode.OK, (server.label, first.code, first.details)
    assert first.remaining() == str(BURST - 1000), server.label
    # Follow-ups reserving 1 (and using 1) until the 800 given back shows.
    for i in range(1, 50):
        follow = generate(server, run, "1", 1)
        assert follow.code == grpc.StatusCode.OK, (server.label, follow.code, follow.details)
        remaining = int(follow.remaining())
        if remaining >= BURST - 200 - i:  # far above BURST - 1000 - i plus any refill
            break
    want = BURST - 200 - i
    refill = math.ceil((time.monotonic() - started) / TOKEN_S)
    assert want <= remaining <= want + refill, (server.label, remaining, want)


def test_a_bad_reservation_is_the_cores_invalid_argument(server: App) -> None:
    run = uuid.uuid4().hex
    for value in ("abc", "2.5", "0", str(MAX_COST + 1)):
        bad = generate(server, run, value, 10)
        assert bad.code == grpc.StatusCode.INVALID_ARGUMENT, (server.label, value, bad.code, bad.details)
        details = json.loads(bad.details)
        assert (details["error"], details["field"], details["value"], details["max_cost"]) == (
            "invalid_cost", "header:x-reserve", value, MAX_COST), (server.label, details)
        assert bad.remaining() is None, server.label
    # Nothing was charged.
    ok = generate(server, run, "1")
    assert (ok.code, ok.remaining()) == (grpc.StatusCode.OK, str(BURST - 1)), server.label
