"""The demo Greeter service (examples/grpc/greeter.proto) on the well-known StringValue message, with
no generated code: a sync handler for ``grpc.server`` and an async one for ``grpc.aio.server``; the
same for the LLM-style Llm service, whose Generate reports the ``x-actual-cost`` metadata as the
call's actual cost."""

from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

import grpc
from google.protobuf.wrappers_pb2 import StringValue

import polylimit.grpc

SERVICE = "polylimit.demo.Greeter"
LLM = "polylimit.demo.Llm"
_CODEC = {"request_deserializer": StringValue.FromString, "response_serializer": StringValue.SerializeToString}


def _handlers(hello: Any, hello_stream: Any) -> grpc.GenericRpcHandler:
    codec = {"request_deserializer": StringValue.FromString, "response_serializer": StringValue.SerializeToString}
    return grpc.method_handlers_generic_handler(SERVICE, {
        "Hello": grpc.unary_unary_rpc_method_handler(hello, **codec),
        "HelloStream": grpc.unary_stream_rpc_method_handler(hello_stream, **codec),
    })


def _llm(generate: Any) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(LLM, {"Generate": grpc.unary_unary_rpc_method_handler(generate, **_CODEC)})


def _generate(request: StringValue, context: Any) -> StringValue:
    # The tokens the model used, known once it has answered: here the x-actual-cost metadata.
    actual = dict(context.invocation_metadata()).get("x-actual-cost")
    if actual is not None:
        polylimit.grpc.report_cost(context, int(actual))
    return StringValue(value=f"generated, {request.value}")


async def _generate_async(request: StringValue, context: Any) -> StringValue:
    return _generate(request, context)


def _hello(request: StringValue, context: Any) -> StringValue:
    return StringValue(value=f"hello, {request.value}")


def _hello_stream(request: StringValue, context: Any) -> Iterator[StringValue]:
    for i in range(3):
        yield StringValue(value=f"hello, {request.value} {i}")


async def _hello_async(request: StringValue, context: Any) -> StringValue:
    return _hello(request, context)


async def _hello_stream_async(request: StringValue, context: Any) -> AsyncIterator[StringValue]:
    for response in _hello_stream(request, context):
        yield response


def handler() -> grpc.GenericRpcHandler:
    """The Greeter for ``grpc.server``."""
    return _handlers(_hello, _hello_stream)


def aio_handler() -> grpc.GenericRpcHandler:
    """The Greeter for ``grpc.aio.server``."""
    return _handlers(_hello_async, _hello_stream_async)


def llm_handler() -> grpc.GenericRpcHandler:
    """The Llm service for ``grpc.server``."""
    return _llm(_generate)


def aio_llm_handler() -> grpc.GenericRpcHandler:
    """The Llm service for ``grpc.aio.server``."""
    return _llm(_generate_async)
