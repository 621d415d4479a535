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
