"""Policy-wide limits through Python: set_limit / get_limit / remove_limit
(async and _sync), every key of a policy, a per-key override still wins, a
TTL on now_ms, on the memory store and a real Redis; bad input raises
ConfigError naming the field; without overrides=True it names ``overrides``."""

import asyncio

import pytest

import polylimit
from conftest import unique_prefix

NOW = 1_700_000_000_000
WINDOW = NOW - NOW % 3_600_000


def limiter(store, prefix=None, **options):
    return polylimit.Limiter(
        {"algorithm": "fixed_window", "rate": "3/h", "name": "api"},
        store,
        prefix=prefix or unique_prefix("lim"),
        overrides=True,
        **options,
    )


def admitted(lim, key, n, now):
    return sum(lim.check_sync(key, now_ms=now).allowed for _ in range(n))


def test_set_get_remove_sync(store):
    lim = limiter(store)
    assert admitted(lim, "a", 1, WINDOW) == 1
    got = lim.set_limit_sync("api", rate="10/h", ttl=60, now_ms=WINDOW)
    assert got == {"policy": "api", "rate": "10/1h", "burst": 10, "limit": 10, "expires_at_ms": WINDOW + 60_000}
    for key in ("a", "b"):
        d = lim.check_sync(key, now_ms=WINDOW)
        assert (d.allowed, d.limit, d.remaining) == (True, 10, 9)
    assert admitted(lim, "b", 12, WINDOW + 59_999) == 9
    assert lim.get_limit_sync("api", now_ms=WINDOW + 59_999)["limit"] == 10
    # Ended at WINDOW + 60 s: the policy decides, on its own state (a used 1 of 3).
    assert lim.get_limit_sync(now_ms=WINDOW + 60_000) is None
    assert admitted(lim, "a", 5, WINDOW + 60_000) == 2
    lim.set_limit_sync(rate="1/h")
    assert lim.get_limit_sync()["expires_at_ms"] is None
    assert lim.remove_limit_sync("api") is True
    assert lim.remove_limit_sync() is False
    assert 'polylimit_limit_changes_total{policy="api",action="set"} 2' in lim.metrics_text()


def test_async_api_and_an_override_wins(store):
    async def run():
        lim = limiter(store)
        await lim.set_limit(rate="1/h", now_ms=WINDOW)
        await lim.set_override("vip", rate="5/h", now_ms=WINDOW)
        first = await lim.check("batch", now_ms=WINDOW)
        second = await lim.check("batch", now_ms=WINDOW)
        assert (first.allowed, first.limit, second.allowed) == (True, 1, False)
        assert (await lim.check("vip", now_ms=WINDOW)).limit == 5
        assert (await lim.get_limit("api", now_ms=WINDOW))["rate"] == "1/1h"
        assert await lim.remove_limit() is True
        assert await lim.get_limit(now_ms=WINDOW) is None
        assert (await lim.check("batch", now_ms=WINDOW)).limit == 3

    asyncio.run(run())


def test_another_limiter_on_the_store_applies_it_at_its_next_check(redis_server):
    prefix = unique_prefix("limshared")
    a, b = limiter(redis_server.url, prefix), limiter(redis_server.url, prefix)
    assert b.check_sync("k", now_ms=WINDOW).limit == 3
    a.set_limit_sync(rate="2/h", now_ms=WINDOW)
    assert admitted(b, "k", 5, WINDOW) == 2
    b.remove_limit_sync()
    assert a.check_sync("k", now_ms=WINDOW).limit == 3


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rate": "ten/h"}, "rate"),
        ({"rate": "1/h", "burst": 5}, "burst"),
        ({"rate": "1/h", "ttl": -1}, "ttl"),
        ({"rate": "1/h", "policy": "nope"}, "policy"),
        ({}, "rate"),
    ],
)
def test_bad_limits_name_the_field(kwargs, field):
    lim = limiter("memory")
    with pytest.raises(polylimit.ConfigError) as e:
        lim.set_limit_sync(**kwargs)
    assert e.value.field == field


def test_opt_in():
    lim = polylimit.Limiter({"rate": "3/h"}, "memory")
    with pytest.raises(polylimit.ConfigError) as e:
        lim.set_limit_sync(rate="1/h")
    assert e.value.field == "overrides"
