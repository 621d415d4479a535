"""Plays tests/conformance/http through a framework adapter (Django, Flask): each request is a
real request of the framework, through the adapter's middleware, to a view that answers with the
status the vector completes it with (raises for ``"complete": null``). The runner compares the
answer the client gets (status, rate-limit headers in order, exact body), the shape-mode delay the
adapter waited, and the status the adapter settled the request with. The limiter is wrapped to
see its completions: settled at once for an in-step ``complete``, held for a later ``of`` step
and dropped for a request the vector never completes (as the API runner does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import polylimit
from conftest import unique_prefix
from test_conformance import load

RATE_HEADERS = ("x-ratelimit-", "ratelimit", "retry-after")


@dataclass
class Answer:
    """What the client got: None for ``status``/``body`` when the view answered."""

    status: Optional[int]
    headers: List[Tuple[str, str]]
    body: Optional[str]
    delay_ms: int = 0
    trailers: Optional[List[Tuple[str, str]]] = None  # a gRPC call's


def rate_headers(items: Any) -> List[Tuple[str, str]]:
    return [(k, v) for k, v in items if k.lower().startswith(RATE_HEADERS)]


@dataclass
class Recorder:
    """The limiter as the adapter sees it: every completion is recorded, not sent."""

    limiter: Any
    completions: List[Tuple[str, Optional[int]]] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.limiter, name)

    def complete_sync(self, token: str, status: Optional[int] = None) -> None:
        self.completions.append((token, status))

    async def complete(self, token: str, status: Optional[int] = None) -> None:
        self.completions.append((token, status))


# serve(recorder, request, view_status, raises) -> Answer. `request` is the vector's; the
# fields a framework request cannot carry (now_ms, route, user, …) reach the adapter's
# request_info through the runner's subclass.
Serve = Callable[[Recorder, Dict[str, Any], int, bool], Answer]


def decoded_by_the_server(request: Dict[str, Any]) -> bool:
    """A target with an escaped ``/`` or ``%``: WSGI and ASGI servers give apps the decoded path
    (``/api%2Fx`` is ``/api/x`` to Django's, Flask's and Starlette's routers, and to the rules), so
    the vectors that keep the escape are played through the API instead."""
    return any(escape in request.get("path", "").upper() for escape in ("%2F", "%25"))


def play(path: Path, store: str, serve: Serve, ok: int = 200,
         through_api: Callable[[Dict[str, Any]], bool] = lambda step: False) -> List[str]:
    """Plays every case of ``path``; ``ok`` is the status a view answers with when the vector does not
    complete the request; ``through_api(step)`` names the steps no adapter can play (besides peeks)."""
    failures: List[str] = []
    for case in load(path):
        where = f"{path.name}: {case['name']!r}"
        rules = dict({"timeout": "10s"}, **case["rules"], store=store, prefix=unique_prefix("fw"))
        recorder = Recorder(polylimit.Limiter.from_rules(rules))
        steps = case["requests"]
        # Each request's completion as the adapter settled it: (token, status), or None.
        settled: List[Optional[Tuple[str, Optional[int]]]] = []
        for i, step in enumerate(steps):
            if "of" in step:
                settled.append(None)
                done = settled[step["of"]]
                if done is None:
                    failures.append(f"{where} step {i}: request {step['of']} left no completion")
                    continue
                first = next(j for j, s in enumerate(steps) if s.get("of") == step["of"]) == i
                if first and "complete" not in steps[step["of"]] and done[1] != step["complete"]:
                    failures.append(f"{where} step {i}: the adapter settled request {step['of']} with {done[1]}, not {step['complete']}")
                recorder.limiter.complete_sync(done[0], step["complete"])
                continue
            expect = step["expect"]
            want = Answer(expect["status"], [tuple(h) for h in expect["headers"]], expect["body"], expect.get("delay_ms", 0),
                          [tuple(h) for h in expect["trailers"]] if "trailers" in expect else None)
            # The status the view ends with: the one the vector completes the request with, now or later.
            later = [s["complete"] for s in steps[i + 1:] if s.get("of") == i]
            status = step["complete"] if "complete" in step else later[0] if later else ok
            if step.get("peek", False) or decoded_by_the_server(step["request"]) or through_api(step):
                # The API's answer, for the steps after it (no adapter peeks).
                decide = recorder.limiter.peek_request_sync if step.get("peek", False) else recorder.limiter.check_request_sync
                got = decide(step["request"])
                answer = Answer(got.status, got.headers, got.body, got.delay_ms,
                                [tuple(h) for h in got.trailers] if want.trailers is not None else None)
                done = [(got.completion, status)] if got.completion is not None and (later or "complete" in step) else []
            else:
                raises = status is None  # no response at all: the view raises
                answer = serve(recorder, step["request"], ok if raises else status, raises)
                if step["request"].get("method") == "HEAD" and answer.body == "":
                    want.body = ""  # a response to HEAD carries no body (Werkzeug's client drops it)
                if expect["status"] is None and raises:
                    want.headers = []  # the view raised: no response carries them
                done, recorder.completions[:] = list(recorder.completions), []
            if answer != want:
                failures.append(f"{where} request {i}: expected {want}, got {answer}")
            if len(done) > 1:
                failures.append(f"{where} request {i}: settled {len(done)} times")
            settled.append(done[0] if done else None)
            if "complete" in step:
                if len(done) != 1:
                    failures.append(f"{where} request {i}: {len(done)} completions, expected 1")
                    continue
                token, seen = done[0]
                if seen != step["complete"]:
                    failures.append(f"{where} request {i}: settled with {seen}, not {step['complete']}")
                recorder.limiter.complete_sync(token, step["complete"])
    return failures
