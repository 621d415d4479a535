"""polylimit.grpc and polylimit.grpc.aio: the gRPC vectors through a real grpcio server on loopback
(sync and aio interceptors, memory and a real Redis), and the Greeter demo service: the burst, the
metadata and trailers, streams checked once, slots released on a handler error and a client cancel."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import grpc
import grpc.aio
import pytest
from conftest import REPO, unique_prefix
from http_vectors import RATE_HEADERS, Answer, Recorder, play
from test_conformance import files

import polylimit
import polylimit.grpc
import polylimit.grpc.aio

sys.path.insert(0, str(REPO / "examples" / "grpc-python"))
from greeter import aio_handler, handler  # noqa: E402
from google.protobuf.wrappers_pb2 import StringValue  # noqa: E402

# The request fields a call cannot carry (or that the runner sets for it: the peer); sent as JSON in
# test metadata, which the runner's subclass takes off again.
EXTRA = ("now_ms", "peer", "user", "api_key", "key", "cost")
VECTOR, CODE = "x-test-vector", "x-test-code"


def vector_info(info: Dict[str, Any], context: Any) -> Dict[str, Any]:
    metadata = dict(context.invocation_metadata())
    info["headers"] = [h for h in info["headers"] if h[0] in json.loads(metadata[VECTOR])["sent"]]
    info.update(json.loads(metadata[VECTOR])["extra"])
    return info


class VectorInterceptor(polylimit.grpc.PolylimitInterceptor):
    slept: List[float] = []

    def request_info(self, method, context):
        return vector_info(super().request_info(method, context), context)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class AioVectorInterceptor(polylimit.grpc.aio.PolylimitInterceptor):
    slept: List[float] = []

    async def request_info(self, method, context):
        return vector_info(await super().request_info(method, context), context)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def _end(context: Any) -> Optional[grpc.StatusCode]:
    code = int(dict(context.invocation_metadata())[CODE])
    return None if code == 0 else polylimit.grpc.status_code(code)


class AnyMethod(grpc.GenericRpcHandler):
    """Serves every method (bytes in, bytes out): ``…Stream`` methods as server streams. A call ends
    with the code in its ``x-test-code`` metadata (the message ``handler`` tells it from a refusal)."""

    def service(self, details):
        def unary(request, context):
            code = _end(context)
            if code is not None:
                context.abort(code, "handler")
            return b"ok"

        def stream(request, context):
            yield b"one"
            code = _end(context)
            if code is not None:
                context.abort(code, "handler")

        if details.method.endswith("Stream"):
            return grpc.unary_stream_rpc_method_handler(stream)
        return grpc.unary_unary_rpc_method_handler(unary)


class AioAnyMethod(grpc.GenericRpcHandler):
    def service(self, details):
        async def unary(request, context):
            code = _end(context)
            if code is not None:
                await context.abort(code, "handler")
            return b"ok"

        async def stream(request, context):
            yield b"one"
            code = _end(context)
            if code is not None:
                await context.abort(code, "handler")

        if details.method.endswith("Stream"):
            return grpc.unary_stream_rpc_method_handler(stream)
        return grpc.unary_unary_rpc_method_handler(unary)


class Server:
    """A grpcio server (sync, or aio on a loop of its own thread) on a free loopback port."""

    def __init__(self, aio: bool, interceptor: Any, handlers: Any) -> None:
        self.aio = aio
        if not aio:
            self.server = grpc.server(ThreadPoolExecutor(max_workers=8), interceptors=[interceptor])
            self.server.add_generic_rpc_handlers([handlers])
            self.port = self.server.add_insecure_port("127.0.0.1:0")
            self.server.start()
            return
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def run() -> None:
            self.server = grpc.aio.server(interceptors=[interceptor])
            self.server.add_generic_rpc_handlers([handlers])
            self.port = self.server.add_insecure_port("127.0.0.1:0")
            await self.server.start()
            started.set()
            await self.server.wait_for_termination()

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(run(),), daemon=True)
        self.thread.start()
        assert started.wait(10), "the aio server did not start"

    def channel(self) -> grpc.Channel:
        return grpc.insecure_channel(f"127.0.0.1:{self.port}")

    def stop(self) -> None:
        if self.aio:
            # Stopped on its loop; the loop's thread ends with the server (wait_for_termination returns).
            self.loop.call_soon_threadsafe(lambda: self.loop.create_task(self.server.stop(0)))
            self.thread.join(10)
            assert not self.thread.is_alive(), "the aio server did not stop"
        else:
            self.server.stop(0)


def rate_metadata(metadata: Any) -> List[Tuple[str, str]]:
    return [(k, v) for k, v in metadata or () if k.startswith(RATE_HEADERS)]


def call(channel: grpc.Channel, method: str, metadata: List[Tuple[str, str]], payload: Any = b"x", **codec: Any):
    """``(code, details, initial metadata, trailing metadata, responses)`` of one call."""
    if method.endswith("Stream"):
        stream = channel.unary_stream(method, **codec)(payload, metadata=metadata, timeout=10)
        try:
            responses = list(stream)
        except grpc.RpcError:
            responses = None
        return stream.code(), stream.details(), stream.initial_metadata(), stream.trailing_metadata(), responses
    try:
        response, done = channel.unary_unary(method, **codec).with_call(payload, metadata=metadata, timeout=10)
        return done.code(), done.details(), done.initial_metadata(), done.trailing_metadata(), response
    except grpc.RpcError as err:
        return err.code(), err.details(), err.initial_metadata(), err.trailing_metadata(), None


@pytest.fixture(params=["sync", "aio"])
def vector_server(request) -> Iterator[Tuple[Server, Any]]:
    aio = request.param == "aio"
    interceptor = (AioVectorInterceptor if aio else VectorInterceptor)(limiter=polylimit.Limiter(policy={"rate": "1/s"}))
    interceptor.slept = []
    server = Server(aio, interceptor, AioAnyMethod() if aio else AnyMethod())
    yield server, interceptor
    server.stop()


def through_api(step: Dict[str, Any]) -> bool:
    """The steps a grpcio client cannot make: a method without its leading ``/`` (grpc-java's form) and
    a call ending with no status at all."""
    request = step["request"]
    return not request.get("path", "/").startswith("/") or ("complete" in step and step["complete"] is None)


@pytest.mark.parametrize("vectors", files("grpc"), ids=lambda p: p.stem)
def test_grpc_vectors(vectors: Path, store: str, vector_server: Tuple[Server, Any]) -> None:
    server, interceptor = vector_server
    channel = server.channel()

    def serve(recorder: Recorder, req: Dict[str, Any], code: int, raises: bool) -> Answer:
        interceptor.limiter = recorder
        interceptor.slept.clear()
        given = req.get("headers", [])
        sent = [(k.lower(), v) for k, v in (given.items() if isinstance(given, dict) else given)]
        extra = {k: req[k] for k in EXTRA if k in req}
        vector = json.dumps({"extra": extra, "sent": sorted({k for k, _ in sent})})
        got, details, initial, trailing, _ = call(channel, req["path"], sent + [(VECTOR, vector), (CODE, str(code))])
        refused = got != grpc.StatusCode.OK and details != "handler"
        return Answer(got.value[0] if refused else None, rate_metadata(initial), details if refused else None,
                      round(sum(interceptor.slept) * 1000), list(trailing or ()) if refused else [])

    try:
        failures = play(vectors, store, serve, ok=0, through_api=through_api)
    finally:
        channel.close()
    assert not failures, f"{len(failures)} mismatches on {store}:\n" + "\n".join(failures)


# --- The Greeter demo service -----------------------------------------------------------------

GREETER_RULES = {
    "headers": "both",
    "policies": {
        "greeter": {"algorithm": "token_bucket", "rate": "5/min", "burst": 5},
        "slots": {"algorithm": "concurrency", "limit": 1, "lease": "60s"},
    },
    "rules": [
        {"match": {"path": "/polylimit.demo.Greeter/*"}, "key": ["ip"], "policy": "greeter"},
        {"match": {"path": "/test.Slow/*"}, "key": ["ip"], "policy": "slots"},
    ],
}
CODEC = {"request_serializer": StringValue.SerializeToString, "response_deserializer": StringValue.FromString}


@pytest.fixture(params=["sync", "aio"])
def greeter(request, store: str) -> Iterator[Server]:
    aio = request.param == "aio"
    limiter = polylimit.Limiter.from_rules(dict(GREETER_RULES, store=store, prefix=unique_prefix("grpc"), timeout="10s"))
    module = polylimit.grpc.aio if aio else polylimit.grpc
    handlers = aio_handler() if aio else handler()
    both = _Both(handlers, aio)
    server = Server(aio, module.PolylimitInterceptor(limiter=limiter), both)
    yield server
    both.release.set()
    server.stop()


class _Both(grpc.GenericRpcHandler):
    """The Greeter and ``/test.Slow/…`` (slow, failing and streaming methods for the slot tests)."""

    def __init__(self, greeter: grpc.GenericRpcHandler, aio: bool) -> None:
        self.greeter, self.aio = greeter, aio
        self.release = threading.Event()

    def service(self, details):
        if not details.method.startswith("/test.Slow/"):
            return self.greeter.service(details)
        name = details.method.rsplit("/", 1)[1]
        release = self.release

        if self.aio:
            async def fail(request, context):
                raise RuntimeError("the handler failed")

            async def hang(request, context):
                yield b"first"
                while not release.is_set():
                    await asyncio.sleep(0.01)
                yield b"last"
        else:
            def fail(request, context):
                raise RuntimeError("the handler failed")

            def hang(request, context):
                yield b"first"
                release.wait(10)
                yield b"last"

        if name == "Fail":
            return grpc.unary_unary_rpc_method_handler(fail)
        return grpc.unary_stream_rpc_method_handler(hang)


def test_greeter_burst_metadata_and_trailers(greeter: Server) -> None:
    with greeter.channel() as channel:
        answers = [call(channel, "/polylimit.demo.Greeter/Hello", [], StringValue(value="ann"), **CODEC) for _ in range(3)]
        streamed = call(channel, "/polylimit.demo.Greeter/HelloStream", [], StringValue(value="bob"), **CODEC)
        answers += [call(channel, "/polylimit.demo.Greeter/Hello", [], StringValue(value="ann"), **CODEC) for _ in range(3)]
    assert answers[0][4].value == "hello, ann"
    assert [r.value for r in streamed[4]] == ["hello, bob 0", "hello, bob 1", "hello, bob 2"]  # one request
    codes = [a[0] for a in answers]
    assert codes == [grpc.StatusCode.OK] * 4 + [grpc.StatusCode.RESOURCE_EXHAUSTED] * 2
    assert dict(answers[0][2])["x-ratelimit-remaining"] == "4"
    assert dict(streamed[2])["x-ratelimit-remaining"] == "1"  # 3 unary + this stream
    code, details, initial, trailing, _ = answers[5]
    assert json.loads(details)["error"] == "rate_limit_exceeded"
    assert dict(initial)["x-ratelimit-remaining"] == "0" and "ratelimit-policy" in dict(initial)
    assert list(trailing) == [("retry-after", str(json.loads(details)["retry_after"]))]


def test_slot_released_after_a_handler_error(greeter: Server) -> None:
    with greeter.channel() as channel:
        codes = [call(channel, "/test.Slow/Fail", [])[0] for _ in range(3)]
    assert codes == [grpc.StatusCode.UNKNOWN] * 3  # each error gave the one slot back


def test_slot_released_when_a_client_cancels_a_stream(greeter: Server) -> None:
    with greeter.channel() as channel:
        stream = channel.unary_stream("/test.Slow/Hang")(b"x", timeout=10)
        assert next(stream) == b"first"
        assert call(channel, "/test.Slow/Hang2", [])[0] == grpc.StatusCode.RESOURCE_EXHAUSTED  # the slot is held
        stream.cancel()
        # The cancel reaches the server on its own time: polled (each call a round trip), never slept.
        deadline = time.monotonic() + 10
        while call(channel, "/test.Slow/Fail", [])[0] == grpc.StatusCode.RESOURCE_EXHAUSTED:
            assert time.monotonic() < deadline, "the cancelled stream kept its slot"


# --- Cost: a cost function, and the actual cost the servicer reports with report_cost ----------

LLM_METHOD = "/test.Llm/Chat"


def llm_rules(store: str, **fields: Any) -> Dict[str, Any]:
    # 10 000 tokens an hour per client; a call reserves its x-reserve metadata (1000 without it).
    rule = {"match": {"path": "/test.Llm/*"}, "key": ["ip"], "policy": "llm",
            "cost": "header:x-reserve", "cost_default": 1000, "max_cost": 4000}
    rule.update(fields)
    return {"store": store, "prefix": unique_prefix("grpcllm"), "timeout": "10s", "headers": "legacy",
            "policies": {"llm": {"algorithm": "token_bucket", "rate": "10000/h"}},
            "rules": [{k: v for k, v in rule.items() if v is not None}]}


class Llm(grpc.GenericRpcHandler):
    """``/test.Llm/Chat``: reports the call's ``x-used`` metadata as its actual cost."""

    def __init__(self, aio: bool) -> None:
        self.aio = aio
        self.reported: List[bool] = []

    def report(self, context: Any) -> None:
        used = dict(context.invocation_metadata()).get("x-used")
        if used is not None:
            self.reported.append(polylimit.grpc.report_cost(context, int(used)))

    def service(self, details):
        if self.aio:
            async def chat(request, context):
                self.report(context)
                return b"ok"
        else:
            def chat(request, context):
                self.report(context)
                return b"ok"

        return grpc.unary_unary_rpc_method_handler(chat)


def llm_server(aio: bool, limiter: Any, **hooks: Any) -> Tuple[Server, Llm]:
    module = polylimit.grpc.aio if aio else polylimit.grpc
    handlers = Llm(aio)
    return Server(aio, module.PolylimitInterceptor(limiter=limiter, **hooks), handlers), handlers


def remaining(answer: Any) -> int:
    return int(dict(answer[2])["x-ratelimit-remaining"])


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_interceptor_settles_the_cost_the_servicer_reports(store: str, aio: bool) -> None:
    server, handlers = llm_server(aio, polylimit.Limiter.from_rules(llm_rules(store)))
    try:
        with server.channel() as channel:
            first = call(channel, LLM_METHOD, [("x-used", "3400")])
            assert first[0] == grpc.StatusCode.OK and remaining(first) == 9000, "reserved 1000"
            # 3400 charged for the first, 1000 reserved for this one (a little refill in between).
            assert 5600 <= remaining(call(channel, LLM_METHOD, [("x-used", "1000")])) <= 5610
            bad = call(channel, LLM_METHOD, [("x-reserve", "lots")])
            assert bad[0] == grpc.StatusCode.INVALID_ARGUMENT and json.loads(bad[1])["error"] == "invalid_cost"
        assert handlers.reported == [True, True]
    finally:
        server.stop()
    assert polylimit.grpc.report_cost(object(), 5) is False, "no call of an interceptor"


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_interceptor_cost_function_is_checked_against_max_cost(store: str, aio: bool) -> None:
    limiter = polylimit.Limiter.from_rules(llm_rules(store, cost=None, cost_default=None))

    def estimate(context: Any) -> int:
        return int(dict(context.invocation_metadata()).get("x-estimate", "1"))

    server, _ = llm_server(aio, limiter, cost=estimate)
    try:
        with server.channel() as channel:
            assert remaining(call(channel, LLM_METHOD, [("x-estimate", "2500")])) == 7500
            too_much = call(channel, LLM_METHOD, [("x-estimate", "4001")])
            assert too_much[0] == grpc.StatusCode.INVALID_ARGUMENT and json.loads(too_much[1])["field"] == "cost"
    finally:
        server.stop()
