"""Every gRPC demo server (examples/servers.py GRPC_APPS: the Greeter of examples/grpc/greeter.proto)
called with grpcio on one real Redis: the replies, one key across every server admits exactly the
burst, the same state gives the same code, message, metadata and trailers in every language, and a
Redis killed gives the policy's fallback (UNAVAILABLE under fail_closed), never INTERNAL or UNKNOWN."""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import grpc
import pytest
from google.protobuf.wrappers_pb2 import StringValue
from redis_server import RedisServer
from servers import GRPC_APPS, App, running

RULES = Path(__file__).parent / "grpc.yaml"
HELLO, STREAM = "/polylimit.demo.Greeter/Hello", "/polylimit.demo.Greeter/HelloStream"
CODEC = {"request_serializer": StringValue.SerializeToString, "response_deserializer": StringValue.FromString}
RATE_METADATA = ("x-ratelimit-", "ratelimit", "retry-after")
# Every policy's window is one hour: the metadata agree across servers within one second of it.
HOUR = 3600


def env(redis: RedisServer) -> Dict[str, str]:
    return {"REDIS_URL": redis.url, "POLYLIMIT_RULES": str(RULES)}


@pytest.fixture(scope="module")
def servers(redis: RedisServer) -> Iterator[Dict[str, App]]:
    with running(list(GRPC_APPS), env(redis)) as started:
        yield {app.name: app for app in started}


class Answer:
    """One call's outcome as the client sees it."""

    def __init__(self, code: grpc.StatusCode, details: str, initial, trailing, replies) -> None:
        self.code, self.details, self.replies = code, details, replies
        self.metadata = [(k, v) for k, v in initial or () if k.startswith(RATE_METADATA)]
        self.trailers = list(trailing or ())

    def same(self) -> Tuple:
        # grpc-go keeps metadata in a map: its order is not the core's (the first server's order is checked).
        return self.code, self.details, sorted(self.metadata), self.trailers


def call(app: App, method: str, metadata: List[Tuple[str, str]], name: str = "ann") -> Answer:
    with grpc.insecure_channel(f"127.0.0.1:{app.port}") as channel:
        if method == STREAM:
            stream = channel.unary_stream(method, **CODEC)(StringValue(value=name), metadata=metadata, timeout=20)
            try:
                replies = [r.value for r in stream]
            except grpc.RpcError:
                replies = None
            return Answer(stream.code(), stream.details(), stream.initial_metadata(), stream.trailing_metadata(), replies)
        try:
            reply, done = channel.unary_unary(method, **CODEC).with_call(StringValue(value=name), metadata=metadata, timeout=20)
            return Answer(done.code(), done.details(), done.initial_metadata(), done.trailing_metadata(), reply.value)
        except grpc.RpcError as err:
            return Answer(err.code(), err.details(), err.initial_metadata(), err.trailing_metadata(), None)


def a_run() -> List[Tuple[str, str]]:
    return [("x-run", uuid.uuid4().hex)]


def test_every_server_greets(servers: Dict[str, App]) -> None:
    for app in servers.values():
        hello = call(app, HELLO, a_run(), "ann")
        assert (hello.code, hello.replies) == (grpc.StatusCode.OK, "hello, ann"), app.label
        stream = call(app, STREAM, a_run(), "bob")
        assert (stream.code, stream.replies) == (grpc.StatusCode.OK, ["hello, bob 0", "hello, bob 1", "hello, bob 2"]), app.label
        assert dict(hello.metadata)["x-ratelimit-remaining"] == "4", app.label


def test_one_key_across_every_server_admits_exactly_the_burst(servers: Dict[str, App]) -> None:
    run = a_run()
    apps = list(servers.values())
    methods = [HELLO, STREAM]
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda i: call(apps[i % len(apps)], methods[i % 2], run), range(30)))
    codes = sorted(a.code.value[0] for a in answers)
    assert codes == [0] * 5 + [8] * 25  # a stream is one request
    refused = next(a for a in answers if a.code == grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert json.loads(refused.details)["error"] == "rate_limit_exceeded"
    assert refused.trailers == [("retry-after", str(json.loads(refused.details)["retry_after"]))]


def test_the_same_state_gives_the_same_answer_in_every_language(servers: Dict[str, App]) -> None:
    # Each server its own key with the same history (5 per hour): 6 calls; every server answers
    # within the same second, or the round is played again with new keys.
    for _ in range(20):
        runs = {name: a_run() for name in servers}
        start = time.time()
        played = {name: [call(app, HELLO if i % 2 else STREAM, runs[name]) for i in range(6)] for name, app in servers.items()}
        if int(start) == int(time.time()) and int(start // HOUR) == int(time.time() // HOUR):
            break
    else:
        raise AssertionError("20 attempts each crossed a second boundary")
    first_name, first = next(iter(played.items()))
    assert [a.code for a in first] == [grpc.StatusCode.OK] * 5 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert [k for k, _ in first[5].metadata] == ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                                                 "ratelimit-policy", "ratelimit"]
    for name, answers in played.items():
        assert [a.same() for a in answers] == [a.same() for a in first], (name, first_name)


def test_redis_killed_gives_unavailable_under_fail_closed(redis: RedisServer) -> None:
    own = RedisServer()  # its own Redis: the session's keeps serving the other tests
    try:
        with running(list(GRPC_APPS), env(own)) as apps:
            for app in apps:
                assert call(app, HELLO, a_run() + [("x-closed", "before")]).code == grpc.StatusCode.OK, app.label
            own.kill()
            for app in apps:
                closed = call(app, HELLO, a_run() + [("x-closed", "down")])
                assert closed.code == grpc.StatusCode.UNAVAILABLE, (app.label, closed.code, closed.details)
                assert json.loads(closed.details)["error"] == "rate_limiter_unavailable", app.label
                # Without the fail_closed rule's key, the greeter policy falls back locally: let through.
                assert call(app, HELLO, a_run()).code == grpc.StatusCode.OK, app.label
    finally:
        own.kill()
