"""A client cannot pick its own key by forging X-Forwarded-For or Forwarded:
loopback is not a trusted proxy in these rules."""

from conftest import statuses


def spoofed(i):
    address = f"198.51.100.{i + 1}"
    return {"X-Forwarded-For": address} if i % 2 else {"Forwarded": f"for={address}"}


def test_a_spoofed_forwarded_address_does_not_change_the_key(app, run):
    responses = [app.request("/api/classic", headers={**run, **spoofed(i)}) for i in range(15)]
    assert statuses(responses) == [200] * 10 + [429] * 5
