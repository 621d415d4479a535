"""A policy's ``sync`` through the Python API (issue 19): the typed Policy and a
dict both reach the core, which admits from a local share on a real Redis."""

import polylimit
from polylimit import Limiter, Policy

NOW = 1_700_000_000_000


def test_a_synced_policy_admits_from_its_share(redis_server) -> None:
    policy = Policy(algorithm="fixed_window", rate="100/10s", sync={"interval": 1, "share": 10})
    assert polylimit.effective_config(policy=policy)["policies"]["default"]["sync"] == {
        "interval": "1000ms",
        "share": 10,
    }
    limiter = Limiter(policy=policy, store=redis_server.url, prefix="py-sync", timeout=5)  # never the fallback
    # The store charged a share of 10: 90 left there, 9 of it here.
    assert [limiter.check_sync("k", now_ms=NOW).remaining for _ in range(3)] == [99, 98, 97]
    # The interval ended: the 7 left are dropped, another share is taken.
    assert limiter.check_sync("k", now_ms=NOW + 1000).remaining == 89


def test_a_bad_share_names_the_field() -> None:
    try:
        Limiter(policy={"rate": "5/s", "sync": {"share": 6}})
    except polylimit.ConfigError as e:
        assert "sync.share" in str(e)
    else:
        raise AssertionError("share above the limit accepted")
