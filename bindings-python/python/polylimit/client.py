"""Client helpers that honour ``Retry-After``.

    import httpx
    from polylimit.client import RetryTransport
    client = httpx.Client(transport=RetryTransport(max_retries=3, max_wait=30))

On a response whose status is in ``statuses`` (429 and 503 by default) the
request is sent again (a status other than 429, which may come after the app
processed the request, only for an idempotent method: GET, HEAD, OPTIONS, PUT,
DELETE, unless ``retry_non_idempotent=True``) after the response's ``Retry-After`` (whole seconds, or
an HTTP-date), plus a random jitter of up to ``jitter`` times that wait (never
earlier than the server asked). It gives up and returns the last response when:

- the response has no ``Retry-After``, or one that is neither whole seconds
  nor an HTTP-date (the server did not say when: no guessing);
- ``Retry-After`` is longer than ``max_wait`` (waiting less would only be
  refused again);
- ``max_retries`` retries were made, or the wait would end more than
  ``budget`` seconds after the first attempt;
- the request's body cannot be sent again (a streaming body).

The wait is ``sleep`` (``time.sleep``, or ``asyncio.sleep`` for the async
transport: cancelling the task cancels the wait). The rules (the parsing of
``Retry-After`` and the wait) are polylimit's core, which every language's helper
calls: ``polylimit/client`` (JavaScript), ``bindings-go/client`` (Go), the JVM's
``RetryAfterClient``; this module keeps only the transports, sleeps and clock.
"""

from __future__ import annotations

import asyncio
import random as _random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Optional, Tuple

from . import _polylimit

__all__ = ["RetryPolicy", "parse_retry_after", "RetryTransport", "AsyncRetryTransport"]

# The core's defaults (core/src/client.rs), in Python's names and seconds.
_DEFAULTS: Mapping[str, Any] = _polylimit.retry_defaults()
DEFAULT_STATUSES: Tuple[int, ...] = tuple(_DEFAULTS["statuses"])


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def parse_retry_after(value: Optional[str], now: float) -> Optional[float]:
    """Seconds to wait from ``now`` (epoch seconds) per a ``Retry-After`` value: whole
    seconds (digits only), or an HTTP-date (IMF-fixdate, and the obsolete RFC 850 and
    asctime forms; a date in the past is 0). None for a missing or unreadable value."""
    ms = _polylimit.parse_retry_after(value, _ms(now))
    return None if ms is None else ms / 1000


@dataclass
class RetryPolicy:
    """When to retry and how long to wait; shared by the transports. A bad option raises
    ``ValueError`` naming it and its value."""

    max_retries: int = _DEFAULTS["max_retries"]
    """The most retries of one request (default 3)."""
    max_wait: float = _DEFAULTS["max_wait"]
    """The longest ``Retry-After`` waited, in seconds (default 60); a longer one returns the response."""
    budget: float = _DEFAULTS["budget"]
    """Seconds from the first attempt past which no wait may end (default 120)."""
    jitter: float = _DEFAULTS["jitter"]
    """Up to this fraction of the wait is added at random, from 0 to 1 (default 0.1)."""
    statuses: Tuple[int, ...] = DEFAULT_STATUSES
    """The statuses retried (default 429 and 503)."""
    retry_non_idempotent: bool = _DEFAULTS["retry_non_idempotent"]
    """Retry POST, PATCH… on a status other than 429 too (default False)."""
    clock: Callable[[], float] = field(default=time.time, repr=False)
    """The wall clock in epoch seconds (default ``time.time``; tests inject one)."""
    random: Callable[[], float] = field(default=_random.random, repr=False)
    """Gives a number in [0, 1) for the jitter (default ``random.random``)."""

    def __post_init__(self) -> None:
        self.statuses = tuple(int(s) for s in self.statuses)
        self._check()

    def _check(self) -> None:
        self._options = _polylimit.RetryOptions(self.max_retries, self.max_wait, self.budget, self.jitter,
                                                list(self.statuses), bool(self.retry_non_idempotent))

    def __setattr__(self, name: str, value: Any) -> None:
        # An option changed after construction is checked (and used) at once, as it was read live before.
        if name not in _OPTION_FIELDS or "_options" not in self.__dict__:
            return super().__setattr__(name, value)
        before = getattr(self, name)
        super().__setattr__(name, tuple(int(s) for s in value) if name == "statuses" else value)
        try:
            self._check()
        except ValueError:
            super().__setattr__(name, before)  # a refused value is not kept
            raise

    def wait(self, status: int, headers: Mapping[str, str], retries: int, started: float,
             method: str = "GET") -> Optional[float]:
        """Seconds to wait before the next attempt, or None to give up and return the response.
        ``retries``: retries made so far; ``started``: the first attempt's ``clock()``;
        ``method``: the request's (a 503 is retried only for an idempotent one by default)."""
        ms = self._options.wait_ms(method, status, headers.get("retry-after"), retries, _ms(started), _ms(self.clock()),
                                   self.random())
        return None if ms is None else ms / 1000


_OPTION_FIELDS = frozenset({"max_retries", "max_wait", "budget", "jitter", "statuses", "retry_non_idempotent"})


def _policy(policy: Optional[RetryPolicy], options: Any) -> RetryPolicy:
    if policy is not None and options:
        raise TypeError("give either policy= or the options, not both")
    return policy if policy is not None else RetryPolicy(**options)


try:
    import httpx
except ImportError:  # pragma: no cover - the transports need httpx, the rest does not
    httpx = None  # type: ignore[assignment]


def _replayable(request: Any) -> bool:
    """A body httpx holds in memory (or none) can be sent again; a generator cannot."""
    return isinstance(request.stream, httpx.ByteStream)


def _require_httpx() -> None:
    if httpx is None:
        raise ImportError("polylimit.client's transports need httpx (pip install httpx)")


class RetryTransport(httpx.BaseTransport if httpx else object):  # type: ignore[misc]
    """An httpx transport honouring ``Retry-After`` around ``transport``
    (default ``httpx.HTTPTransport()``). Options: see :class:`RetryPolicy`;
    ``sleep`` (default ``time.sleep``) waits."""

    def __init__(self, transport: Any = None, *, policy: Optional[RetryPolicy] = None,
                 sleep: Callable[[float], None] = time.sleep, **options: Any) -> None:
        _require_httpx()
        self.transport = transport if transport is not None else httpx.HTTPTransport()
        """The transport that sends each attempt."""
        self.policy = _policy(policy, options)
        """When to retry and how long to wait."""
        self.sleep = sleep
        """Waits the given seconds."""

    def handle_request(self, request: "httpx.Request") -> "httpx.Response":
        """Sends ``request``, again after each retried response's ``Retry-After``; returns the last response."""
        replayable = _replayable(request)  # before sending: a read stream turns into bytes
        started = self.policy.clock()
        retries = 0
        while True:
            response = self.transport.handle_request(request)
            delay = self.policy.wait(response.status_code, response.headers, retries, started, request.method)
            if delay is None or not replayable:
                return response
            response.close()
            self.sleep(delay)
            retries += 1

    def close(self) -> None:
        """Closes the wrapped transport."""
        self.transport.close()


class AsyncRetryTransport(httpx.AsyncBaseTransport if httpx else object):  # type: ignore[misc]
    """The async form of :class:`RetryTransport` (default ``httpx.AsyncHTTPTransport()``,
    ``sleep`` default ``asyncio.sleep``: cancelling the request's task cancels the wait)."""

    def __init__(self, transport: Any = None, *, policy: Optional[RetryPolicy] = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, **options: Any) -> None:
        _require_httpx()
        self.transport = transport if transport is not None else httpx.AsyncHTTPTransport()
        """The transport that sends each attempt."""
        self.policy = _policy(policy, options)
        """When to retry and how long to wait."""
        self.sleep = sleep
        """Waits the given seconds (awaitable)."""

    async def handle_async_request(self, request: "httpx.Request") -> "httpx.Response":
        """Sends ``request``, again after each retried response's ``Retry-After``; returns the last response."""
        replayable = _replayable(request)  # before sending: a read stream turns into bytes
        started = self.policy.clock()
        retries = 0
        while True:
            response = await self.transport.handle_async_request(request)
            delay = self.policy.wait(response.status_code, response.headers, retries, started, request.method)
            if delay is None or not replayable:
                return response
            await response.aclose()
            await self.sleep(delay)
            retries += 1

    async def aclose(self) -> None:
        """Closes the wrapped transport."""
        await self.transport.aclose()
