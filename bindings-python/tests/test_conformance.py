"""Every vector in $POLYLIMIT_VECTORS (and its http/, cost/, limits/ and
concurrency/ directories) through the public API, on the memory store, a real Redis and a real Redis Cluster. Unknown fields and
unreadable files fail; nothing is skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
from conftest import unique_prefix, vectors_dir

import polylimit

CASE_FIELDS = {"name", "description", "policy", "steps"}
STEP_FIELDS = {"now_ms", "key", "cost", "peek", "expect"}
EXPECT_FIELDS = {"allowed", "remaining", "reset_after_ms", "retry_after_ms", "limit", "delay_ms", "source"}
EXPECT_REQUIRED = {"allowed", "remaining", "reset_after_ms", "retry_after_ms"}
HTTP_CASE_FIELDS = {"name", "description", "rules", "requests"}
HTTP_STEP_FIELDS = {"request", "peek", "expect", "complete", "actual_cost", "at_ms"}
# A step that completes an earlier request (`of`: its index) with a status
# (cost/: and the actual cost, at the completion's clock).
HTTP_LATER_FIELDS = {"complete", "of", "actual_cost", "at_ms"}
HTTP_EXPECT_FIELDS = {"status", "headers", "body", "delay_ms"}
# limits/: steps with no request that set, read or remove a policy-wide limit
# or set a per-key override, with what each returns (tests/conformance/limits/README.md).
LIMIT_STEPS = {
    "set_limit": ({"policy", "rate", "burst", "ttl_ms", "now_ms"}, "expect_limit"),
    "get_limit": ({"policy"}, "expect_limit"),
    "remove_limit": ({"policy"}, "expect_removed"),
    "set_override": ({"key", "policy", "rate", "burst", "ttl_ms", "now_ms"}, "expect_override"),
}


async def play_limit_step(limiter: "polylimit.Limiter", where: str, step: Dict[str, Any]) -> Any:
    """Plays a limits/ step (exactly one kind and its expectation, nothing else);
    returns a failure text, or None when it returned what it expects."""
    kinds = [k for k in LIMIT_STEPS if k in step]
    assert len(kinds) == 1, f"{where}: more than one step kind {kinds}"
    kind = kinds[0]
    allowed, expect_field = LIMIT_STEPS[kind]
    check_fields(where, step, {kind, expect_field}, {kind, expect_field})
    args = step[kind]
    check_fields(f"{where} {kind}", args, allowed, {"key", "rate"} & allowed)
    ttl = args["ttl_ms"] / 1000 if "ttl_ms" in args else None
    if kind == "set_limit":
        got = await limiter.set_limit(
            args.get("policy"), rate=args["rate"], burst=args.get("burst"), ttl=ttl, now_ms=args.get("now_ms")
        )
    elif kind == "get_limit":
        got = await limiter.get_limit(args.get("policy"))  # at the store's clock
    elif kind == "remove_limit":
        got = await limiter.remove_limit(args.get("policy"))
    else:
        got = await limiter.set_override(
            args["key"],
            args.get("policy"),
            rate=args["rate"],
            burst=args.get("burst"),
            ttl=ttl,
            now_ms=args.get("now_ms"),
        )
    want = step[expect_field]
    got = dict(got) if isinstance(got, dict) else got
    if got != want or type(got) is not type(want):
        return f"{where}: {kind}: expected {want!r}, got {got!r}"
    return None


def files(sub: str) -> List[Path]:
    directory = vectors_dir() / sub
    paths = sorted(p for p in directory.iterdir() if p.suffix == ".json")  # unreadable dir: collection error
    assert paths, f"no vectors in {directory}"
    return paths


def load(path: Path) -> List[Dict[str, Any]]:
    data = json.loads(path.read_text())
    assert set(data) == {"cases"}, f"{path.name}: unknown top-level fields {set(data) - {'cases'}}"
    assert data["cases"], f"{path.name}: no cases"
    names = [c.get("name") for c in data["cases"]]
    assert len(set(names)) == len(names), f"{path.name}: duplicate case names"
    return data["cases"]


def check_fields(where: str, obj: Dict[str, Any], allowed: set, required: set = frozenset()) -> None:
    unknown = set(obj) - allowed
    assert not unknown, f"{where}: unknown fields {sorted(unknown)}"
    missing = set(required) - set(obj)
    assert not missing, f"{where}: missing fields {sorted(missing)}"


@pytest.mark.parametrize("path", files(""), ids=lambda p: p.stem)
def test_vectors(path: Path, vector_store: str) -> None:
    store = vector_store
    failures = []
    steps = 0
    for case in load(path):
        where = f"{path.name}: {case.get('name')!r}"
        check_fields(where, case, CASE_FIELDS, {"name", "policy", "steps"})
        assert case["steps"], f"{where}: no steps"
        # A generous timeout: the vectors pin decisions, and a loaded machine must not
        # turn a slow Redis answer into a fallback one.
        limiter = polylimit.Limiter(policy=case["policy"], store=store, prefix=unique_prefix("conf"), timeout="10s")
        for i, step in enumerate(case["steps"]):
            check_fields(f"{where} step {i}", step, STEP_FIELDS, {"now_ms", "expect"})
            expect = step["expect"]
            check_fields(f"{where} step {i} expect", expect, EXPECT_FIELDS, EXPECT_REQUIRED)
            # A peek step: the decision a check would get, with nothing charged.
            decide = limiter.peek_sync if step.get("peek", False) else limiter.check_sync
            got = decide(step.get("key", "k"), cost=step.get("cost", 1), now_ms=step["now_ms"])
            steps += 1
            want = {k: expect[k] for k in EXPECT_REQUIRED}
            want["delay_ms"] = expect.get("delay_ms", 0)
            for opt in ("limit", "source"):
                if opt in expect:
                    want[opt] = expect[opt]
            have = {k: v for k, v in got.to_dict().items() if k in want}
            if got.source not in ("store", "penalty"):  # a fallback would hide the store
                failures.append(f"{where} step {i}: decided by {got.source}, not the store")
            if have != want:
                failures.append(f"{where} step {i} (now_ms {step['now_ms']}): expected {want}, got {have}")
    assert steps > 0
    assert not failures, f"{len(failures)} mismatches on {store}:\n" + "\n".join(failures)


@pytest.mark.parametrize("path", files("http") + files("cost") + files("limits"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_http_vectors(path: Path, vector_store: str) -> None:
    """Through the same call the middleware makes (``Limiter.check_request``, awaited)."""
    import asyncio

    store = vector_store

    async def play() -> List[str]:
        failures = []
        for case in load(path):
            where = f"{path.name}: {case.get('name')!r}"
            check_fields(where, case, HTTP_CASE_FIELDS, {"name", "rules", "requests"})
            assert case["requests"], f"{where}: no requests"
            rules = dict({"timeout": "10s"}, **case["rules"], store=store, prefix=unique_prefix("http"))
            limiter = polylimit.Limiter.from_rules(rules)
            tokens: List[Any] = []
            for i, step in enumerate(case["requests"]):
                if any(kind in step for kind in LIMIT_STEPS):
                    tokens.append(None)
                    failure = await play_limit_step(limiter, f"{where} step {i}", step)
                    if failure:
                        failures.append(failure)
                    continue
                if "of" in step:
                    # The completion of an earlier request, now (what a middleware does after the response).
                    check_fields(f"{where} step {i}", step, HTTP_LATER_FIELDS, {"complete", "of"})
                    token = tokens[step["of"]]
                    tokens.append(None)
                    if token is None:
                        failures.append(f"{where} step {i}: request {step['of']} has no completion token")
                    else:
                        await limiter.complete(token, step["complete"], step.get("actual_cost"), step.get("at_ms"))
                    continue
                check_fields(f"{where} request {i}", step, HTTP_STEP_FIELDS, {"request", "expect"})
                expect = step["expect"]
                check_fields(f"{where} request {i} expect", expect, HTTP_EXPECT_FIELDS, {"status", "headers", "body"})
                decide = limiter.peek_request if step.get("peek", False) else limiter.check_request
                outcome = await decide(step["request"])
                tokens.append(outcome.completion)
                if "complete" in step:
                    if outcome.completion is None:
                        failures.append(f"{where} request {i}: no completion token")
                    else:
                        at_ms = step.get("at_ms", step["request"].get("now_ms"))
                        await limiter.complete(outcome.completion, step["complete"], cost=step.get("actual_cost"), now_ms=at_ms)
                want = (expect["status"], [tuple(h) for h in expect["headers"]], expect["body"], expect.get("delay_ms", 0))
                fallback = [d for d in outcome.decisions if d["source"] in ("local", "fail_open", "fail_closed")]
                if fallback:
                    failures.append(f"{where} request {i}: decided by a fallback: {fallback}")
                have = (outcome.status, outcome.headers, outcome.body, outcome.delay_ms)
                if have != want:
                    failures.append(f"{where} request {i}: expected {want}, got {have}")
        return failures

    failures = asyncio.run(play())
    assert not failures, f"{len(failures)} mismatches on {store}:\n" + "\n".join(failures)


CONCURRENCY_STEP_FIELDS = {"now_ms", "key", "cost", "expect", "release", "released"}


@pytest.mark.parametrize("path", files("concurrency"), ids=lambda p: p.stem)
def test_concurrency_vectors(path: Path, store: str) -> None:
    """Acquire steps through ``Limiter.acquire``; a release step releases the ``Lease`` of the step it names."""
    import asyncio

    async def play() -> List[str]:
        failures = []
        steps = 0
        for case in load(path):
            where = f"{path.name}: {case.get('name')!r}"
            check_fields(where, case, CASE_FIELDS, {"name", "policy", "steps"})
            assert case["steps"], f"{where}: no steps"
            limiter = polylimit.Limiter(policy=case["policy"], store=store, prefix=unique_prefix("conc"), timeout="10s")
            leases: List[Any] = []
            for i, step in enumerate(case["steps"]):
                check_fields(f"{where} step {i}", step, CONCURRENCY_STEP_FIELDS, {"now_ms"})
                steps += 1
                at = f"{where} step {i} (now_ms {step['now_ms']})"
                if "release" in step:
                    check_fields(f"{where} step {i}", step, {"now_ms", "release", "released"}, {"release", "released"})
                    j = step["release"]
                    assert j < i and leases[j] is not None, f"{at}: `release` names an earlier allowed acquire"
                    released = await leases[j].release(now_ms=step["now_ms"])
                    if released != int(step["released"]):
                        failures.append(f"{at}: released {released}, expected {step['released']}")
                    leases.append(None)
                    continue
                expect = step["expect"]
                check_fields(f"{at} expect", expect, {"allowed", "remaining", "reset_after_ms", "retry_after_ms", "limit"}, EXPECT_REQUIRED)
                got, lease = await limiter.acquire(step.get("key", "k"), cost=step.get("cost", 1), now_ms=step["now_ms"])
                want = dict(expect, delay_ms=0, source="store")
                have = {k: v for k, v in got.to_dict().items() if k in want}
                if have != want:
                    failures.append(f"{at}: expected {want}, got {have}")
                if (lease is not None) != got.allowed:
                    failures.append(f"{at}: lease {lease!r} for {got!r}")
                leases.append(lease)
            if "polylimit_store_errors_total 0\n" not in limiter.metrics_text():
                failures.append(f"{where}: a store call failed")
        assert steps > 0
        return failures

    failures = asyncio.run(play())
    assert not failures, f"{len(failures)} mismatches on {store}:\n" + "\n".join(failures)
