"""The Python surface: Limiter, Decision, errors, asyncio, the GIL, reset, metrics, CircuitBreaker."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import threading
import time

import pytest
from conftest import unique_prefix
from redis_server import RedisServer

import polylimit

POLICY = {"algorithm": "token_bucket", "rate": "10/s", "burst": 10}


def arun(make_awaitable):
    """Awaits inside a running loop (the awaitable binds to the running loop)."""

    async def main():
        return await make_awaitable()

    return asyncio.run(main())


def make(store: str, policy=POLICY, **options) -> polylimit.Limiter:
    options.setdefault("timeout", "10s")  # decisions, not latency; a test of timeouts gives its own
    return polylimit.Limiter(policy=policy, store=store, prefix=unique_prefix("lim"), **options)


def test_check_returns_frozen_decision(store: str) -> None:
    limiter = make(store)
    d = arun(lambda: limiter.check("k", now_ms=1_000))
    assert isinstance(d, polylimit.Decision)
    assert d.to_dict() == {
        "allowed": True, "limit": 10, "remaining": 9, "reset_after_ms": 100,
        "retry_after_ms": None, "delay_ms": 0, "source": "store",
    }
    assert bool(d) is True
    with pytest.raises(AttributeError):
        d.allowed = False  # type: ignore[misc]
    d2 = limiter.check_sync("k", cost=10, now_ms=1_000)
    assert (d2.allowed, d2.remaining, d2.retry_after_ms, d2.source) == (False, 9, 100, "store")
    assert not d2


def test_typed_policy_and_denial(store: str) -> None:
    limiter = make(store, policy=polylimit.Policy(algorithm="gcra", rate="5/s", burst=2))
    got = [limiter.check_sync("k", now_ms=0).allowed for _ in range(3)]
    assert got == [True, True, False]
    assert limiter.check_sync("k", now_ms=0).retry_after_ms == 200


def test_thousand_concurrent_awaits(store: str) -> None:
    limiter = make(store, policy={"algorithm": "fixed_window", "rate": "500/h"})

    async def main():
        return await asyncio.gather(*(limiter.check("same") for _ in range(1000)))

    decisions = asyncio.run(main())
    assert len(decisions) == 1000
    assert sum(d.allowed for d in decisions) == 500
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(500))


def test_await_does_not_block_the_event_loop(redis_server) -> None:
    """While checks are in flight on a stopped Redis (timeout 1 s), the loop keeps ticking."""
    server = RedisServer()
    try:
        # 1 s: about 100 ticks of 10 ms; a loaded CI host still makes 10, a blocked loop none.
        limiter = make(server.url, timeout="1s", policy=dict(POLICY, on_store_error="fail_open"))
        limiter.check_sync("warm")
        os.kill(server.proc.pid, signal.SIGSTOP)

        async def main():
            ticks = 0
            task = asyncio.ensure_future(asyncio.gather(*(limiter.check(f"k{i}") for i in range(20))))
            while not task.done():
                await asyncio.sleep(0.01)
                ticks += 1
            return ticks, await task

        ticks, decisions = asyncio.run(main())
        assert ticks >= 10, ticks
        assert {d.source for d in decisions} == {"fail_open"}
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        server.kill()


def test_check_sync_releases_the_gil() -> None:
    server = RedisServer()
    try:
        limiter = make(server.url, timeout="400ms", policy=dict(POLICY, on_store_error="fail_closed"))
        limiter.check_sync("warm")
        os.kill(server.proc.pid, signal.SIGSTOP)
        result = {}
        thread = threading.Thread(target=lambda: result.setdefault("d", limiter.check_sync("k")))
        counter = 0
        start = time.monotonic()
        thread.start()
        while thread.is_alive():
            counter += 1  # pure Python: progresses only if the other thread released the GIL
        elapsed = time.monotonic() - start
        assert elapsed >= 0.3, elapsed
        assert counter > 100_000, counter
        assert result["d"].source == "fail_closed" and not result["d"].allowed
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        server.kill()


def test_reset_and_metrics(store: str) -> None:
    limiter = make(store, policy={"rate": "1/h", "name": "hourly"})
    assert limiter.check_sync("k").allowed
    assert not limiter.check_sync("k").allowed
    arun(lambda: limiter.reset("k"))
    assert limiter.check_sync("k").allowed
    limiter.reset_sync("k")
    assert limiter.check_sync("k").allowed
    text = limiter.metrics_text()
    assert 'polylimit_requests_total{policy="hourly",route="",decision="allowed",source="store"} 3' in text
    assert "polylimit_store_latency_seconds_count" in text
    assert limiter.policy_names == ["hourly"]
    assert limiter.breaker_state == "closed"


def test_close() -> None:
    limiter = make("memory")
    limiter.close()
    assert limiter.closed
    with pytest.raises(polylimit.ClosedError) as err:
        limiter.check_sync("k")
    assert err.value.kind == "closed"
    with pytest.raises(polylimit.PolylimitError):
        arun(lambda: limiter.check("k"))


@pytest.mark.parametrize(
    "kwargs, field, value",
    [
        ({"policy": {"rate": "ten/s"}}, "policy.rate", '"ten/s"'),
        ({"policy": {"rate": "1/s", "algorithm": "nope"}}, "policy.algorithm", '"nope"'),
        ({"policy": {"rate": "1/s"}, "store": "mongodb://x"}, "store", '"mongodb://x"'),
        ({"policy": {"rate": "1/s"}, "timeout": "soon"}, "timeout", '"soon"'),
        ({"policy": {"rate": "1/s"}, "connect_timeout": "0s"}, "connect_timeout", '"0s"'),
        ({"policy": {"rate": "1/s"}, "bogus": 1}, "bogus", ""),
    ],
)
def test_config_errors_name_the_field(kwargs, field, value) -> None:
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter(**kwargs)
    assert isinstance(err.value, polylimit.PolylimitError)
    assert err.value.field == field
    assert err.value.value == value
    assert err.value.kind == "config"
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize("cost", [0, -1, 1.5, "2", True, float("nan"), 2**40, [1]])
def test_bad_cost_is_a_config_error(cost) -> None:
    limiter = make("memory")
    with pytest.raises(polylimit.ConfigError) as err:
        limiter.check_sync("k", cost=cost)
    assert err.value.field == "cost"
    with pytest.raises(polylimit.ConfigError) as err:
        limiter.check("k", cost=cost)
    assert err.value.field == "cost"
    rules = polylimit.Limiter(rules="policies:\n  api: { rate: 1/s }\nrules:\n  - { policy: api }\n")
    with pytest.raises(polylimit.ConfigError) as err:
        rules.check_request_sync({"path": "/", "peer": "203.0.113.7", "cost": cost})
    assert err.value.field in ("cost", "request.cost")  # NaN is refused while converting the dict


def test_whole_costs_are_charged() -> None:
    limiter = make("memory")
    assert limiter.check_sync("k", cost=3, now_ms=1_000).remaining == limiter.check_sync("j", now_ms=1_000).remaining - 2


def test_a_key_given_twice_in_rules_is_a_config_error() -> None:
    text = "policies:\n  api: { rate: 1/s, burst: 5 }\n  api: { rate: 1000/s }\nrules:\n  - { policy: api }\n"
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter(rules=text)
    assert err.value.field == "policies.api"
    assert "twice" in str(err.value)


def test_control_characters_in_names_are_config_errors() -> None:
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter(policy={"rate": "1/s", "name": "api\r\nSet-Cookie: a=b"})
    assert err.value.field == "policy.name"
    assert err.value.value == '"api\\r\\nSet-Cookie: a=b"'


def test_from_file(tmp_path, redis_server) -> None:
    path = tmp_path / "polylimit.yaml"
    path.write_text(
        "store: memory\n"
        "policies:\n  api: { algorithm: token_bucket, rate: 10/s, burst: 2 }\n"
        "rules:\n  - match: { path: /api/* }\n    key: [ip]\n    policy: api\n"
    )
    for store in ("memory", redis_server.url):
        limiter = polylimit.Limiter.from_file(path, store=store, timeout="10s", prefix=unique_prefix("file"))
        req = {"path": "/api/x", "peer": "203.0.113.7", "now_ms": 1_700_000_000_000}
        statuses = [limiter.check_request_sync(req).status for _ in range(3)]
        assert statuses == [None, None, 429]
        assert limiter.check_sync("direct", now_ms=0).limit == 2
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter.from_file(tmp_path / "missing.yaml")
    assert err.value.field == "rules_file"  # the option, as written


def test_redis_down_falls_back_without_raising() -> None:
    server = RedisServer()
    url = server.url
    server.kill()
    local = make(url, timeout="50ms")
    assert local.check_sync("k").source == "local"
    closed = make(url, timeout="50ms", policy=dict(POLICY, on_store_error="fail_closed"))
    d = arun(lambda: closed.check("k"))
    assert (d.allowed, d.source) == (False, "fail_closed")


def test_circuit_breaker() -> None:
    # The cooldown ending is part of what is tested: the breaker's clock is the
    # wall clock, so the cooldown is the shortest that is safe (50 ms), slept just past.
    breaker = polylimit.CircuitBreaker(threshold=2, cooldown=0.05, half_open_max=1)
    assert breaker.state == "closed"

    def boom():
        raise ValueError("down")

    seen = []
    assert breaker.call(boom, fallback=lambda e: seen.append(type(e).__name__) or "fb") == "fb"
    with pytest.raises(ValueError):
        breaker.call(boom)
    assert breaker.state == "open"
    assert breaker.call(lambda: "ok", fallback=lambda e: type(e).__name__) == "CircuitOpenError"
    with pytest.raises(polylimit.CircuitOpenError):
        breaker.call(lambda: "ok")
    time.sleep(0.06)
    assert breaker.state == "half_open"

    async def fine(x):
        return x * 2

    assert asyncio.run(breaker.call(fine, 21)) == 42
    assert breaker.state == "closed"
    with pytest.raises(polylimit.ConfigError):
        polylimit.CircuitBreaker(threshold=0)
    with pytest.raises(polylimit.ConfigError):
        polylimit.CircuitBreaker(cooldown="soon")
    permit = breaker.acquire()
    breaker.success(permit)
    with pytest.raises(polylimit.ConfigError):
        breaker.success(permit)


def test_cancelled_probes_do_not_wedge_the_breaker() -> None:
    """Three half-open probes cancelled by asyncio.wait_for, then the next healthy call goes through.

    The cooldown is 50 ms of wall clock: the cooldown ending is what is tested."""
    breaker = polylimit.CircuitBreaker(threshold=1, cooldown="50ms", half_open_max=3)

    async def down():
        raise ConnectionError("down")

    async def hang():
        await asyncio.Event().wait()

    async def fine():
        return "ok"

    async def main():
        assert await breaker.call(down, fallback=lambda e: "fb") == "fb"
        assert breaker.state == "open"
        await asyncio.sleep(0.06)
        probes = [asyncio.wait_for(breaker.call(hang), 0.01) for _ in range(3)]
        outcomes = await asyncio.gather(*probes, return_exceptions=True)
        assert all(isinstance(o, asyncio.TimeoutError) for o in outcomes), outcomes
        assert breaker.state != "closed"
        await asyncio.sleep(0.06)
        return await breaker.call(fine, fallback=lambda e: type(e).__name__)

    assert asyncio.run(main()) == "ok"


def test_a_base_exception_counts_as_a_failure() -> None:
    class Stop(BaseException):
        pass

    breaker = polylimit.CircuitBreaker(threshold=1, cooldown="30s", half_open_max=1)

    def interrupted():
        raise Stop()

    with pytest.raises(Stop):
        breaker.call(interrupted, fallback=lambda e: "fb")
    assert breaker.state == "open"


def test_an_unreported_permit_counts_as_a_failure() -> None:
    import gc

    breaker = polylimit.CircuitBreaker(threshold=1, cooldown="30s", half_open_max=1)
    permit = breaker.acquire()
    assert permit is not None
    del permit
    gc.collect()
    assert breaker.state == "open"


def test_cancelled_check_does_not_break_the_loop(store: str) -> None:
    limiter = make(store)

    async def main():
        task = asyncio.ensure_future(limiter.check("k"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)  # the check still finishes on tokio; its result is dropped
        return await limiter.check("k")

    d = arun(main)
    assert d.allowed and d.remaining == 8  # the cancelled check was still charged once


def test_a_forked_child_decides_on_redis_with_its_own_runtime(redis_server):
    # gunicorn --preload: the parent built the runtime and the Redis connection
    # before forking; neither's threads exist in the child.
    # The child connects again on its first call: a loaded machine must not make that a fallback.
    limiter = make(redis_server.url, policy={"rate": "5/min"}, timeout="10s")
    assert limiter.check_sync("k").remaining == 4
    assert arun(lambda: limiter.check("k")).remaining == 3
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            first = limiter.check_sync("k")
            second = arun(lambda: limiter.check("k"))
            os.write(write, f"{first.source} {first.remaining} {second.source} {second.remaining}".encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], 10)
        answer = os.read(read, 200).decode() if ready else "no answer in 10 s"
    finally:
        os.close(read)
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert answer == "store 2 store 1"
    assert limiter.check_sync("k").remaining == 0  # the parent still decides, on the same key


def test_rules_variables_expand_one_value_at_a_time(monkeypatch) -> None:
    monkeypatch.setenv("POLYLIMIT_TEST_PASSWORD", 'p"w], trusted_proxies: [0.0.0.0/0')
    block = "policies:\n  api:\n    rate: ${POLYLIMIT_TEST_RATE:-1/s}\n    burst: ${POLYLIMIT_TEST_BURST:-3}\nrules:\n  - { policy: api }\n"
    flow = "policies: { api: { rate: 1/s, burst: ${POLYLIMIT_TEST_BURST:-3} } }\nrules: [{ policy: api }]\n"
    as_dict = {"policies": {"api": {"rate": "1/s", "burst": "${POLYLIMIT_TEST_BURST:-3}"}}, "rules": [{"policy": "api"}]}
    for rules in (block, flow, as_dict):
        limiter = polylimit.Limiter(rules=rules)
        assert limiter.check_sync("k", now_ms=1_000).limit == 3
    # A value from the environment stays one string: it cannot add trusted_proxies.
    text = "prefix: \"pl-${POLYLIMIT_TEST_PASSWORD}\"\n" + block
    limiter = polylimit.Limiter(rules=text)
    # Were every peer trusted, the forwarded address would be the client and the fourth request denied.
    forwarded = [["x-forwarded-for", "198.51.100.1"]]
    for want in (None, None, None):
        request = {"peer": "10.0.0.1", "headers": forwarded, "now_ms": 1_000}
        assert limiter.check_request_sync(request).status == want
    assert limiter.check_request_sync({"peer": "10.0.0.2", "headers": forwarded, "now_ms": 1_000}).status is None


def test_route_rules_are_validated_once_and_decided_by_their_limiter() -> None:
    limiter = polylimit.Limiter(policies=[{"name": "api", "rate": "1/min", "burst": 2}, {"name": "day", "rate": "100/d"}])
    for key, policy, field in ((["ip", "shoe"], None, "key"), ([], None, "key"), (["ip"], "nope", "policy")):
        with pytest.raises(polylimit.ConfigError) as err:
            limiter.route_rule(key, policy)
        assert err.value.field == field
    rule = limiter.route_rule(["key"], "api")
    request = {"peer": "203.0.113.7", "key": "k", "now_ms": 1_000}

    async def check_async():
        return await limiter.check_route(request, rule)

    outcomes = [limiter.check_route_sync(request, rule), asyncio.run(check_async())]
    outcomes.append(limiter.check_route_sync(request, limiter.route_rule(["key"], "api")))
    assert [o.status for o in outcomes] == [None, None, 429]
    assert [d["policy"] for d in outcomes[2].decisions] == ["api"]
    assert 'route="route_rule",decision="denied"' in limiter.metrics_text()
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter(policy={"rate": "1/s"}).check_route_sync(request, rule)
    assert err.value.field == "rule"
    limiter.close()
    with pytest.raises(polylimit.ClosedError):
        limiter.check_route_sync(request, rule)


# One options list, read by the core: every argument of Limiter(...) is an option of it.


def test_policy_with_http_options_builds_one_rule_keyed_by_ip() -> None:
    limiter = polylimit.Limiter(policy={"rate": "1/min", "burst": 2}, trusted_proxies=["10.0.0.0/8"], headers="ietf")
    forwarded = [["x-forwarded-for", "198.51.100.1"]]
    # The trusted proxy's forwarded client is the key: the third request from either proxy is refused.
    statuses = [limiter.check_request_sync({"peer": peer, "headers": forwarded, "now_ms": 1_000}).status
                for peer in ("10.0.0.1", "10.0.0.2", "10.0.0.3")]
    assert statuses == [None, None, 429]
    refused = limiter.check_request_sync({"peer": "10.0.0.1", "headers": forwarded, "now_ms": 1_000})
    names = {name.lower() for name, _ in refused.headers}
    assert "ratelimit-policy" in names and "x-ratelimit-limit" not in names  # headers="ietf"
    keyed = polylimit.Limiter(policy={"rate": "1/min", "burst": 1}, key=["user"])
    assert [keyed.check_request_sync({"peer": "203.0.113.7", "user": u, "now_ms": 1}).status for u in "aab"] == [None, 429, None]


def test_effective_config_is_a_plain_dict_of_the_core_resolution() -> None:
    config = polylimit.effective_config(policy={"rate": "5/s"}, headers="ietf", cooldown=2)
    assert type(config) is dict
    assert config["headers"] == "ietf"
    assert config["cooldown"] == "2000ms"  # a number is seconds
    assert config["rules"][0]["key"] == ["ip"]
    again = polylimit.effective_config(rules=config)
    assert again == config
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.effective_config(policy={"rate": "5/s"}, headers="loud")
    assert err.value.field == "headers"


def test_timedelta_durations_are_whole_milliseconds() -> None:
    from datetime import timedelta

    config = polylimit.effective_config(policy={"rate": "5/s"}, timeout=timedelta(milliseconds=250),
                                        cooldown=timedelta(minutes=1, seconds=30))
    assert (config["timeout"], config["cooldown"]) == ("250ms", "90000ms")
    polylimit.Limiter(policy={"rate": "5/s"}, connect_timeout=timedelta(seconds=2)).close()
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter(policy={"rate": "5/s"}, timeout=timedelta(microseconds=1500))
    assert (err.value.field, err.value.value) == ("timeout", "datetime.timedelta(microseconds=1500)")


def test_rules_and_rules_file_are_options_of_the_core(tmp_path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("prefix: from-file\npolicies:\n  api: { rate: 1/s }\nrules:\n  - { policy: api }\n")
    assert polylimit.effective_config(rules_file=str(path))["prefix"] == "from-file"
    # An option beside the document overrides its field.
    assert polylimit.effective_config(rules_file=str(path), prefix="mine")["prefix"] == "mine"
    assert polylimit.Limiter(rules_file=path).policy_names == ["api"]
