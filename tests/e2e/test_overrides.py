"""Per-key overrides across languages: Python sets one in the shared Redis;
the Express, Fastify, Go and FastAPI apps (each its own process and language
on the same Redis) decide that key by it at once, and by the policy again
once Python removes it."""

import uuid
from pathlib import Path

import polylimit

RULES = Path(__file__).parent / "polylimit.yaml"


def test_an_override_set_from_python_is_enforced_by_every_app(apps, redis, monkeypatch):
    # The apps' own rules file, on their Redis.
    monkeypatch.setenv("REDIS_URL", redis.url)
    admin = polylimit.Limiter(rules_file=str(RULES))
    for name, app in apps.items():
        run = uuid.uuid4().hex
        # /api/windowed keys by [ip, header:x-run]: the key its rule composes.
        key = f"ip=127.0.0.1|header:x-run={run}"
        headers = {"X-Run": run}
        set_ = admin.set_override_sync(key, "windowed", rate="7/h")
        assert (set_["limit"], set_["rate"], set_["expires_at_ms"]) == (7, "7/1h", None)
        assert admin.get_override_sync(key, "windowed")["limit"] == 7
        answers = [app.request("/api/windowed", headers=headers) for _ in range(8)]
        assert [a.status for a in answers] == [200] * 7 + [429], name
        first = answers[0]
        assert first.header("X-RateLimit-Limit") == "7", name
        assert first.header("X-RateLimit-Remaining") == "6", name
        assert first.header("RateLimit-Policy") == '"windowed";q=7;w=3600', name
        # Removed: the policy's own limit (3 per hour) and its untouched state.
        assert admin.remove_override_sync(key, "windowed") is True
        after = app.request("/api/windowed", headers=headers)
        assert (after.status, after.header("X-RateLimit-Limit"), after.header("X-RateLimit-Remaining")) == (
            200,
            "3",
            "2",
        ), name


def test_a_policy_wide_limit_set_from_python_is_enforced_by_every_app(apps, redis, monkeypatch):
    """Issue 38: `set_limit` from Python applies to every key of the policy in
    every app (Express, Fastify, Go, FastAPI, JVM: each its own process and
    language on the same Redis) at its next check; a per-key override still
    wins; removed, the policy decides again."""
    monkeypatch.setenv("REDIS_URL", redis.url)
    admin = polylimit.Limiter(rules_file=str(RULES))
    # A TTL, so a failed run leaves nothing behind for long.
    got = admin.set_limit_sync("windowed", rate="5/h", ttl=120)
    try:
        assert (got["limit"], got["rate"]) == (5, "5/1h")
        vip = uuid.uuid4().hex
        admin.set_override_sync(f"ip=127.0.0.1|header:x-run={vip}", "windowed", rate="7/h", ttl=120)
        for name, app in apps.items():
            headers = {"X-Run": uuid.uuid4().hex}
            answers = [app.request("/api/windowed", headers=headers) for _ in range(6)]
            assert [a.status for a in answers] == [200] * 5 + [429], name
            assert answers[0].header("X-RateLimit-Limit") == "5", name
            assert answers[0].header("RateLimit-Policy") == '"windowed";q=5;w=3600', name
            assert app.request("/api/windowed", headers={"X-Run": vip}).header("X-RateLimit-Limit") == "7", name
    finally:
        admin.remove_limit_sync("windowed")
    for name, app in apps.items():
        after = app.request("/api/windowed", headers={"X-Run": uuid.uuid4().hex})
        assert (after.status, after.header("X-RateLimit-Limit")) == (200, "3"), name
