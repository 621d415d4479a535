"""Flask adapters. Every decision goes through the core's ``RequestInfo`` → ``Outcome``: this module
reads the request's method, path, headers, client address and URL rule, and writes the outcome's
status, headers and body; it holds no default, key or status rule.

* ``polylimit = Polylimit(app)`` (or ``Polylimit()`` then ``polylimit.init_app(app)``) applies the rules
  of ``app.config["POLYLIMIT"]`` to every request: a rules file's path, or a dict of ``Limiter``
  options (``{"rules_file": ..., "store": ...}``, ``{"rules": {...}}``) with the optional hooks
  ``user``, ``api_key`` and ``key`` (functions of the request, or dotted paths to them).
  ``Polylimit(app, limiter=...)`` takes a limiter built by hand instead.
* ``@polylimit.limit(key="ip", rate="5/min")`` under ``@app.route(...)`` (a sync or ``async def``
  view), like flask-limiter's ``@limiter.limit("5 per minute")``: ``rate`` gives the view its own policy
  (on the app's store), ``policy="api"`` uses a policy of the app's limiter. ``key`` is a dimension of
  the core, a list of them, or a function of the request whose result becomes the ``key`` dimension
  (None: not limited). Each view has its own budget unless ``per_route=False``.
* ``flask polylimit config`` prints the effective configuration of ``app.config["POLYLIMIT"]``
  (the core's ``effective_config``, as JSON).

The route is the URL rule Flask matched (``request.url_rule.rule``: ``/items/<int:id>``); a request
no rule matches has none (the core's ``unmatched``). ``count`` and concurrency slots are settled with
the status of the response Flask sends (a view's exception is Flask's 500), in ``after_request``.

``cost`` (``Polylimit(cost=...)``, the config's hooks, ``@polylimit.limit(cost=...)``): the request's
cost, a number (the decorator) or a function of the request giving it; the core checks it (against
the rules' ``max_cost`` for the app-wide rules). A view that learns its actual cost from the response
(an LLM call's tokens) sets ``g.polylimit_cost = n``: the extension passes it to
``limiter.complete(token, status, cost=n)`` when it completes the request (a rules-file cost rule,
``count``, a concurrency policy), in ``after_request``. A value the core refuses is logged and the
request completed without it.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import click
from flask import Flask, Response, current_app, g, request
from flask.cli import AppGroup

from . import _adapters
from ._adapters import COST, CountSpec, Hook, KeySpec, ended, reported_cost, request_cost, settle_sync
from ._polylimit import Outcome

__all__ = ["Polylimit", "refusal", "request_info"]

_UNSET: Any = object()

COST_ATTRIBUTE = COST
"""The attribute of Flask's ``g`` a view sets to report its request's actual cost: ``g.polylimit_cost = 3400``."""


def request_info(
    req: Any = None,
    *,
    route: Optional[str] = _UNSET,
    key: Optional[str] = None,
    user: Optional[str] = None,
    api_key: Optional[str] = None,
    cost: Optional[int] = None,
) -> Dict[str, Any]:
    """The core's ``RequestInfo`` (a dict) for a Flask request (default: the current one): the path
    Flask routes on, and no peer when the server gives none (a Unix socket): the core keys it ``unknown``."""
    # The request itself, not Flask's proxy: each attribute read through the proxy costs a lookup.
    req = request._get_current_object() if req is None else req
    info: Dict[str, Any] = {
        "method": req.method,
        "path": req.path,
        "headers": _adapters.environ_headers(req.environ),
    }
    if route is _UNSET:
        route = req.url_rule.rule if req.url_rule is not None else None
    return _adapters.with_dimensions(info, req.remote_addr, route, key, user, api_key, cost)


def refusal(outcome: Outcome) -> Response:
    """The response for a refused request: the outcome's status, headers and JSON body, exactly."""
    assert outcome.status is not None, "refusal() takes a refused outcome"
    response = Response(outcome.body or "", status=outcome.status, mimetype="application/json")
    response.headers.extend(outcome.headers)
    return response


# What this request owes after its response, in its WSGI environ: [(limiter, outcome)].
_PENDING = "polylimit.pending"


def _pending() -> List[Tuple[Any, Outcome]]:
    return request.environ.setdefault(_PENDING, [])


class Polylimit:
    """The extension: see the module documentation."""

    def __init__(
        self,
        app: Optional[Flask] = None,
        *,
        limiter: Any = None,
        user: Hook = None,
        api_key: Hook = None,
        key: Hook = None,
        cost: Optional[Callable[[Any], Any]] = None,
    ) -> None:
        self.limiter = limiter
        """The limiter whose rules decide each request (``app.config["POLYLIMIT"]``'s once ``init_app`` ran)."""
        self.options: Optional[Dict[str, Any]] = None
        """The options the limiter was built from (None for a limiter given)."""
        self.hooks: Dict[str, Any] = {"user": user, "api_key": api_key, "key": key, "cost": cost}
        """The functions giving a request's ``user``, ``api_key`` and ``key`` dimensions and its ``cost``."""
        self._initialised = False
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Builds the limiter from ``app.config["POLYLIMIT"]`` (unless one was given) and checks every
        request of ``app`` before its view (without either, only the views under ``limit`` with their
        own ``rate`` are limited); registers ``flask polylimit config``."""
        config = app.config.get("POLYLIMIT")
        if self.limiter is None and config is not None:
            self.limiter, self.options, hooks = _adapters.from_settings(config, 'app.config["POLYLIMIT"]')
            self.hooks = {name: given or hooks.get(name) for name, given in self.hooks.items()}
        app.extensions["polylimit"] = self
        self._initialised = True
        app.before_request(self._before)
        app.after_request(self._after)
        app.teardown_request(self._teardown)
        app.cli.add_command(_cli)

    def request_info(self, hooks: Dict[str, Any]) -> Dict[str, Any]:
        """The core's request for the current request, with the hooks' values."""
        return request_info(None, **hooks)

    def sleep(self, seconds: float) -> None:
        """Holds a request for its shape-mode delay."""
        time.sleep(seconds)

    def _before(self) -> Optional[Response]:
        if self.limiter is None:  # no app-wide rules: only the decorated views are limited
            return None
        values = {name: hook(request) for name, hook in self.hooks.items() if hook is not None}
        return _admit(self.limiter, self.limiter.check_request_sync(self.request_info(values)), self.sleep)

    @staticmethod
    def _after(response: Response) -> Response:
        pending = request.environ.get(_PENDING)
        while pending:
            limiter, outcome = pending.pop(0)
            if outcome.status is None:
                response.headers.extend(outcome.headers)
            if outcome.completion is not None:
                settle_sync(limiter, outcome.completion, ended(response.status_code), reported_cost(g))
        return response

    @staticmethod
    def _teardown(exc: Optional[BaseException]) -> None:
        # A request that ended without a response (after_request never ran): no status.
        pending = request.environ.get(_PENDING)
        while pending:
            limiter, outcome = pending.pop(0)
            if outcome.completion is not None:
                settle_sync(limiter, outcome.completion, ended(None, failed=True), reported_cost(g))

    def limit(
        self,
        key: Optional[KeySpec] = None,
        *,
        rate: Optional[str] = None,
        burst: Optional[int] = None,
        algorithm: Optional[str] = None,
        policy: Optional[str] = None,
        cost: Union[int, Callable[[Any], Any]] = 1,
        per_route: bool = True,
        count: CountSpec = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Limits one view: see the module documentation. The rule is built when the view is
        decorated once ``init_app`` ran (a bad ``rate`` or ``policy`` raises ``ConfigError`` then), else
        (the app factory pattern: ``Polylimit()`` at import, ``init_app`` in the factory) at its first request."""
        if rate is not None and policy is not None:
            raise TypeError("polylimit: limit takes rate= (a policy of its own) or policy=, not both")
        built: List[Any] = []  # [limiter, rule, hook] once built
        lock = threading.Lock()

        def build() -> List[Any]:
            with lock:
                if not built:
                    if rate is not None:
                        limiter = _adapters.own_limiter(rate, burst, algorithm, _adapters.store_of(self.options))
                    elif self.limiter is None:
                        raise TypeError('polylimit: limit() without rate= needs the app\'s limiter: '
                                        'app.config["POLYLIMIT"] and init_app(app)')
                    else:
                        limiter = self.limiter
                    built.extend([limiter, *_adapters.route_rule(limiter, key, policy, per_route, count)])
                return built

        if self._initialised:
            build()

        def check() -> Optional[Response]:
            limiter, rule, hook = built or build()
            req = request._get_current_object()
            value = hook(req) if hook is not None else None
            if hook is not None and value is None:
                return None
            given = request_cost(cost, req)
            return _admit(limiter, limiter.check_route_sync(request_info(req, key=value, cost=given), rule), time.sleep)

        def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
            if _is_async(view):

                @functools.wraps(view)
                async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                    return check() or await view(*args, **kwargs)

                return async_wrapper

            @functools.wraps(view)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return check() or view(*args, **kwargs)

            return wrapper

        return decorator


def _is_async(view: Callable[..., Any]) -> bool:
    import inspect

    return inspect.iscoroutinefunction(view)


def _admit(limiter: Any, outcome: Outcome, sleep: Callable[[float], None]) -> Optional[Response]:
    """The refusal of a refused request; else None, once its delay is waited, and the outcome's
    headers and completion are left to ``after_request``."""
    if outcome.status is not None:
        return refusal(outcome)
    if outcome.delay_ms:
        sleep(outcome.delay_ms / 1000)
    if outcome.headers or outcome.completion is not None:
        _pending().append((limiter, outcome))
    return None


_cli = AppGroup("polylimit", help="polylimit's rate limits.")


@_cli.command("config")
def _config() -> None:
    """Print the effective configuration of app.config["POLYLIMIT"] (every default filled in)."""
    from . import effective_config

    ext = current_app.extensions.get("polylimit")
    if ext is None or ext.options is None:
        raise click.ClickException("the app's Polylimit was given a limiter, not app.config[\"POLYLIMIT\"]: nothing to print")
    click.echo(json.dumps(effective_config(**ext.options), indent=2, sort_keys=True))
