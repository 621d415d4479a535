"""Per-key overrides through Python: set, read, remove, a TTL on now_ms, on
the memory store and a real Redis; bad input raises ConfigError naming the field."""

import asyncio

import pytest

import polylimit
from conftest import unique_prefix

NOW = 1_700_000_000_000
WINDOW = NOW - NOW % 3_600_000


def limiter(store):
    return polylimit.Limiter(
        {"algorithm": "fixed_window", "rate": "3/h", "name": "api"}, store, prefix=unique_prefix("ov"), overrides=True
    )


def admitted(lim, key, n, now):
    return sum(lim.check_sync(key, now_ms=now).allowed for _ in range(n))


def test_set_get_remove_sync(store):
    lim = limiter(store)
    got = lim.set_override_sync("vip", "api", rate="10/h", ttl=60, now_ms=WINDOW)
    assert got == {
        "policy": "api",
        "key": "vip",
        "rate": "10/1h",
        "burst": 10,
        "limit": 10,
        "expires_at_ms": WINDOW + 60_000,
    }
    d = lim.check_sync("vip", now_ms=WINDOW)
    assert (d.allowed, d.limit, d.remaining) == (True, 10, 9)
    assert admitted(lim, "vip", 12, WINDOW + 59_999) == 9
    assert lim.get_override_sync("vip", now_ms=WINDOW + 59_999)["limit"] == 10
    # Ended at WINDOW + 60 s: the policy (3 per hour) decides, on its own state.
    assert lim.get_override_sync("vip", now_ms=WINDOW + 60_000) is None
    assert admitted(lim, "vip", 5, WINDOW + 60_000) == 3
    # Removed: True while one is in force (on the store's clock: no TTL here).
    lim.set_override_sync("batch", rate="1/h")
    assert lim.get_override_sync("batch", "api")["expires_at_ms"] is None
    assert lim.remove_override_sync("batch", "api") is True
    assert lim.remove_override_sync("batch") is False


def test_async_api_and_a_lower_limit(store):
    async def run():
        lim = limiter(store)
        await lim.set_override("batch", rate="1/h", now_ms=WINDOW)
        first = await lim.check("batch", now_ms=WINDOW)
        second = await lim.check("batch", now_ms=WINDOW)
        assert (first.allowed, first.limit, second.allowed) == (True, 1, False)
        assert (await lim.get_override("batch", "api", now_ms=WINDOW))["rate"] == "1/1h"
        assert await lim.remove_override("batch") is True
        assert await lim.get_override("batch", now_ms=WINDOW) is None
        assert (await lim.check("batch", now_ms=WINDOW)).limit == 3

    asyncio.run(run())


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
def test_bad_overrides_name_the_field(kwargs, field):
    lim = limiter("memory")
    with pytest.raises(polylimit.ConfigError) as e:
        lim.set_override_sync("k", **kwargs)
    assert e.value.field == field
