"""What the Python adapters share, free of any framework: the limiter their settings build, a
decorator's rule, the status a request ended with, the actual cost a handler reported, and the
completion after the response. Every rule is the core's; this module only reads settings and
hands their values over."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ._polylimit import RouteRule, ended_status

KeySpec = Union[str, Sequence[str], Callable[[Any], Optional[str]]]
CountSpec = Union[str, int, Sequence[Union[str, int]], None]
Hook = Optional[Callable[[Any], Optional[str]]]

# The settings entries that are request hooks, not options of the core.
HOOKS = ("user", "api_key", "key", "cost")

COST = "polylimit_cost"
"""Where a handler reports its request's actual cost (an LLM call's tokens), learned from the
response: ``request.state.polylimit_cost`` (FastAPI / Starlette), ``request.polylimit_cost``
(Django), ``g.polylimit_cost`` (Flask); a gRPC servicer calls ``polylimit.grpc.report_cost``.
The adapter passes it to ``limiter.complete(token, status, cost)`` after the response."""

_log = logging.getLogger("polylimit")


def _callable(name: str, value: Any) -> Hook:
    """A hook given as a function or as a dotted path to one (``"myapp.auth.user_id"``)."""
    if value is None or callable(value):
        return value
    if isinstance(value, str) and "." in value:
        module, _, attr = value.rpartition(".")
        return getattr(importlib.import_module(module), attr)
    raise TypeError(f"polylimit: {name} must be a function or a dotted path to one, not {value!r}")


def from_settings(config: Any, where: str) -> Tuple[Any, Dict[str, Any], Dict[str, Hook]]:
    """``(limiter, options, hooks)`` from a framework's setting: a rules file's path, or a dict of
    ``Limiter`` options (``rules``, ``rules_file``, ``store``, ``trusted_proxies``, …) with the optional
    hooks ``user``, ``api_key``, ``key`` and ``cost`` (functions of the request, or dotted paths to
    them; ``cost`` gives the request's cost, which the core checks against its rules' ``max_cost``).
    ``options`` are what built the limiter (``effective_config(**options)`` shows its configuration)."""
    from . import Limiter

    if config is None:
        raise TypeError(f"polylimit: set {where} (a rules file's path, or a dict of Limiter options)")
    if isinstance(config, (str, os.PathLike)):
        options: Dict[str, Any] = {"rules_file": os.fspath(config)}
        hooks: Dict[str, Hook] = {}
    elif isinstance(config, dict):
        options = {k: v for k, v in config.items() if k not in HOOKS}
        hooks = {k: _callable(f"{where}[{k!r}]", config.get(k)) for k in HOOKS}
        if "rules" in options and isinstance(options["rules"], (os.PathLike,)):
            options["rules_file"] = os.fspath(options.pop("rules"))
    else:
        raise TypeError(f"polylimit: {where} must be a rules file's path or a dict, not {type(config).__name__}")
    if hooks.get("key") is not None:
        # The core keys a rule built from ``policy`` by the hook's result and checks a document reads it.
        options["key_function"] = True
    return Limiter(**options), options, hooks


def route_rule(
    limiter: Any, key: Optional[KeySpec], policy: Optional[str], per_route: bool, count: CountSpec
) -> Tuple[RouteRule, Hook]:
    """A decorator's rule of ``limiter`` (the core's defaults: key ``["ip"]``, ``["key"]`` for a
    function, ``route`` first per route) and its key function, if any."""
    hook: Hook = key if callable(key) else None
    dims = None if key is None or hook is not None else [key] if isinstance(key, str) else list(key)  # type: ignore[arg-type]
    if count is not None and not isinstance(count, (str, int)):
        count = list(count)
    rule = limiter.route_rule(dims, policy, key_function=hook is not None, per_route=per_route, count=count)
    return rule, hook


def own_limiter(rate: str, burst: Optional[int], algorithm: Optional[str], store: Optional[str]) -> Any:
    """The limiter of a decorator given its own ``rate`` (django-ratelimit's ``rate="5/m"``): one
    policy, on the store of the app's settings (memory without one)."""
    from . import Limiter

    policy: Dict[str, Any] = {"rate": rate}
    if burst is not None:
        policy["burst"] = burst
    if algorithm is not None:
        policy["algorithm"] = algorithm
    return Limiter(policy=policy, store=store)


def store_of(options: Optional[Dict[str, Any]]) -> Optional[str]:
    """The store the app's settings resolve to (the core's reading of them), None without settings."""
    from . import effective_config

    return None if options is None else effective_config(**options)["store"]


def ended(status: Optional[int], failed: bool = False, gone: bool = False) -> Optional[int]:
    """The status a request is charged with (the core's ``ended_status``): ``status`` is the
    response the framework answered with, None when it answered none."""
    return ended_status(status or 0, status is not None, failed, gone)


_CGI_HEADERS = {"CONTENT_TYPE": "content-type", "CONTENT_LENGTH": "content-length"}


def environ_headers(environ: Dict[str, Any]) -> List[List[str]]:
    """A WSGI environ's (or Django ``META``'s) request headers as the core's ``[name, value]`` pairs,
    names in lower case: read from the ``HTTP_*`` keys directly, a few times cheaper than the
    frameworks' header views (which title-case every name)."""
    pairs = [[key[5:].replace("_", "-").lower(), value] for key, value in environ.items() if key[:5] == "HTTP_"]
    pairs += [[name, environ[key]] for key, name in _CGI_HEADERS.items() if environ.get(key)]
    return pairs


def with_dimensions(
    info: Dict[str, Any],
    peer: Optional[str],
    route: Optional[str],
    key: Optional[str],
    user: Optional[str],
    api_key: Optional[str],
    cost: Optional[int],
) -> Dict[str, Any]:
    """``info`` (method, path, headers) with the fields a framework gave: no peer for a Unix socket
    (the core keys it ``unknown``), none of the dimensions left as ``None``, the cost when one was
    given (a cost function's result is the caller's cost, even 1: it wins over the rules' costs)."""
    if peer:
        info["peer"] = peer
    for name, value in (("route", route), ("key", key), ("user", user), ("api_key", api_key)):
        if value is not None:
            info[name] = value
    if cost is not None:
        info["cost"] = cost
    return info


def reported_cost(holder: Any) -> Any:
    """The actual cost a handler reported on ``holder`` under ``COST`` (a mapping such as an ASGI
    scope's ``state``, or an object: a Django request, Flask's ``g``), None when it reported none.
    The value is passed on as given: the core checks it."""
    if holder is None:
        return None
    if isinstance(holder, dict):
        return holder.get(COST)
    return getattr(holder, COST, None)


def request_cost(cost: Any, request: Any) -> Any:
    """A per-route form's ``cost`` for ``request``: the number given, or the result of a function of
    the request (an awaitable when the function is ``async def``). The core checks it."""
    return cost(request) if callable(cost) else cost


async def awaited(value: Any) -> Any:
    """``value``, awaited when it is awaitable (a hook that is ``async def``)."""
    return await value if inspect.isawaitable(value) else value


def _failed(cost: Any) -> None:
    if cost is None:
        _log.exception("polylimit: completing a request failed")
    else:
        _log.exception("polylimit: completing a request with the reported cost %r failed", cost)


def settle_sync(limiter: Any, token: str, status: Optional[int], cost: Any = None) -> None:
    """Completes a request after its response (``complete_sync``) with the actual cost its handler
    reported, if any; never raises into the app: an error is logged (a cost the core refuses still
    completes the request without it, so its other charges and its leases are settled)."""
    try:
        if cost is None:
            limiter.complete_sync(token, status)
        else:
            limiter.complete_sync(token, status, cost)
    except Exception:  # noqa: BLE001 - after the response: log, never raise into the app
        _failed(cost)


async def settle(limiter: Any, token: str, status: Optional[int], cost: Any = None) -> None:
    """``settle_sync`` for an async app: awaits the core's ``complete``."""
    try:
        if cost is None:
            await limiter.complete(token, status)
        else:
            await limiter.complete(token, status, cost)
    except Exception:  # noqa: BLE001 - after the response: log, never raise into the app
        _failed(cost)
