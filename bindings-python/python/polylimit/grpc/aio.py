"""The ``grpc.aio`` server interceptor: ``grpc.aio.server(interceptors=[PolylimitInterceptor(...)])``.
It answers like ``polylimit.grpc.PolylimitInterceptor`` (see that module) and awaits the core: the
event loop is never blocked. Handlers are coroutines; a server stream is an async generator or a
coroutine writing with ``context.write``. Hooks (``user``, ``api_key``, ``key``, ``cost``) may be
``async def``. A servicer reports its call's actual cost with ``polylimit.grpc.report_cost(context, n)``
on the context it was given."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Callable, Dict, Optional

import grpc
import grpc.aio

from .. import _adapters
from .._polylimit import Outcome
from . import CANCELLED, Hook, _wrap, build, code_number, ended_code, handler_behavior, request_info, status_code, terminated_code
from . import _track, _untrack

__all__ = ["PolylimitInterceptor"]

# Settlements started from grpcio's done callbacks, referenced until they finish.
_settling: "set[asyncio.Task[None]]" = set()


class _Once:
    """Settles a call once, whichever comes first: its end here, or grpcio's done callback; with the
    cost its servicer reported (``report_cost`` on the context it was given)."""

    def __init__(self, limiter: Any, token: Optional[str]) -> None:
        self.limiter = limiter
        self.token = token
        self.cost: Any = None
        self.context: Any = None

    def track(self, context: Any) -> Any:
        """Lets ``report_cost(context, …)`` reach this call until it settles; returns ``context``."""
        if self.token is not None:
            self.context = context
            _track(context, self)
        return context

    async def __call__(self, code: Optional[int]) -> None:
        token, self.token = self.token, None
        if token is None:
            return
        if self.context is not None:
            _untrack(self.context)
        await _adapters.settle(self.limiter, token, code, self.cost)

    def soon(self, code: Optional[int]) -> None:
        """Settles in a task of its own: from a callback or a cancelled call, which cannot await."""
        if self.token is None:
            return
        task = asyncio.get_running_loop().create_task(self(code))
        _settling.add(task)
        task.add_done_callback(_settling.discard)


class _SettlingContext:
    """The context a handler gets: grpc.aio sends an aborted call's status inside ``abort``, so the
    call is settled first (a client's next call then finds its slot released, its charge settled)."""

    def __init__(self, context: grpc.aio.ServicerContext, settle: _Once) -> None:
        self._context = context
        self._settle = settle

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()) -> None:
        await self._settle(code_number(code))
        await self._context.abort(code, details, trailing_metadata)

    async def abort_with_status(self, status: Any) -> None:
        await self._settle(code_number(status.code))
        await self._context.abort_with_status(status)


async def _value(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class PolylimitInterceptor(grpc.aio.ServerInterceptor):
    """Applies a limiter's rules to every call of a ``grpc.aio.server``: ``PolylimitInterceptor(limiter=...)``,
    or the options of ``Limiter(...)`` themselves."""

    def __init__(
        self,
        limiter: Any = None,
        *,
        user: Hook = None,
        api_key: Hook = None,
        key: Any = None,
        cost: Optional[Callable[[Any], Any]] = None,
        **options: Any,
    ) -> None:
        self.limiter, hook = build(limiter, options, key)
        """The limiter whose rules decide each call."""
        self.hooks = {"user": user, "api_key": api_key, "key": hook, "cost": cost}
        """The functions giving a call's ``user``, ``api_key`` and ``key`` dimensions and its ``cost``."""

    async def request_info(self, method: str, context: grpc.aio.ServicerContext) -> Dict[str, Any]:
        """The core's request for a call, with the hooks' values."""
        extra = {name: await _value(hook(context)) for name, hook in self.hooks.items() if hook is not None}
        return request_info(method, context.peer(), context.invocation_metadata(), **extra)

    async def sleep(self, seconds: float) -> None:
        """Holds a call for its shape-mode delay."""
        await asyncio.sleep(seconds)

    async def intercept_service(self, continuation: Callable[..., Any], handler_call_details: grpc.HandlerCallDetails) -> Any:
        """grpc.aio's hook: the method's handler, wrapped to decide each call first and settle it after."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        name, behavior = handler_behavior(handler)

        async def admit(context: grpc.aio.ServicerContext) -> _Once:
            outcome: Outcome = await self.limiter.check_request(await self.request_info(method, context))
            if outcome.headers:
                await context.send_initial_metadata(outcome.headers)
            if outcome.status is not None:
                await context.abort(status_code(outcome.status), outcome.body or "", tuple(outcome.trailers))
            settle = _Once(self.limiter, outcome.completion)
            if outcome.completion is not None:
                # A call that ends without reaching its end here (a client cancel) is settled then.
                context.add_done_callback(lambda ctx: settle.soon(terminated_code(ctx)))
            if outcome.delay_ms:
                await self.sleep(outcome.delay_ms / 1000)
            return settle

        if not inspect.isasyncgenfunction(behavior):
            # Unary responses, and a server stream written with context.write.
            async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
                settle = await admit(context)
                try:
                    response = await _value(behavior(request, settle.track(_SettlingContext(context, settle))))
                except asyncio.CancelledError:
                    settle.soon(CANCELLED)
                    raise
                except BaseException as exc:
                    await settle(ended_code(context, exc))
                    raise
                await settle(ended_code(context, None))
                return response

            return _wrap(handler, call, name)

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            settle = await admit(context)
            try:
                async for response in behavior(request, settle.track(_SettlingContext(context, settle))):
                    yield response
            except (asyncio.CancelledError, GeneratorExit):
                settle.soon(CANCELLED)
                raise
            except BaseException as exc:
                await settle(ended_code(context, exc))
                raise
            await settle(ended_code(context, None))

        return _wrap(handler, stream, name)
