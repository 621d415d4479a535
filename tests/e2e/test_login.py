"""The classic login brute-force limit against every app, on one real Redis:
5 failed logins per 15 minutes per user and IP (`count: failed`), successful
logins free. Each test logs in as its own user, so no two tests share a key."""

import json
import uuid

from conftest import statuses

RIGHT = "open-sesame"  # the example apps' demo password


def login(app, user, password):
    return app.request(
        "/login",
        method="POST",
        headers={"X-Login-User": user, "Content-Type": "application/json"},
        body=json.dumps({"password": password}).encode(),
    )


def a_user():
    return f"user-{uuid.uuid4().hex}"


def test_five_wrong_passwords_lock_out_even_the_right_one(app):
    user = a_user()
    # Right passwords before the attack do not count: each is charged, then given back.
    before = [login(app, user, RIGHT) for _ in range(3)]
    assert statuses(before) == [200] * 3
    assert [r.header("X-RateLimit-Remaining") for r in before] == ["4"] * 3
    wrong = [login(app, user, "guess") for _ in range(5)]
    assert statuses(wrong) == [401] * 5
    assert [r.header("X-RateLimit-Remaining") for r in wrong] == ["4", "3", "2", "1", "0"]
    locked = login(app, user, RIGHT)
    assert locked.status == 429
    assert int(locked.header("Retry-After")) > 0
    assert json.loads(locked.body)["error"] == "rate_limit_exceeded"
    # Another user from the same address is not locked out.
    assert login(app, a_user(), RIGHT).status == 200


def test_successful_logins_are_unlimited(app):
    user = a_user()
    assert statuses(login(app, user, RIGHT) for _ in range(25)) == [200] * 25
    assert statuses(login(app, user, "guess") for _ in range(6)) == [401] * 5 + [429]
