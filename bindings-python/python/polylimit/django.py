"""Django adapters. Every decision goes through the core's ``RequestInfo`` → ``Outcome``: this
module reads the request's method, path, headers, client address and route template, and writes
the outcome's status, headers and body; it holds no default, key or status rule.

* ``MIDDLEWARE = [..., "polylimit.django.PolylimitMiddleware"]`` applies the rules of the
  ``POLYLIMIT`` setting to every request: a rules file's path, or a dict of ``Limiter`` options
  (``{"rules_file": ..., "store": ...}`` or ``{"rules": {...}}``) with the optional hooks ``user``,
  ``api_key`` and ``key`` (functions of the request, or dotted paths to them). Sync and async
  (``sync_capable = async_capable = True``): under ASGI it awaits the core and never blocks the loop.
* ``@ratelimit(key="ip", rate="5/m")`` on a view (sync or ``async def``), like django-ratelimit's:
  ``rate`` gives the view its own policy (on the setting's store); ``policy="api"`` uses a policy of
  the setting's limiter; ``limiter=`` any ``polylimit.Limiter``. ``key`` is a dimension of the core
  (``ip``, ``user``, ``api_key``, ``header:<name>``…), a list of them, or a function of the request
  whose result becomes the ``key`` dimension (None: not limited). Each view has its own budget unless
  ``per_route=False``.

The route is the URL pattern Django resolved (``request.resolver_match.route``, ``/`` in front:
``/api/<int:id>``); a request no pattern matches has none (the core's ``unmatched``). ``count``
(rules file, or the decorator's ``count=``) is settled with the status of the response the view
returned, and a concurrency slot is released then; a view's exception is charged as Django's 500,
an async request cancelled by a client gone as no response. A streaming response is settled when
the view returns it, before its body is sent.

``cost`` (the middleware, the setting's hooks, ``@ratelimit``): the request's cost, a number (the
decorator) or a function of the request giving it (``async def`` in an async stack); the core checks
it (against the rules' ``max_cost`` for the middleware). A view that learns its actual cost from the
response (an LLM call's tokens) sets ``request.polylimit_cost = n``: the middleware (and the
decorator) pass it to ``limiter.complete(token, status, cost=n)`` when they complete the request (a
rules-file cost rule, ``count``, a concurrency policy). A value the core refuses is logged and the
request completed without it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from . import _adapters
from ._adapters import COST, CountSpec, Hook, KeySpec, awaited as _resolve, ended, reported_cost, request_cost
from ._adapters import settle as _settle, settle_sync as _settle_sync
from ._polylimit import Outcome

__all__ = ["PolylimitMiddleware", "ratelimit", "request_info", "refusal", "settings_limiter"]

_lock = threading.Lock()
_shared: Dict[str, Any] = {}
_UNSET: Any = object()


def settings_limiter() -> Tuple[Any, Dict[str, Any], Dict[str, Hook]]:
    """``(limiter, options, hooks)`` built once per process from ``settings.POLYLIMIT``."""
    with _lock:
        if "limiter" not in _shared:
            from django.conf import settings

            built = _adapters.from_settings(getattr(settings, "POLYLIMIT", None), "settings.POLYLIMIT")
            _shared.update(limiter=built[0], options=built[1], hooks=built[2])
        return _shared["limiter"], _shared["options"], _shared["hooks"]


def _setting_changed(*, setting: str, **_: Any) -> None:
    # override_settings(POLYLIMIT=...) in a test: the next middleware (a new test Client) builds anew.
    if setting == "POLYLIMIT":
        with _lock:
            _shared.clear()


setting_changed.connect(_setting_changed)


def route_template(request: HttpRequest) -> Optional[str]:
    """The URL pattern the request resolves to, as a path (``/api/<int:id>``; a ``re_path`` gives
    its regex without ``^``), or None when no pattern matches."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        try:
            match = resolve(request.path_info, getattr(request, "urlconf", None))
        except Resolver404:
            return None
    route = getattr(match, "route", None)
    return None if route is None else "/" + route.lstrip("^")


def request_info(
    request: HttpRequest,
    *,
    route: Optional[str] = _UNSET,
    key: Optional[str] = None,
    user: Optional[str] = None,
    api_key: Optional[str] = None,
    cost: Optional[int] = None,
) -> Dict[str, Any]:
    """The core's ``RequestInfo`` (a dict) for a Django request: the path Django routes on, and no
    peer when the server gives no ``REMOTE_ADDR`` (a Unix socket): the core keys it ``unknown``."""
    info: Dict[str, Any] = {
        "method": request.method or "GET",
        "path": request.path_info,
        "headers": _adapters.environ_headers(request.META),
    }
    if route is _UNSET:
        route = route_template(request)
    return _adapters.with_dimensions(info, request.META.get("REMOTE_ADDR"), route, key, user, api_key, cost)


def refusal(outcome: Outcome) -> HttpResponse:
    """The response for a refused request: the outcome's status, headers and JSON body, exactly."""
    assert outcome.status is not None, "refusal() takes a refused outcome"
    response = HttpResponse(outcome.body or "", status=outcome.status, content_type="application/json")
    _add_headers(response, outcome)
    return response


def _add_headers(response: HttpResponse, outcome: Outcome) -> None:
    for name, value in outcome.headers:
        response[name] = value


COST_ATTRIBUTE = COST
"""The attribute of the request a view sets to report its actual cost: ``request.polylimit_cost = 3400``."""


# Completions of cancelled requests, referenced until they finish.
_settling: "set[asyncio.Task[None]]" = set()


def _settle_soon(limiter: Any, token: str, status: Optional[int], cost: Any) -> None:
    task = asyncio.get_running_loop().create_task(_settle(limiter, token, status, cost))
    _settling.add(task)
    task.add_done_callback(_settling.discard)


def _serve_sync(
    limiter: Any, outcome: Outcome, request: HttpRequest, call: Callable[[], HttpResponse], sleep: Callable[[float], None]
) -> HttpResponse:
    """Answers a checked request: its refusal, or the view's response with the outcome's headers,
    settled (``count``, concurrency, cost) with the response's status and the cost the view reported."""
    if outcome.status is not None:
        return refusal(outcome)
    if outcome.delay_ms:
        sleep(outcome.delay_ms / 1000)
    token = outcome.completion
    try:
        response = call()
    except BaseException:
        if token is not None:
            _settle_sync(limiter, token, ended(None, failed=True), reported_cost(request))
        raise
    _add_headers(response, outcome)
    if token is not None:
        _settle_sync(limiter, token, ended(response.status_code), reported_cost(request))
    return response


async def _serve(
    limiter: Any, outcome: Outcome, request: HttpRequest, call: Callable[[], Any], sleep: Callable[[float], Any]
) -> HttpResponse:
    """``_serve_sync`` for an async request; a request cancelled (client gone) is settled as one
    without a response."""
    if outcome.status is not None:
        return refusal(outcome)
    token = outcome.completion
    try:
        if outcome.delay_ms:
            await sleep(outcome.delay_ms / 1000)
        response = await call()
    except asyncio.CancelledError:
        if token is not None:
            _settle_soon(limiter, token, ended(None, gone=True), reported_cost(request))
        raise
    except BaseException:
        if token is not None:
            await _settle(limiter, token, ended(None, failed=True), reported_cost(request))
        raise
    _add_headers(response, outcome)
    if token is not None:
        await _settle(limiter, token, ended(response.status_code), reported_cost(request))
    return response


class PolylimitMiddleware:
    """Applies a limiter's rules to every request: ``settings.POLYLIMIT``'s, or
    ``PolylimitMiddleware(get_response, limiter=..., user=..., api_key=..., key=..., cost=...)`` built
    by hand. Hooks are functions of the request; in an async stack they may be ``async def`` (one that
    reads the database must be: ``(await request.auser()).pk``). ``cost`` gives the request's cost,
    which the core checks against the rules' ``max_cost``."""

    sync_capable = True
    """Django may call it from a sync (WSGI) chain."""
    async_capable = True
    """Django may call it from an async (ASGI) chain, where it awaits the core."""

    def __init__(
        self,
        get_response: Callable[..., Any],
        limiter: Any = None,
        *,
        user: Hook = None,
        api_key: Hook = None,
        key: Hook = None,
        cost: Optional[Callable[[HttpRequest], Any]] = None,
    ) -> None:
        self.get_response = get_response
        """The next middleware or the view (Django's middleware chain)."""
        self.is_async = iscoroutinefunction(get_response)
        """Whether the chain below is async: the middleware then is too."""
        if self.is_async:
            markcoroutinefunction(self)
        hooks: Dict[str, Hook] = {}
        if limiter is None:
            limiter, _, hooks = settings_limiter()
        self.limiter = limiter
        """The limiter whose rules decide each request."""
        given = {"user": user, "api_key": api_key, "key": key, "cost": cost}
        self.hooks = {name: given[name] or hooks.get(name) for name in given}
        """The functions giving a request's ``user``, ``api_key`` and ``key`` dimensions and its ``cost``."""

    def request_info(self, request: HttpRequest, hooks: Dict[str, Any]) -> Dict[str, Any]:
        """The core's request for ``request``, with the hooks' values."""
        return request_info(request, **hooks)

    def sleep(self, seconds: float) -> Any:
        """Holds a request for its shape-mode delay (an awaitable in an async stack)."""
        return asyncio.sleep(seconds) if self.is_async else time.sleep(seconds)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        values = {name: hook(request) for name, hook in self.hooks.items() if hook is not None}
        outcome = self.limiter.check_request_sync(self.request_info(request, values))
        return _serve_sync(self.limiter, outcome, request, lambda: self.get_response(request), self.sleep)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        values = {name: await _resolve(hook(request)) for name, hook in self.hooks.items() if hook is not None}
        outcome = await self.limiter.check_request(self.request_info(request, values))
        return await _serve(self.limiter, outcome, request, lambda: self.get_response(request), self.sleep)


def ratelimit(
    key: Optional[KeySpec] = None,
    *,
    rate: Optional[str] = None,
    burst: Optional[int] = None,
    algorithm: Optional[str] = None,
    policy: Optional[str] = None,
    limiter: Any = None,
    cost: Union[int, Callable[[HttpRequest], Any]] = 1,
    per_route: bool = True,
    count: CountSpec = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Limits a view (sync or async): see the module documentation. The rule is built and checked
    when the view is decorated (a bad ``rate`` or ``policy`` raises ``ConfigError`` then)."""
    if rate is not None and (limiter is not None or policy is not None):
        raise TypeError("polylimit: ratelimit takes rate= (a policy of its own) or limiter=/policy=, not both")
    if rate is not None:
        limiter = _adapters.own_limiter(rate, burst, algorithm, _adapters.store_of(_settings_options()))
    elif limiter is None:
        limiter = settings_limiter()[0]
    rule, hook = _adapters.route_rule(limiter, key, policy, per_route, count)

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                value = await _resolve(hook(request)) if hook is not None else None
                if hook is not None and value is None:
                    return await view(request, *args, **kwargs)
                given = await _resolve(request_cost(cost, request))
                outcome = await limiter.check_route(request_info(request, key=value, cost=given), rule)
                return await _serve(limiter, outcome, request, lambda: view(request, *args, **kwargs), asyncio.sleep)

            return markcoroutinefunction(async_wrapper)

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            value = hook(request) if hook is not None else None
            if hook is not None and value is None:
                return view(request, *args, **kwargs)
            given = request_cost(cost, request)
            outcome = limiter.check_route_sync(request_info(request, key=value, cost=given), rule)
            return _serve_sync(limiter, outcome, request, lambda: view(request, *args, **kwargs), time.sleep)

        return wrapper

    return decorator


def _settings_options() -> Optional[Dict[str, Any]]:
    """The options of ``settings.POLYLIMIT``, None when it is not set."""
    from django.conf import settings

    if getattr(settings, "POLYLIMIT", None) is None:
        return None
    return settings_limiter()[1]
