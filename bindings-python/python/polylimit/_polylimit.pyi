"""Type stubs for the native module ``polylimit._polylimit``."""

from os import PathLike
from datetime import timedelta
from typing import Any, Awaitable, Callable, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union, final

from . import Override, PolicyLimit

__version__: str
"""The version of the installed package, as a string."""

Source = Literal["store", "local", "fail_open", "fail_closed", "penalty", "allowlist", "denylist", "adaptive"]
BreakerStateName = Literal["closed", "open", "half_open"]

class PolylimitError(Exception):
    """The base of every error polylimit raises; ``kind`` names which."""

    kind: str
    """Which error: ``config``, ``store_unavailable``, ``store``, ``closed`` or ``internal``."""

class ConfigError(PolylimitError):
    """A bad option or rules file, found when the limiter is built; ``field`` and ``value`` name it."""

    field: str
    """The option at fault, e.g. ``policy.rate``."""
    value: str
    """The value at fault, as given."""

class StoreUnavailableError(PolylimitError):
    """The store could not be reached and the policy fails closed (``on_store_error``)."""

class StoreError(PolylimitError):
    """The store answered with an error; ``key`` is the store key it concerned."""

    key: str
    """The store key the error concerns."""

class ClosedError(PolylimitError):
    """A call on a limiter after ``close()``."""
class InternalError(PolylimitError):
    """A bug in polylimit (a panic caught at the boundary); please report it."""

@final
class Decision:
    """One policy's answer for one key: allowed or not, and the numbers behind it."""

    @property
    def allowed(self) -> bool:
        """Whether the request may go ahead (also the decision's truth value)."""
    @property
    def limit(self) -> int:
        """The policy's limit: the burst, or the window's count."""
    @property
    def remaining(self) -> int:
        """How many more requests of cost 1 would be allowed now."""
    @property
    def reset_after_ms(self) -> int:
        """Milliseconds until the key is back to its full limit."""
    @property
    def retry_after_ms(self) -> Optional[int]:
        """When denied, milliseconds until a retry can succeed; None when allowed."""
    @property
    def delay_ms(self) -> int:
        """For a policy in delay mode, how long to wait before going ahead (0 otherwise)."""
    @property
    def source(self) -> Source:
        """What answered: the store, a local cache, a fallback, a penalty, an allow/deny list or adaptive."""
    def __bool__(self) -> bool: ...
    def to_dict(self) -> Dict[str, Any]:
        """The decision as a plain dict (for logging or JSON)."""

@final
class Outcome:
    """The answer for a whole request: the status, headers and body to send when limited."""

    @property
    def status(self) -> Optional[int]:
        """The status to refuse with (429; 503 when the store fails closed; 403 for a denied key), or None when the request may go ahead."""
    @property
    def headers(self) -> List[Tuple[str, str]]:
        """The rate-limit headers to add to the response, as (name, value) pairs."""
    @property
    def body(self) -> Optional[str]:
        """The body to answer with when limited, or None (a gRPC call's status message)."""
    @property
    def trailers(self) -> List[Tuple[str, str]]:
        """A gRPC call's trailing metadata (``retry-after`` on a refusal); empty for HTTP."""
    @property
    def delay_ms(self) -> int:
        """How long to wait before handling the request (delay mode), else 0."""
    @property
    def completion(self) -> Optional[str]:
        """A token for ``Limiter.complete`` when a rule counts after the response, else None."""
    @property
    def decisions(self) -> List[Dict[str, Any]]:
        """Every rule's decision behind this outcome, as dicts."""
    def to_dict(self) -> Dict[str, Any]:
        """The outcome as a plain dict."""

@final
class Lease:
    """The slots one allowed ``Limiter.acquire`` took (a concurrency policy's leases). Released by
    ``release``/``release_sync``, on leaving ``async with``/``with`` (exceptions included), or when
    collected; only the first release gives them back (it returns how many leases were live)."""

    def release(self, now_ms: Optional[int] = None) -> Awaitable[int]:
        """Gives the leases back (awaitable); returns how many were live."""
    def release_sync(self, now_ms: Optional[int] = None) -> int:
        """Gives the leases back, blocking; returns how many were live."""
    @property
    def released(self) -> bool:
        """Whether the leases were already given back."""
    def __enter__(self) -> "Lease": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def __aenter__(self) -> Awaitable["Lease"]: ...
    def __aexit__(self, *exc: Any) -> Awaitable[None]: ...

@final
class RouteRule:
    """A per-route rule of the limiter that built it (``Limiter.route_rule``)."""

class Limiter:
    """The native limiter; use ``polylimit.Limiter``."""

    def __new__(
        cls,
        policy: Any = None,
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
    def check(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Awaitable[Decision]:
        """Counts ``cost`` against ``key`` under every policy and returns the strictest decision."""
    def check_sync(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Decision:
        """``check``, blocking the calling thread."""
    def check_all(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Awaitable[List[Decision]]:
        """Counts ``cost`` against ``key`` and returns every policy's decision."""
    def acquire(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Awaitable[Tuple[Decision, Optional[Lease]]]:
        """Like ``check``, and takes a concurrency policy's slots: returns the decision and the lease to release."""
    def acquire_sync(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Tuple[Decision, Optional[Lease]]:
        """``acquire``, blocking the calling thread."""
    def check_request(self, request: Mapping[str, Any]) -> Awaitable[Outcome]:
        """Checks a request (a mapping of method, path, headers, client address...) against the rules file."""
    def check_request_sync(self, request: Mapping[str, Any]) -> Outcome:
        """``check_request``, blocking the calling thread."""
    def route_rule(
        self,
        key: Optional[List[str]] = None,
        policy: Optional[str] = None,
        *,
        key_function: bool = False,
        per_route: bool = False,
        count: Union[str, int, Sequence[Union[str, int]], None] = None,
    ) -> RouteRule:
        """Builds a per-route rule once (key, policy, count) for ``check_route``."""
    def check_route(self, request: Mapping[str, Any], rule: RouteRule) -> Awaitable[Outcome]:
        """Checks a request against one route rule (what ``limit``/``depends`` use)."""
    def check_route_sync(self, request: Mapping[str, Any], rule: RouteRule) -> Outcome:
        """``check_route``, blocking the calling thread."""
    def peek(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Awaitable[Decision]:
        """The decision ``check`` would give, without counting anything."""
    def peek_sync(self, key: str, cost: int = 1, now_ms: Optional[int] = None) -> Decision:
        """``peek``, blocking the calling thread."""
    def peek_request(self, request: Mapping[str, Any]) -> Awaitable[Outcome]:
        """The outcome ``check_request`` would give, without counting anything."""
    def peek_request_sync(self, request: Mapping[str, Any]) -> Outcome:
        """``peek_request``, blocking the calling thread."""
    def complete(
        self, token: str, status: Optional[int] = None, cost: Optional[int] = None, now_ms: Optional[int] = None
    ) -> Awaitable[None]:
        """Counts a request after its response, given the outcome's ``completion`` token and the status;
        ``cost``: its actual cost, the difference from its reservation given back or charged (a bad
        one raises ``ConfigError`` naming ``cost`` once the request is completed without it)."""
    def complete_sync(
        self, token: str, status: Optional[int] = None, cost: Optional[int] = None, now_ms: Optional[int] = None
    ) -> None:
        """``complete``, blocking the calling thread."""
    def reset(self, key: str) -> Awaitable[None]:
        """Forgets everything counted for ``key`` under every policy."""
    def reset_sync(self, key: str) -> None:
        """``reset``, blocking the calling thread."""
    def reset_request(self, request: Mapping[str, Any]) -> Awaitable[int]:
        """Forgets what the rules counted for this request's keys; returns how many were reset."""
    def reset_request_sync(self, request: Mapping[str, Any]) -> int:
        """``reset_request``, blocking the calling thread."""
    def set_override(
        self,
        key: str,
        policy: Optional[str] = None,
        rate: Optional[str] = None,
        burst: Optional[int] = None,
        ttl: Union[str, float, timedelta, None] = None,
        now_ms: Optional[int] = None,
    ) -> Awaitable[Override]:
        """Gives ``key`` its own rate/burst under a policy, for ``ttl`` or until removed."""
    def set_override_sync(
        self,
        key: str,
        policy: Optional[str] = None,
        rate: Optional[str] = None,
        burst: Optional[int] = None,
        ttl: Union[str, float, timedelta, None] = None,
        now_ms: Optional[int] = None,
    ) -> Override:
        """``set_override``, blocking the calling thread."""
    def get_override(
        self, key: str, policy: Optional[str] = None, now_ms: Optional[int] = None
    ) -> Awaitable[Optional[Override]]:
        """The override in force for ``key``, or None."""
    def get_override_sync(
        self, key: str, policy: Optional[str] = None, now_ms: Optional[int] = None
    ) -> Optional[Override]:
        """``get_override``, blocking the calling thread."""
    def remove_override(self, key: str, policy: Optional[str] = None) -> Awaitable[bool]:
        """Removes ``key``'s override; returns whether there was one."""
    def remove_override_sync(self, key: str, policy: Optional[str] = None) -> bool:
        """``remove_override``, blocking the calling thread."""
    def reload(self) -> Awaitable[None]:
        """Reads the rules file (or options) again and swaps the rules at once; a bad file raises ConfigError and keeps the old rules."""
    def reload_sync(self) -> None:
        """``reload``, blocking the calling thread."""
    def set_limit(
        self,
        policy: Optional[str] = None,
        rate: Optional[str] = None,
        burst: Optional[int] = None,
        ttl: Union[str, float, timedelta, None] = None,
        now_ms: Optional[int] = None,
    ) -> Awaitable[PolicyLimit]:
        """Gives every key of ``policy`` another rate/burst, for ``ttl`` or until removed (needs ``overrides=True``)."""
    def set_limit_sync(
        self,
        policy: Optional[str] = None,
        rate: Optional[str] = None,
        burst: Optional[int] = None,
        ttl: Union[str, float, timedelta, None] = None,
        now_ms: Optional[int] = None,
    ) -> PolicyLimit:
        """``set_limit``, blocking the calling thread."""
    def get_limit(self, policy: Optional[str] = None, now_ms: Optional[int] = None) -> Awaitable[Optional[PolicyLimit]]:
        """The policy-wide limit in force for ``policy``, or None."""
    def get_limit_sync(self, policy: Optional[str] = None, now_ms: Optional[int] = None) -> Optional[PolicyLimit]:
        """``get_limit``, blocking the calling thread."""
    def remove_limit(self, policy: Optional[str] = None) -> Awaitable[bool]:
        """Removes ``policy``'s policy-wide limit; returns whether there was one."""
    def remove_limit_sync(self, policy: Optional[str] = None) -> bool:
        """``remove_limit``, blocking the calling thread."""
    def metrics_text(self) -> str:
        """The limiter's metrics in the Prometheus text format."""
    def metrics_snapshot(self) -> Dict[str, Any]:
        """Every metric family, read now: ``{"start_unix_nanos": int, "families": [{"name",
        "help", "kind": "counter" | "gauge" | "histogram", "points": [{"labels": {..}, "value": int}
        or {"labels", "bounds", "bucket_counts", "sum", "count"}]}]}``; the Prometheus text is
        rendered from it, and ``polylimit.otel`` bridges it into OpenTelemetry."""
    def close(self) -> None:
        """Closes the limiter and its store connections; later calls raise ClosedError."""
    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
    @property
    def breaker_state(self) -> BreakerStateName:
        """The store circuit breaker's state: closed, open or half_open."""
    @property
    def policy_names(self) -> List[str]:
        """The names of the limiter's policies, in order."""

@final
class Permit:
    """A circuit breaker's permission for one call; report it with ``success`` or ``failure``."""

class CircuitBreaker:
    """The native circuit breaker; use ``polylimit.CircuitBreaker``."""

    def __new__(cls, threshold: Optional[float] = None, cooldown: Union[float, str, None] = None, half_open_max: Optional[float] = None) -> "CircuitBreaker": ...
    def acquire(self) -> Optional[Permit]:
        """A permit for one call, or None while the breaker is open."""
    def success(self, permit: Permit) -> None:
        """Reports that the permitted call succeeded."""
    def failure(self, permit: Permit) -> None:
        """Reports that the permitted call failed."""
    @property
    def state(self) -> BreakerStateName:
        """The breaker's state: closed, open or half_open."""
    @property
    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial call through (0 otherwise)."""

def effective_config(
    policy: Any = None,
    store: Optional[str] = None,
    *,
    policies: Any = None,
    key: Optional[Sequence[str]] = None,
    rules: Union[str, Mapping[str, Any], None] = None,
    rules_file: Union[str, "PathLike[str]", None] = None,
    timeout: Union[str, float, timedelta, None] = None,
    connect_timeout: Union[str, float, timedelta, None] = None,
    cooldown: Union[str, float, timedelta, None] = None,
    **options: Any,
) -> Dict[str, Any]:
    """The configuration a Limiter built from these arguments would use, with every default filled in."""
def _after_fork_in_child() -> None: ...
def _read_records(batch: bytes) -> List[Tuple[int, Any]]: ...

@final
class RetryOptions:
    """polylimit.client's options, checked by the core (ValueError naming the field and value)."""
    def __new__(cls, max_retries: float, max_wait: float, budget: float, jitter: float,
                statuses: Sequence[int], retry_non_idempotent: bool = False) -> "RetryOptions": ...
    def wait_ms(self, method: str, status: int, retry_after: Optional[str], retries: int, started_ms: int, now_ms: int,
                random: float) -> Optional[int]: ...

def parse_retry_after(value: Optional[str], now_ms: int) -> Optional[int]: ...
def retry_defaults() -> Dict[str, Any]: ...
def ended_status(status: int, handler_answered: bool, handler_failed: bool, client_gone: bool) -> Optional[int]: ...
