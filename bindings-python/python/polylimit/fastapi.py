"""FastAPI / Starlette adapters. Every decision goes through the core's
``RequestInfo`` → ``Outcome``: this module only reads the ASGI scope and writes
the outcome's status, headers and body; it computes no key, IP or header.

* ``@limiter.limit(key="ip")`` under ``@app.get(...)``: the route may declare
  ``request: Request`` and ``response: Response`` or not. The wrapper uses the
  endpoint's own ``Request``/``Response`` parameters when it has them, and
  otherwise adds keyword-only ones to its signature that FastAPI injects and the
  wrapper removes before calling the endpoint (the slowapi/FastAPI practice of
  adding a dependency to the signature). A refusal is returned as a response
  with the exact body; headers go on the endpoint's response.
* ``Depends(limiter.depends(key="ip"))``: a dependency that sets the headers on
  the response and raises ``RateLimitExceeded`` (a Starlette ``HTTPException``)
  when refused. Call ``install(app)`` once to render it with the exact body
  (otherwise FastAPI's default handler wraps it in ``{"detail": ...}``).
* ``app.add_middleware(PolylimitMiddleware, limiter=Limiter.from_file(path))`` (or the
  options of ``Limiter(...)``): a pure ASGI middleware that applies the limiter's rules to
  every HTTP request.

``key`` is a dimension of the core (``ip``, ``user``, ``api_key``, ``method``,
``route``, ``header:<name>``), a list of them, or a callable
``(request) -> str | None`` whose result becomes the core's ``key`` dimension
(None: the request is not limited). The defaults are the core's, the same in
Node and Go: no ``key`` is ``["ip"]``, a callable is ``["key"]``; with
``per_route=True`` (the default) the core puts the ``route`` dimension first, so
each decorated route has its own budget (``per_route=False`` shares one).

``count`` (``"failed"``, ``"successful"``, ``["4xx", 503]``, …; default ``"all"``) charges only
some responses, like express-rate-limit's ``skipSuccessfulRequests``: the request is checked and
charged before the handler as always, and once its status is known the core gives the charge back
when the status does not count (``Outcome.completion`` → ``limiter.complete(token, status)``). A
handler exception or a cancelled request (client gone) counts as failed. The decorator sees the
status itself (the endpoint's ``Response``, an ``HTTPException``, the injected ``response``'s status,
else the route's); the ``Depends`` form needs ``install(app)``, whose middleware sees the response.
The same completion releases a concurrency policy's slots after the response (an exception or a
client gone included); without ``install(app)`` the ``Depends`` form holds them until their lease ends.
Rules-file ``count`` (the ASGI middleware) is settled by ``PolylimitMiddleware`` itself.

``cost`` (``limit``, ``depends``, ``PolylimitMiddleware``): the request's cost, a number or a function
of the request (``async def`` too) giving it; the core checks it (against the rules' ``max_cost``
for the middleware), a bad one is the core's error. A handler that learns its actual cost from the
response (an LLM call's tokens) sets ``request.state.polylimit_cost = n``: each form passes it to
``limiter.complete(token, status, cost=n)`` when it completes the request (a rules-file cost rule,
``count``, a concurrency policy; the ``Depends`` form with ``install(app)``). A value the core
refuses is logged and the request completed without it.

``limit`` and ``depends`` check through the limiter they are called on (a
``route_rule`` of it, validated when the route is decorated): the same store,
memory state and metrics (labelled ``route="route_rule"``), the rules file's
client-address, list and header settings when it has them. Once that limiter is
closed they raise ``polylimit.ClosedError`` from the route: a 500 unless the app
handles it (``app.add_exception_handler(ClosedError, ...)``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import typing
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple, Union

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._adapters import COST, awaited, request_cost, route_rule, settle as _settle, with_dimensions
from ._adapters import reported_cost as _reported_cost
from ._polylimit import Limiter as _NativeLimiter, Outcome, RouteRule, ended_status as _ended_status

__all__ = ["PolylimitMiddleware", "RateLimitExceeded", "depends", "install", "limit", "request_info"]

KeySpec = Union[str, Sequence[str], Callable[[Request], Optional[str]]]
CountSpec = Union[str, int, Sequence[Union[str, int]], None]
Hook = Optional[Callable[[Request], Optional[str]]]
CostSpec = Union[int, Callable[[Request], Any]]

_REQUEST = "polylimit_request__"
_RESPONSE = "polylimit_response__"
# The completions `install(app)`'s middleware settles after the response: (limiter, token) pairs.
_SETTLE = "polylimit.settle"

_log = logging.getLogger("polylimit")
# Completions left to run after a cancelled request: referenced until they finish.
_settling: "set[asyncio.Task[None]]" = set()


def _settle_soon(limiter: Any, token: str, status: Optional[int], cost: Optional[int] = None) -> None:
    """``_settle`` in its own task: for a request being cancelled, which cannot await any more."""
    try:
        task = asyncio.get_running_loop().create_task(_settle(limiter, token, status, cost))
    except RuntimeError:
        return
    _settling.add(task)
    task.add_done_callback(_settling.discard)


def _ended(seen: List[int], failed: bool = False, gone: bool = False) -> Optional[int]:
    """The status a request ends with, by the core's rule (``ended_status``, SPEC §6): the status
    the app started its response with (``seen``), also when the client left since; no response
    (``None``) when it started none."""
    return _ended_status(seen[0] if seen else 0, bool(seen), failed, gone)


COST_STATE = COST
"""The ``request.state`` attribute a handler sets to report its request's actual cost (an LLM
call's tokens): ``request.state.polylimit_cost = 3400``. The middleware passes it to
``limiter.complete(token, status, cost)`` after the response."""


def reported_cost(scope: Scope) -> Optional[int]:
    """The actual cost the handler reported on ``request.state`` (``None``: it did not)."""
    return _reported_cost(scope.get("state"))


def _route_status(scope: Scope) -> int:
    """The status FastAPI answers an endpoint's plain return value with: the route's, or 200."""
    return getattr(scope.get("route"), "status_code", None) or 200


def request_info(
    scope: Scope,
    *,
    route: Optional[str] = None,
    key: Optional[str] = None,
    user: Optional[str] = None,
    api_key: Optional[str] = None,
    cost: Optional[int] = None,
) -> Dict[str, Any]:
    """The core's ``RequestInfo`` (as a dict) for an ASGI HTTP scope: the path Starlette routes
    on, and no peer when the server gives no client address (``uvicorn --uds``): the core then
    keys it as ``unknown``, or trusts it with ``unix`` in ``trusted_proxies``."""
    client = scope.get("client")
    if route is None:
        matched = scope.get("route")
        route = getattr(matched, "path", None)
    info: Dict[str, Any] = {
        "method": scope.get("method", "GET"),
        "path": scope.get("path", "/"),
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope.get("headers", ())],
    }
    return with_dimensions(info, client[0] if client else None, route, key, user, api_key, cost)


def _raw_headers(outcome: Outcome) -> List[Tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in outcome.headers]


def refusal(outcome: Outcome) -> Response:
    """The response for a refused request: the outcome's status, headers and JSON body."""
    assert outcome.status is not None, "refusal() takes a refused outcome"
    response = Response(content=outcome.body or "", status_code=outcome.status, media_type="application/json")
    response.raw_headers.extend(_raw_headers(outcome))
    return response


class _Check:
    """One decorator's or dependency's check: a rule of the user's limiter, decided through it.
    The key's defaults are the core's (``route_rule``): ``["ip"]``, ``["key"]`` for a callable,
    ``route`` first per route."""

    def __init__(
        self, limiter: Any, key: Optional[KeySpec], policy: Optional[str], cost: CostSpec, per_route: bool, count: CountSpec = None
    ) -> None:
        self.limiter: _NativeLimiter = limiter
        self.rule: RouteRule
        self.hook: Hook
        self.rule, self.hook = route_rule(limiter, key, policy, per_route, count)
        self.cost = cost

    async def __call__(self, request: Request) -> Optional[Outcome]:
        key = None
        if self.hook is not None:
            key = self.hook(request)
            if inspect.isawaitable(key):
                key = await key
            if key is None:
                return None
        cost = await awaited(request_cost(self.cost, request))
        return await self.limiter.check_route(request_info(request.scope, key=key, cost=cost), self.rule)


def _own_parameter(params: List[inspect.Parameter], hints: Dict[str, Any], kind: type) -> Optional[str]:
    """The endpoint's parameter FastAPI fills with a ``kind`` (``Request``, ``Response``), if any:
    FastAPI injects one of each per endpoint, so the wrapper must share it rather than add its own."""
    for param in params:
        annotation = hints.get(param.name, param.annotation)
        if isinstance(annotation, type) and issubclass(annotation, kind):
            return param.name
    return None


def limit(
    limiter: Any,
    key: Optional[KeySpec] = None,
    *,
    policy: Optional[str] = None,
    cost: CostSpec = 1,
    per_route: bool = True,
    count: CountSpec = None,
):
    """``@limiter.limit(...)``: see the module documentation."""
    check = _Check(limiter, key, policy, cost, per_route, count)

    def decorator(endpoint: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        is_async = inspect.iscoroutinefunction(endpoint)

        sig = inspect.signature(endpoint)
        params = list(sig.parameters.values())
        try:
            # String annotations (``from __future__ import annotations``) resolved in the endpoint's module.
            hints = typing.get_type_hints(endpoint, include_extras=True)
        except Exception:  # noqa: BLE001 - unresolvable: FastAPI reports it with the raw annotations
            hints = {}
        own_request = _own_parameter(params, hints, Request)
        own_response = _own_parameter(params, hints, Response)

        @functools.wraps(endpoint)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            request: Request = kwargs[own_request] if own_request else kwargs.pop(_REQUEST)
            response: Response = kwargs[own_response] if own_response else kwargs.pop(_RESPONSE)
            outcome = await check(request)
            token = outcome.completion if outcome is not None else None
            if outcome is not None:
                if outcome.status is not None:
                    return refusal(outcome)
                if outcome.delay_ms:
                    await _delay(outcome, check.limiter)
            if token is not None:
                return await _call_and_settle(check.limiter, token, request, response, outcome, endpoint, args, kwargs)
            if is_async:
                result = await endpoint(*args, **kwargs)
            else:
                result = await run_in_threadpool(endpoint, *args, **kwargs)
            if outcome is not None and outcome.headers:
                target = result if isinstance(result, Response) else response
                for name, value in outcome.headers:
                    target.headers[name] = value
            return result

        params = [p.replace(annotation=hints[p.name]) if p.name in hints else p for p in params]
        extra = []
        if own_request is None:
            extra.append(inspect.Parameter(_REQUEST, inspect.Parameter.KEYWORD_ONLY, annotation=Request))
        if own_response is None:
            extra.append(inspect.Parameter(_RESPONSE, inspect.Parameter.KEYWORD_ONLY, annotation=Response))
        at = len(params)
        if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
            at -= 1
        wrapper.__signature__ = sig.replace(parameters=params[:at] + extra + params[at:])  # type: ignore[attr-defined]
        return wrapper

    return decorator


async def _delay(outcome: Outcome, limiter: Any) -> None:
    """Holds an admitted request for its shape-mode delay; a request cancelled meanwhile (the client
    went away) is settled as one without a response."""
    try:
        await asyncio.sleep(outcome.delay_ms / 1000)
    except asyncio.CancelledError:
        if outcome.completion is not None:
            _settle_soon(limiter, outcome.completion, None)
        raise


async def _call_and_settle(
    limiter: Any, token: str, request: Request, response: Response, outcome: Outcome, endpoint: Any, args: Any, kwargs: Any
) -> Any:
    """Runs the endpoint of a request whose charge depends on its status, then settles it: the
    status of the endpoint's ``Response``, of an ``HTTPException``, of the injected ``response``, else
    the route's; an exception or a cancellation counts as failed (no response)."""
    status: Optional[int] = None
    try:
        if inspect.iscoroutinefunction(endpoint):
            result = await endpoint(*args, **kwargs)
        else:
            result = await run_in_threadpool(endpoint, *args, **kwargs)
        target = result if isinstance(result, Response) else response
        for name, value in outcome.headers:
            target.headers[name] = value
        if isinstance(result, Response):
            status = result.status_code
        else:
            status = response.status_code or _route_status(request.scope)
        return result
    except HTTPException as exc:
        status = exc.status_code
        raise
    except asyncio.CancelledError:
        _settle_soon(limiter, token, None, reported_cost(request.scope))
        token = ""
        raise
    finally:
        if token:
            await _settle(limiter, token, status, reported_cost(request.scope))


class RateLimitExceeded(HTTPException):
    """Raised by the ``Depends`` form when the core refuses a request."""

    def __init__(self, outcome: Outcome) -> None:
        assert outcome.status is not None, "RateLimitExceeded takes a refused outcome"
        body = json.loads(outcome.body) if outcome.body else None
        super().__init__(status_code=outcome.status, detail=body, headers=dict(outcome.headers))
        self.outcome = outcome
        """The core's refusal: status, headers and body."""


def depends(
    limiter: Any,
    key: Optional[KeySpec] = None,
    *,
    policy: Optional[str] = None,
    cost: CostSpec = 1,
    per_route: bool = True,
    count: CountSpec = None,
):
    """``Depends(limiter.depends(...))``: see the module documentation."""
    check = _Check(limiter, key, policy, cost, per_route, count)

    async def polylimit_dependency(request: Request, response: Response) -> Optional[Outcome]:
        outcome = await check(request)
        if outcome is None:
            return None
        if outcome.status is not None:
            raise RateLimitExceeded(outcome)
        if outcome.completion is not None:
            pending = request.scope.get(_SETTLE)
            if pending is None:
                _warn_not_installed()
            else:
                pending.append((check.limiter, outcome.completion))
        if outcome.delay_ms:
            await asyncio.sleep(outcome.delay_ms / 1000)
        for name, value in outcome.headers:
            response.headers[name] = value
        return outcome

    return polylimit_dependency


async def _rate_limit_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RateLimitExceeded)
    return refusal(exc.outcome)


_WARNED: List[bool] = []


def _warn_not_installed() -> None:
    if not _WARNED:
        _WARNED.append(True)
        _log.warning(
            "polylimit: Depends(limiter.depends(...)) cannot see the response without "
            "polylimit.fastapi.install(app): every request is charged (count=...) and a concurrency "
            "slot is held until its lease ends"
        )


def install(app: Any) -> None:
    """Renders ``RateLimitExceeded`` with the core's exact body and headers, and settles the
    ``Depends`` form's ``count`` after each response (a small ASGI middleware that sees the status)."""
    app.add_exception_handler(RateLimitExceeded, _rate_limit_handler)
    app.add_middleware(_SettleMiddleware)


def _is_last_body(message: Message) -> bool:
    """The response's last message: settling before it is sent means a client never sees the
    response before its charge is given back or its concurrency slot released."""
    return message["type"] == "http.response.body" and not message.get("more_body", False)


async def _send_capturing(
    send: Send, scope: Scope, seen: List[int], pending: List[Tuple[Any, str]], message: Message
) -> None:
    if message["type"] == "http.response.start":
        seen.append(int(message["status"]))
    elif pending and _is_last_body(message):
        settling = list(pending)
        pending.clear()
        for limiter, token in settling:
            await _settle(limiter, token, _ended(seen), reported_cost(scope))
    await send(message)


class _SettleMiddleware:
    """Settles, after the response, the completions the ``Depends`` form registered in the scope."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pending: List[Tuple[Any, str]] = []
        scope[_SETTLE] = pending
        seen: List[int] = []
        try:
            await self.app(scope, receive, functools.partial(_send_capturing, send, scope, seen, pending))
        except asyncio.CancelledError:
            for limiter, token in pending:
                _settle_soon(limiter, token, _ended(seen, gone=True), reported_cost(scope))
            pending.clear()
            raise
        except Exception:
            for limiter, token in pending:
                await _settle(limiter, token, _ended(seen, failed=True), reported_cost(scope))
            pending.clear()
            raise
        finally:
            for limiter, token in pending:
                await _settle(limiter, token, _ended(seen), reported_cost(scope))


def _route_template(scope: Scope) -> Optional[str]:
    app = scope.get("app")
    router = getattr(app, "router", None)
    for route in getattr(router, "routes", ()):
        try:
            match, _ = route.matches(scope)
        except Exception:  # noqa: BLE001 - a route that cannot match this scope
            continue
        if match is Match.FULL:
            return getattr(route, "path", None)
    return None


class PolylimitMiddleware:
    """ASGI middleware applying a limiter's rules to every HTTP request.

    ``PolylimitMiddleware(app, limiter=Limiter.from_file("polylimit.yaml"))``, or the options of
    ``Limiter(...)`` themselves (``rules_file=...``, ``policy=..., key=[...]``, ``trusted_proxies=...``),
    which build the limiter through the core. ``user`` / ``api_key`` / ``key``: optional
    ``(request) -> str | None`` hooks for those dimensions (a ``key`` that is not callable is the
    ``key`` option: the dimensions of the rule built from ``policy``). With a ``key`` hook and
    ``policy``, the rule is keyed by the hook's result (the core's default, ``key_function``);
    a request whose key no rule of the limiter reads raises ``ConfigError`` naming ``key``.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: Optional[_NativeLimiter] = None,
        *,
        user: Hook = None,
        api_key: Hook = None,
        key: Any = None,
        cost: Optional[Callable[[Request], Optional[int]]] = None,
        **options: Any,
    ) -> None:
        hook: Hook = key if callable(key) else None
        if key is not None and hook is None:
            options["key"] = key
        if hook is not None and limiter is None:
            # The core keys the one rule by the hook's result (key ["key"]) and checks a document reads it.
            options["key_function"] = True
        if limiter is None:
            from . import Limiter

            limiter = Limiter(**options)
        elif options:
            raise TypeError(f"PolylimitMiddleware takes limiter= or limiter options, not both ({', '.join(options)})")
        self.app = app
        """The ASGI app the middleware wraps."""
        self.limiter = limiter
        """The limiter whose rules decide each request."""
        self.hooks: Dict[str, Any] = {"user": user, "api_key": api_key, "key": hook, "cost": cost}
        """The functions giving a request's ``user``, ``api_key`` and ``key`` dimensions, and its
        ``cost`` (a whole number the core checks against the rules' ``max_cost``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra: Dict[str, Any] = {}
        if any(self.hooks.values()):
            request = Request(scope, receive)
            for name, hook in self.hooks.items():
                if hook is not None:
                    extra[name] = await awaited(hook(request))
        outcome = await self.limiter.check_request(request_info(scope, route=_route_template(scope), **extra))
        if outcome.status is not None:
            await refusal(outcome)(scope, receive, send)
            return
        if outcome.delay_ms:
            await _delay(outcome, self.limiter)
        headers = _raw_headers(outcome)
        if outcome.completion is not None:
            await self._settled(scope, receive, send, headers, outcome.completion)
            return
        if not headers:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", ())) + headers
            await send(message)

        await self.app(scope, receive, send_with_headers)

    async def _settled(self, scope: Scope, receive: Receive, send: Send, headers: List[Tuple[bytes, bytes]], token: str) -> None:
        """Serves a request whose charge depends on its status and settles it with the status sent,
        right before the response's last message (so the next request of the same client sees it),
        or after an exception or a cancellation before the response (no status: counted as failed)."""
        seen: List[int] = []

        async def send_capturing(message: Message) -> None:
            nonlocal token
            if message["type"] == "http.response.start":
                seen.append(int(message["status"]))
                message = dict(message)
                message["headers"] = list(message.get("headers", ())) + headers
            elif token and _is_last_body(message):
                settling, token = token, ""
                await _settle(self.limiter, settling, _ended(seen), reported_cost(scope))
            await send(message)

        try:
            await self.app(scope, receive, send_capturing)
        except asyncio.CancelledError:
            _settle_soon(self.limiter, token, _ended(seen, gone=True), reported_cost(scope))
            token = ""
            raise
        except Exception:
            settling, token = token, ""
            if settling:
                await _settle(self.limiter, settling, _ended(seen, failed=True), reported_cost(scope))
            raise
        finally:
            if token:
                await _settle(self.limiter, token, _ended(seen), reported_cost(scope))
