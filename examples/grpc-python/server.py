"""The Greeter and Llm demo (examples/grpc/greeter.proto) on grpc.aio, every call decided by the shared rules
file through polylimit's interceptor. PORT (default 50051), POLYLIMIT_RULES; `--sync` serves it with
the sync grpc.server and its interceptor instead."""

import asyncio
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import grpc.aio

import polylimit.grpc
import polylimit.grpc.aio
from greeter import aio_handler, aio_llm_handler, handler, llm_handler
from polylimit import Limiter

RULES = os.environ.get("POLYLIMIT_RULES", str(Path(__file__).parent.parent / "polylimit.yaml"))
ADDRESS = f"127.0.0.1:{os.environ.get('PORT', '50051')}"


def user(context):  # the x-user metadata stands in for your auth
    return dict(context.invocation_metadata()).get("x-user")


async def serve_aio() -> None:
    interceptor = polylimit.grpc.aio.PolylimitInterceptor(limiter=Limiter.from_file(RULES), user=user)
    server = grpc.aio.server(interceptors=[interceptor])
    server.add_generic_rpc_handlers([aio_handler(), aio_llm_handler()])
    server.add_insecure_port(ADDRESS)
    await server.start()
    await server.wait_for_termination()


def serve_sync() -> None:
    interceptor = polylimit.grpc.PolylimitInterceptor(limiter=Limiter.from_file(RULES), user=user)
    server = grpc.server(ThreadPoolExecutor(max_workers=16), interceptors=[interceptor])
    server.add_generic_rpc_handlers([handler(), llm_handler()])
    server.add_insecure_port(ADDRESS)
    server.start()
    server.wait_for_termination()


if __name__ == "__main__":
    if "--sync" in sys.argv[1:]:
        serve_sync()
    else:
        asyncio.run(serve_aio())
