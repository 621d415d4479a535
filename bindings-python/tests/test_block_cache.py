"""The blocked-key cache through Python (block_cache=...): the option is
accepted, a denied key is then answered locally until its retry time, and the
hits show in metrics_text; a bad value raises ConfigError naming the field."""

import pytest

import polylimit
from conftest import unique_prefix

NOW = 1_700_000_000_000


def hits(limiter):
    line = 'polylimit_block_cache_hits_total{policy="default"} '
    return next(int(l[len(line) :]) for l in limiter.metrics_text().splitlines() if l.startswith(line))


@pytest.mark.parametrize("block_cache", [True, 50])
def test_a_denied_key_is_answered_from_the_cache(redis_server, block_cache):
    limiter = polylimit.Limiter(
        {"rate": "10/s", "burst": 1}, redis_server.url, timeout="10s", prefix=unique_prefix("bc"), block_cache=block_cache
    )
    assert limiter.check_sync("k", now_ms=NOW).allowed
    denied = limiter.check_sync("k", now_ms=NOW)
    assert (denied.allowed, denied.retry_after_ms) == (False, 100)
    assert hits(limiter) == 0
    cached = limiter.check_sync("k", now_ms=NOW + 30)
    assert (cached.allowed, cached.retry_after_ms, cached.source) == (False, 70, "store")
    assert hits(limiter) == 1
    assert limiter.check_sync("k", now_ms=NOW + 100).allowed
    assert hits(limiter) == 1


@pytest.mark.parametrize("value", [0, -1, "yes", 1.5])
def test_a_bad_block_cache_names_the_field(value):
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.Limiter({"rate": "1/s"}, block_cache=value)
    assert err.value.field == "block_cache"
