"""polylimit: a distributed rate limiter with a Rust core.

    limiter = polylimit.Limiter(policy={"algorithm": "gcra", "rate": "10/s"}, store="redis://127.0.0.1:6379")
    decision = await limiter.check("user:42")

FastAPI/Starlette adapters: ``limiter.limit(...)`` (decorator), ``limiter.depends(...)``
(``Depends`` form) and ``polylimit.fastapi.PolylimitMiddleware`` (a rules file for a whole app).
Django (``polylimit.django``), Flask (``polylimit.flask``) and grpcio servers (``polylimit.grpc``,
``polylimit.grpc.aio``) have their own modules.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Optional, Sequence, TypedDict, Union

from . import _polylimit
from ._polylimit import (
    CircuitBreaker as _NativeBreaker,
    ClosedError,
    ConfigError,
    Decision,
    InternalError,
    Lease,
    Limiter as _NativeLimiter,
    Outcome,
    Permit,
    PolylimitError,
    StoreError,
    StoreUnavailableError,
    __version__,
    effective_config,
)

__all__ = [
    "CircuitBreaker",
    "CircuitOpenError",
    "ClosedError",
    "ConfigError",
    "Decision",
    "InternalError",
    "Lease",
    "Limiter",
    "Outcome",
    "Override",
    "PolicyLimit",
    "Permit",
    "Policy",
    "PolylimitError",
    "StoreError",
    "StoreUnavailableError",
    "__version__",
    "effective_config",
]

# A forked child (gunicorn --preload, multiprocessing's fork) inherits the
# tokio runtime without its threads: it builds its own on first use.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_polylimit._after_fork_in_child)


class Override(TypedDict):
    """A per-key override in force, as ``Limiter.set_override`` / ``get_override`` return it."""

    policy: str
    key: str
    rate: str
    burst: int
    limit: int
    expires_at_ms: Optional[int]


class PolicyLimit(TypedDict):
    """A policy-wide limit in force, as ``Limiter.set_limit`` / ``get_limit`` return it."""

    policy: str
    rate: str
    burst: int
    limit: int
    expires_at_ms: Optional[int]


@dataclass(frozen=True)
class Policy:
    """A policy as a typed object (SPEC §2); ``None`` fields take the core's default. ``rate`` for every
    algorithm but ``concurrency``, which takes ``limit`` (requests in flight) and ``lease``."""

    rate: Optional[str] = None
    algorithm: str = "token_bucket"
    burst: Optional[int] = None
    refill: Optional[str] = None
    mode: Optional[str] = None
    max_delay: Optional[str] = None
    on_store_error: Optional[str] = None
    penalty: Optional[Dict[str, Any]] = None
    name: Optional[str] = None
    limit: Optional[int] = None
    lease: Optional[str] = None
    sync: Optional[Dict[str, Any]] = None

    def to_dict(self) -> Dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


class Limiter(_NativeLimiter):
    """A rate limiter: ``Limiter(policy=..., store="memory", **options)``.

    Every argument is one option of the core (docs/reference/options.md): ``policy``/``policies``
    with ``key`` (one rule, default ``["ip"]``), or ``rules``/``rules_file`` (a rules document whose
    fields the other options override), and the store, breaker and HTTP options. Durations are text
    (``"250ms"``), seconds, or a ``timedelta``. Bad values raise ``ConfigError``;
    ``polylimit.effective_config(...)`` shows what the same arguments resolve to.
    ``on_anomaly=`` (a function or an async function) receives the alerts of ``adaptive`` policies.
    """

    @classmethod
    def from_file(cls, path: Any, **options: Any) -> "Limiter":
        """A limiter from a rules file (YAML or JSON, SPEC §6); ``options`` override the file's, e.g.
        ``trusted_proxies=["10.0.0.0/8", "unix"]``, ``forwarded_header="forwarded"``."""
        return cls(rules_file=str(path), **options)

    @classmethod
    def from_rules(cls, rules: Union[str, Dict[str, Any]], **options: Any) -> "Limiter":
        """A limiter from rules given as YAML/JSON text or a dict."""
        return cls(rules=rules, **options)

    def limit(
        self,
        key: Union[None, str, Sequence[str], Callable[[Any], Optional[str]]] = None,
        *,
        policy: Optional[str] = None,
        cost: Union[int, Callable[[Any], Any]] = 1,
        per_route: bool = True,
        count: Union[None, str, int, Sequence[Union[str, int]]] = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator for a FastAPI route (placed under ``@app.get(...)``), checked through this limiter
        (its state, metrics and ``close()``); see ``polylimit.fastapi``."""
        from .fastapi import limit

        return limit(self, key, policy=policy, cost=cost, per_route=per_route, count=count)

    def depends(
        self,
        key: Union[None, str, Sequence[str], Callable[[Any], Optional[str]]] = None,
        *,
        policy: Optional[str] = None,
        cost: Union[int, Callable[[Any], Any]] = 1,
        per_route: bool = True,
        count: Union[None, str, int, Sequence[Union[str, int]]] = None,
    ) -> Callable[..., Any]:
        """A dependency for ``Depends(...)``, checked through this limiter: raises ``RateLimitExceeded``
        when refused."""
        from .fastapi import depends

        return depends(self, key, policy=policy, cost=cost, per_route=per_route, count=count)

    async def __aenter__(self) -> "Limiter":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


def _deliver_anomaly(callback: Callable[[Dict[str, Any]], Any], event: Dict[str, Any], loop: Any, count_error: Callable[[], None]) -> None:
    """Runs an ``on_anomaly`` callback on a worker thread (called by the core, never on a request's
    path). A coroutine function runs on the event loop the limiter was built in (else in its own
    loop on that thread); an exception is counted in ``polylimit_anomaly_callback_errors_total``."""
    import asyncio

    try:
        result = callback(event)
        if not inspect.isawaitable(result):
            return

        async def run() -> Any:
            return await result

        if loop is not None and not loop.is_closed():
            future = asyncio.run_coroutine_threadsafe(run(), loop)

            def done(f: Any) -> None:
                if f.cancelled() or f.exception() is not None:
                    count_error()

            future.add_done_callback(done)
        else:
            asyncio.run(run())
    except BaseException:
        count_error()


class CircuitOpenError(PolylimitError):
    """Raised by ``CircuitBreaker.call`` when the breaker is open and there is no fallback."""


class CircuitBreaker(_NativeBreaker):
    """``CircuitBreaker(threshold=5, cooldown=30.0, half_open_max=3)`` for your own downstream calls."""

    def call(self, fn: Callable[..., Any], *args: Any, fallback: Optional[Callable[[BaseException], Any]] = None, **kwargs: Any) -> Any:
        """Calls ``fn(*args, **kwargs)`` through the breaker. An exception or an open breaker goes to
        ``fallback(exc)`` when given (else it is raised). If ``fn`` returns an awaitable, ``call``
        returns a coroutine that awaits it under the same permit. A call that does not finish
        (cancelled, interrupted, ``SystemExit``) counts as failed and its exception propagates."""
        permit = self.acquire()
        if permit is None:
            return self._refuse(fallback, CircuitOpenError("circuit breaker is open"), fn)
        settled = False
        try:
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - reported to the breaker, then re-raised or handed over
                settled = True
                self.failure(permit)
                if fallback is None:
                    raise
                return fallback(exc)
            settled = True
            if inspect.isawaitable(result):
                return self._finish(result, permit, fallback)
            self.success(permit)
            return result
        finally:
            if not settled:
                # A BaseException (KeyboardInterrupt, SystemExit, GeneratorExit): no success.
                self.failure(permit)

    def _refuse(self, fallback: Any, exc: BaseException, fn: Any) -> Any:
        if inspect.iscoroutinefunction(fn):

            async def refused() -> Any:
                if fallback is None:
                    raise exc
                out = fallback(exc)
                return await out if inspect.isawaitable(out) else out

            return refused()
        if fallback is None:
            raise exc
        return fallback(exc)

    async def _finish(self, awaitable: Any, permit: Permit, fallback: Any) -> Any:
        settled = False
        try:
            try:
                result = await awaitable
            except Exception as exc:  # noqa: BLE001
                settled = True
                self.failure(permit)
                if fallback is None:
                    raise
                out = fallback(exc)
                return await out if inspect.isawaitable(out) else out
            settled = True
            self.success(permit)
            return result
        finally:
            if not settled:
                # Cancelled (asyncio.CancelledError is no Exception) or interrupted: a failure,
                # so an abandoned half-open probe never holds its slot.
                self.failure(permit)
