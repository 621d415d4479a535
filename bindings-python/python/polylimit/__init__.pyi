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
# `count`: "all", "failed", "successful", a status class ("4xx") or code (401), or a list of them.
CountSpec = Union[str, int, Sequence[Union[str, int]]]

class Override(TypedDict):
    """A per-key override in force (``Limiter.set_override``)."""

    policy: str
    key: str
    rate: str
    burst: int
    limit: int
    expires_at_ms: Optional[int]

class Policy:
    """One limit: a rate and algorithm, with its burst, mode, fallback, penalty and lease options."""

    rate: Optional[str]
    algorithm: str
    burst: Optional[int]
    refill: Optional[str]
    mode: Optional[str]
    max_delay: Optional[str]
    on_store_error: Optional[str]
    penalty: Optional[Dict[str, Any]]
    name: Optional[str]
    limit: Optional[int]
    lease: Optional[str]
    sync: Optional[Dict[str, Any]]
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
        cost: int = 1,
        per_route: bool = True,
        count: Optional[CountSpec] = None,
    ) -> Callable[[_F], _F]:
        """A decorator that limits a FastAPI/Starlette route (answers 429 when limited)."""
    def depends(
        self,
        key: Optional[KeySpec] = None,
        *,
        policy: Optional[str] = None,
        cost: int = 1,
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
