"""The apps of every language behind one Redis enforce one limit, and say so
with the same bytes."""

import time
import uuid

from conftest import pay_through_every_app

# The headers the core sets. Values compare byte for byte; names compare
# case-insensitively and as a set, as HTTP defines them: Go writes
# X-Ratelimit-Limit and sorts its headers, ASGI lowercases names.
RATE_LIMIT_HEADERS = ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
                      "ratelimit-policy", "ratelimit", "retry-after"]


def limit_headers(response):
    return sorted((name.lower(), value) for name, value in response.headers if name.lower() in RATE_LIMIT_HEADERS)


def test_one_key_through_every_app_admits_exactly_the_burst(apps):
    # 300 payments by one user on 300 ids, spread over the apps at once: the
    # route template is the key, and the burst is 30 with a refill of 1/min.
    assert pay_through_every_app(list(apps.values())) == [200] * 30 + [429] * 270


def rounds_within_whole_seconds(apps, rounds):
    """Plays `rounds` rounds (one request to every app, each with its own
    fresh key) and returns each round's answers by app, or None when a round
    did not start and end in one whole second of the clock, or the rounds
    did not all fall in one hour (the window). The headers compared are the
    clock's (seconds to the window's end), so they agree only within one
    second: the caller plays again with new keys instead of waiting for one."""
    keys = {name: {"X-Run": uuid.uuid4().hex} for name in apps}
    played = []
    hour = None
    for _ in range(rounds):
        start = time.time()
        answers = {name: app.request("/api/windowed", headers=keys[name]) for name, app in apps.items()}
        end = time.time()
        if int(start) != int(end) or (hour is not None and int(end // 3600) != hour):
            return None
        hour = int(start // 3600)
        played.append(answers)
    return played


def test_the_same_state_gives_byte_identical_headers_and_bodies(apps):
    # Each app gets its own key with the same history (fixed window, 3 per
    # hour); round by round, every app answers in the same second.
    for _ in range(20):
        played = rounds_within_whole_seconds(apps, 4)
        if played is not None:
            break
    else:
        raise AssertionError("20 attempts each had a round across a second boundary")
    for round_, answers in enumerate(played, start=1):
        first_name, first = next(iter(answers.items()))
        assert first.status == (200 if round_ <= 3 else 429)
        assert [n for n, _ in limit_headers(first)] == sorted(RATE_LIMIT_HEADERS[: 6 if round_ == 4 else 5])
        for name, answer in answers.items():
            assert answer.status == first.status, (name, first_name)
            assert limit_headers(answer) == limit_headers(first), (name, first_name)
            if round_ == 4:
                assert answer.body == first.body, (name, first_name)
        if round_ == 4:
            assert first.body.startswith(b'{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":')
