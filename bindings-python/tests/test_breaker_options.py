"""tests/conformance/client/breaker_options.json: CircuitBreaker's defaults and checks are the core's,
named as Python names them; and polylimit.client's defaults are the core's (retry_options.json)."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

import polylimit
from polylimit.client import RetryPolicy

VECTORS = REPO / "tests" / "conformance" / "client"


def test_breaker_options_vectors() -> None:
    v = json.loads((VECTORS / "breaker_options.json").read_text())
    invalid = [c for c in v["invalid"] if c["naming"] == "snake"]
    valid = [c for c in v["valid"] if c["naming"] == "snake"]
    assert invalid and valid
    for c in invalid:
        with pytest.raises(polylimit.ConfigError) as raised:
            polylimit.CircuitBreaker(**c["options"])
        assert str(raised.value) == c["error"], c
        assert raised.value.field == c["error"].split(":")[0]
    for c in valid:
        assert polylimit.CircuitBreaker(**c["options"]).state == "closed"


def test_retry_policy_defaults_are_the_cores() -> None:
    want = json.loads((VECTORS / "retry_options.json").read_text())["defaults"]["snake"]
    policy = RetryPolicy()
    got = {name: getattr(policy, name) for name in want}
    assert got == {**want, "statuses": tuple(want["statuses"])}
