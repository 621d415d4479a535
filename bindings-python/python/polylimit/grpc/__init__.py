"""grpcio server interceptors: ``polylimit.grpc.PolylimitInterceptor`` (a ``grpc.ServerInterceptor``)
and ``polylimit.grpc.aio.PolylimitInterceptor`` (a ``grpc.aio.ServerInterceptor``).

    server = grpc.server(pool, interceptors=[PolylimitInterceptor(limiter=Limiter.from_file("polylimit.yaml"))])

Every call is one request of the core's ``grpc`` kind: the full method name (``/pkg.Service/Method``)
is its path and route, the peer (``ipv4:1.2.3.4:5``) its client address (or, through
``trusted_proxies``, the ``x-forwarded-for`` metadata), the metadata its headers (``-bin`` keys left
out). The core answers: a refused call is aborted with its gRPC code (``RESOURCE_EXHAUSTED``,
``UNAVAILABLE`` when the store is down under ``fail_closed``, ``PERMISSION_DENIED`` for a denied key)
and message, with the rate-limit headers as initial metadata (also on allowed calls) and
``retry-after`` in the trailers. A stream is checked once, when it opens.

After the call the interceptor settles ``count`` and concurrency slots with the code the call ended
with: OK, the code the handler set or aborted with, UNKNOWN for an exception, CANCELLED for a client
that went away (a stream's end, including a cancel, releases its slots).

``user`` / ``api_key`` / ``key``: optional functions of the ``ServicerContext`` giving those
dimensions (None: the request lacks it), e.g. ``user=lambda ctx: dict(ctx.invocation_metadata()).get("x-user")``.
``cost``: an optional function of the ``ServicerContext`` giving the call's cost, which the core
checks against the rules' ``max_cost`` (a bad one is ``INVALID_ARGUMENT``).

A servicer that learns its call's actual cost from the answer (an LLM call's tokens) reports it with
``polylimit.grpc.report_cost(context, n)``: the interceptor passes it to
``limiter.complete(token, code, cost=n)`` when the call ends (a rules-file cost rule, ``count``, a
concurrency policy). A value the core refuses is logged and the call completed without it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import grpc

from .. import _adapters
from .._polylimit import Outcome

__all__ = ["PolylimitInterceptor", "report_cost", "request_info", "status_code"]

Hook = Optional[Callable[[Any], Optional[str]]]

# The calls a servicer may report a cost for: id(context the servicer got) → (that context, its
# settlement), from the call's admission to its settlement.
_calls: Dict[int, Tuple[Any, Any]] = {}


def report_cost(context: Any, cost: Any) -> bool:
    """Reports the actual cost of the call whose ``ServicerContext`` is ``context`` (learned from its
    answer: an LLM call's tokens); the interceptor completes the call with it when it ends, and the core
    gives back or charges the difference from what the call reserved (capped at its rules' ``max_cost``).
    False when the call has nothing to complete (it is under no ``PolylimitInterceptor``, or none of
    its rules has a cost, ``count`` or concurrency policy): the value is then ignored."""
    call = _calls.get(id(context))
    if call is None or call[0] is not context:
        return False
    call[1].cost = cost
    return True


def _track(context: Any, settlement: Any) -> None:
    """Lets ``report_cost(context, …)`` reach ``settlement`` (a call's ``_Once``) until it settles."""
    _calls[id(context)] = (context, settlement)


def _untrack(context: Any) -> None:
    """Ends ``_track``: the call is settled."""
    call = _calls.get(id(context))
    if call is not None and call[0] is context:
        del _calls[id(context)]

_CODES = {code.value[0]: code for code in grpc.StatusCode}
OK, CANCELLED, UNKNOWN = 0, 1, 2


def status_code(code: int) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a numeric code (the core's ``Outcome.status`` for a gRPC call)."""
    return _CODES[code]


def code_number(code: Any) -> Optional[int]:
    """A call's code as the number the core takes: grpcio gives a ``StatusCode``, an int or None."""
    if code is None:
        return None
    return code.value[0] if isinstance(code, grpc.StatusCode) else int(code)


def request_info(method: str, peer: Optional[str], metadata: Optional[Sequence[Tuple[str, Any]]], **extra: Any) -> Dict[str, Any]:
    """The core's ``RequestInfo`` (a dict) for a gRPC call: ``kind: grpc``, the full method name as the
    path, the peer exactly as grpcio gives it, every text metadata pair (``-bin`` ones left out)."""
    info: Dict[str, Any] = {
        "kind": "grpc",
        "path": method,
        "headers": [[k, v] for k, v in metadata or () if not k.endswith("-bin")],
    }
    if peer:
        info["peer"] = peer
    for name, value in extra.items():
        if value is not None:
            info[name] = value
    return info


def build(limiter: Any, options: Dict[str, Any], key: Any) -> Tuple[Any, Hook]:
    """The interceptor's limiter (``limiter``, or one built from ``Limiter`` options) and key hook."""
    hook: Hook = key if callable(key) else None
    if key is not None and hook is None:
        options["key"] = key
    if limiter is None:
        from .. import Limiter

        if hook is not None:
            options["key_function"] = True  # the core keys the rule by the hook's result
        return Limiter(**options), hook
    if options:
        raise TypeError(f"PolylimitInterceptor takes limiter= or limiter options, not both ({', '.join(options)})")
    return limiter, hook


def settle_sync(limiter: Any, token: str, code: Optional[int], cost: Any = None) -> None:
    """Completes a call with its code and the cost its servicer reported (if any); never raises."""
    _adapters.settle_sync(limiter, token, code, cost)


def _wrap(handler: grpc.RpcMethodHandler, behavior: Callable[..., Any], name: str) -> grpc.RpcMethodHandler:
    make = {
        "unary_unary": grpc.unary_unary_rpc_method_handler,
        "unary_stream": grpc.unary_stream_rpc_method_handler,
        "stream_unary": grpc.stream_unary_rpc_method_handler,
        "stream_stream": grpc.stream_stream_rpc_method_handler,
    }[name]
    return make(behavior, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)


def handler_behavior(handler: grpc.RpcMethodHandler) -> Tuple[str, Callable[..., Any]]:
    """The one behaviour a method handler has, and its kind (``unary_unary``…)."""
    for name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behavior = getattr(handler, name)
        if behavior is not None:
            return name, behavior
    raise TypeError(f"polylimit: a method handler without a behaviour: {handler!r}")


class _Once:
    """Settles a call once, whichever comes first: its end, or grpcio's termination callback; with
    the cost its servicer reported (``report_cost``)."""

    def __init__(self, limiter: Any, token: Optional[str], context: Any) -> None:
        self.limiter = limiter
        self.token = token
        self.lock = threading.Lock()
        self.cost: Any = None
        self.context = context
        if token is not None:
            _track(context, self)

    def __call__(self, code: Optional[int]) -> None:
        with self.lock:
            token, self.token = self.token, None
        if token is not None:
            _untrack(self.context)
            settle_sync(self.limiter, token, code, self.cost)


def ended_code(context: Any, exc: Optional[BaseException]) -> int:
    """The code a call ended with: the one the handler set (``set_code``, ``abort``), else UNKNOWN for
    an exception and OK for a return."""
    code = code_number(context.code())
    if code is not None:
        return code
    return UNKNOWN if exc is not None else OK


def terminated_code(context: Any) -> int:
    """The code of a call grpcio reports terminated before the interceptor saw it end: the one
    set on it, else CANCELLED (the client went away)."""
    code = code_number(context.code())
    return CANCELLED if code is None else code


class PolylimitInterceptor(grpc.ServerInterceptor):
    """Applies a limiter's rules to every call of a ``grpc.server``: see the module documentation.
    ``PolylimitInterceptor(limiter=...)``, or the options of ``Limiter(...)`` themselves."""

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

    def request_info(self, method: str, context: grpc.ServicerContext) -> Dict[str, Any]:
        """The core's request for a call, with the hooks' values."""
        extra = {name: hook(context) for name, hook in self.hooks.items() if hook is not None}
        return request_info(method, context.peer(), context.invocation_metadata(), **extra)

    def sleep(self, seconds: float) -> None:
        """Holds a call for its shape-mode delay."""
        time.sleep(seconds)

    def intercept_service(self, continuation: Callable[..., Any], handler_call_details: grpc.HandlerCallDetails) -> Any:
        """grpcio's hook: the method's handler, wrapped to decide each call first and settle it after."""
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        name, behavior = handler_behavior(handler)
        streams_out = name.endswith("_stream")

        def admit(context: grpc.ServicerContext) -> _Once:
            outcome: Outcome = self.limiter.check_request_sync(self.request_info(method, context))
            if outcome.headers:
                context.send_initial_metadata(outcome.headers)
            if outcome.status is not None:
                context.set_trailing_metadata(outcome.trailers)
                context.abort(status_code(outcome.status), outcome.body or "")
            settle = _Once(self.limiter, outcome.completion, context)
            if outcome.completion is not None:
                # A call that ends without reaching its end here (a client cancel) is settled then.
                context.add_callback(lambda: settle(terminated_code(context)))
            if outcome.delay_ms:
                self.sleep(outcome.delay_ms / 1000)
            return settle

        if not streams_out:

            def unary(request: Any, context: grpc.ServicerContext) -> Any:
                settle = admit(context)
                try:
                    response = behavior(request, context)
                except BaseException as exc:
                    settle(ended_code(context, exc))
                    raise
                settle(ended_code(context, None))
                return response

            return _wrap(handler, unary, name)

        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            settle = admit(context)

            def responses() -> Iterator[Any]:
                try:
                    yield from behavior(request, context)
                except GeneratorExit:
                    settle(CANCELLED)  # the server stopped reading: the client went away
                    raise
                except BaseException as exc:
                    settle(ended_code(context, exc))
                    raise
                settle(ended_code(context, None))

            return responses()

        return _wrap(handler, stream, name)
