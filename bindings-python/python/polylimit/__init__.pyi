"""Type stubs for ``polylimit``."""

from datetime import timedelta
from os import PathLike
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Sequence, TypedDict, TypeVar, Union

from ._polylimit import (
    CircuitBreaker as _NativeBreaker,
    ClosedError as ClosedError,
    ConfigError as ConfigError,
    Decision as Decision,
    InternalError as InternalError,
    Lease as Lease,
    Limiter as _NativeLimiter,
    Outcome as Outcome,
    Permit as Permit,
    PolylimitError as PolylimitError,
    StoreError as StoreError,
    StoreUnavailableError as StoreUnavailableError,
    __version__ as __version__,
    effective_config as effective_config,
)

_F = TypeVar("_F", bound=Callable[..., Any])
KeySpec = Union[str, Sequence[str], Callable[[Any], Optional[str]]]
"""A rule's key: a dimension (``"ip"``, ``"user"``, ``"header:<name>"``, …), a list of them, or a function of the request."""
CountSpec = Union[str, int, Sequence[Union[str, int]]]
"""Which responses a rule charges: ``"all"``, ``"failed"``, ``"successful"``, a status class (``"4xx"``) or code (401), or a list of them."""

class PolicyLimit(TypedDict):
    """A policy-wide limit in force (``Limiter.set_limit``)."""

    policy: str
    """The name of the policy it applies to (every key of it)."""
    rate: str
    """The policy's rate while it is in force, as a policy's (``"100/min"``)."""
    burst: int
    """Its bucket capacity (the limit per window for window algorithms)."""
    limit: int
    """The ``limit`` of its decisions (as ``burst``)."""
    expires_at_ms: Optional[int]
    """When it ends (ms since the epoch, the store's clock); None: never."""

class Override(TypedDict):
    """A per-key override in force (``Limiter.set_override``)."""

    policy: str
    """The name of the policy it applies to."""
    key: str
    """The key it applies to."""
    rate: str
    """The key's rate, as a policy's (``"100/min"``)."""
    burst: int
    """The key's bucket capacity (the limit per window for window algorithms)."""
    limit: int
    """The ``limit`` of its decisions (as ``burst``)."""
    expires_at_ms: Optional[int]
    """When it ends (ms since the epoch, the store's clock); None: never."""

class Policy:
    """One limit: a rate and algorithm, with its burst, mode, fallback, penalty and lease options."""

    rate: Optional[str]
    """``"10/s"``, ``"100/min"``, ``"5/10s"``, ``"1000 per hour"`` (every algorithm but ``concurrency``)."""
    algorithm: str
    """``token_bucket`` (default), ``leaky_bucket``, ``gcra``, ``fixed_window``, ``sliding_window_log``, ``sliding_window_counter`` or ``concurrency``."""
    burst: Optional[int]
    """Bucket capacity for ``token_bucket``, ``leaky_bucket`` and ``gcra`` (default: the rate's count)."""
    refill: Optional[str]
    """``token_bucket``: ``continuous`` (default), or ``interval`` (whole tokens per elapsed period)."""
    mode: Optional[str]
    """``leaky_bucket``: ``police`` rejects the overflow (default), ``shape`` admits it with a delay."""
    max_delay: Optional[str]
    """Shape mode: the longest delay granted (default ``(burst-1)`` times the emission interval)."""
    on_store_error: Optional[str]
    """What decides while the store is down: ``local`` (default), ``fail_open`` or ``fail_closed``."""
    penalty: Optional[Dict[str, Any]]
    """Blocks a key after repeated denials: ``threshold``, ``within``, ``cooldowns``, ``forget_after``."""
    name: Optional[str]
    """The label in headers, metrics and store keys (default ``default``)."""
    limit: Optional[int]
    """``concurrency``: the most requests in flight per key."""
    lease: Optional[str]
    """``concurrency``: how long an unreleased slot is held (default ``"60s"``)."""
    sync: Optional[Dict[str, Any]]
    """Admit from a local share taken from the store at most once per ``interval`` per key: ``interval``, ``share``."""
    def __init__(
        self,
        rate: Optional[str] = None,
        algorithm: str = "token_bucket",
        burst: Optional[int] = None,
        refill: Optional[str] = None,
        mode: Optional[str] = None,
        max_delay: Optional[str] = None,
        on_store_error: Optional[str] = None,
        penalty: Optional[Dict[str, Any]] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
        lease: Optional[str] = None,
        sync: Optional[Dict[str, Any]] = None,
    ) -> None: ...
    def to_dict(self) -> Dict[str, Any]:
        """The policy as the dict the core reads."""

class Limiter(_NativeLimiter):
    """A rate limiter: policies over a store (memory unless ``store`` names Redis), built once and shared."""

    def __new__(
        cls,
        policy: Union[Policy, Mapping[str, Any], None] = None,
        store: Optional[str] = None,
        *,
        policies: Any = None,
        key: Optional[Sequence[str]] = None,
        rules: Union[str, Mapping[str, Any], None] = None,
        rules_file: Union[str, "PathLike[str]", None] = None,
        timeout: Union[str, float, timedelta, None] = None,
        connect_timeout: Union[str, float, timedelta, None] = None,
        cooldown: Union[str, float, timedelta, None] = None,
        on_anomaly: Optional[Callable[[Dict[str, Any]], Any]] = None,
        **options: Any,
    ) -> "Limiter": ...
    @classmethod
    def from_file(cls, path: Union[str, "PathLike[str]"], **options: Any) -> "Limiter":
        """Builds a limiter from a rules file (YAML or JSON)."""
    @classmethod
    def from_rules(cls, rules: Union[str, Mapping[str, Any]], **options: Any) -> "Limiter":
        """Builds a limiter from rules given as a string or a mapping."""
    def limit(
        self,
        key: Optional[KeySpec] = None,
        *,
        policy: Optional[str] = None,
        cost: Union[int, Callable[[Any], Any]] = 1,
        per_route: bool = True,
        count: Optional[CountSpec] = None,
    ) -> Callable[[_F], _F]:
        """A decorator that limits a FastAPI/Starlette route (answers 429 when limited)."""
    def depends(
        self,
        key: Optional[KeySpec] = None,
        *,
        policy: Optional[str] = None,
        cost: Union[int, Callable[[Any], Any]] = 1,
        per_route: bool = True,
        count: Optional[CountSpec] = None,
    ) -> Callable[..., Awaitable[Optional[Outcome]]]:
        """A FastAPI dependency that limits the routes using it."""
    async def __aenter__(self) -> "Limiter": ...
    async def __aexit__(self, *exc: Any) -> None: ...

class CircuitOpenError(PolylimitError):
    """Raised by ``CircuitBreaker.call`` while the breaker is open and no fallback is given."""

class CircuitBreaker(_NativeBreaker):
    """A circuit breaker for calls to anything: opens after failures, tries again after ``cooldown``."""

    def call(
        self, fn: Callable[..., Any], *args: Any, fallback: Optional[Callable[[BaseException], Any]] = None, **kwargs: Any
    ) -> Any:
        """Calls ``fn`` through the breaker; when open, calls ``fallback`` or raises CircuitOpenError."""
