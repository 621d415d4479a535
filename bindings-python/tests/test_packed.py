"""The shared record vectors (tests/conformance/wire/packed.json) through the
binding's reader of the core bridge: every record, one by one and as the one
batch, becomes the Python value (or exception) its call resolves to."""

from __future__ import annotations

import json
from typing import Any, Dict

import pytest
from conftest import vectors_dir

import polylimit
from polylimit import _polylimit

VECTORS = json.loads((vectors_dir() / "wire" / "packed.json").read_text())
RECORD_FIELDS = {"name", "ctx", "hex", "kind", "value"}
ERRORS = {
    "config": polylimit.ConfigError,
    "store": polylimit.StoreError,
    "store_unavailable": polylimit.StoreUnavailableError,
    "closed": polylimit.ClosedError,
    "internal": polylimit.InternalError,
}


def as_expected(kind: str, got: Any) -> Any:
    """`got` in the vectors' JSON form, checking its Python type on the way."""
    if kind == "decision":
        assert isinstance(got, polylimit.Decision)
        return got.to_dict()
    if kind == "decisions":
        assert isinstance(got, list)
        return [as_expected("decision", d) for d in got]
    if kind == "acquired":
        decision, leases = got
        return {
            "decision": as_expected("decision", decision),
            "leases": [{"policy": p, "key": k, "id": i} for p, k, i in leases],
        }
    if kind == "outcome":
        assert isinstance(got, polylimit.Outcome)
        return {
            "status": got.status,
            "headers": [list(h) for h in got.headers],
            "body": got.body,
            "trailers": [list(h) for h in got.trailers],
            "delay_ms": got.delay_ms,
            "completion": got.completion,
            "decisions": got.decisions,
        }
    if kind == "error":
        assert isinstance(got, polylimit.PolylimitError)
        assert type(got) is ERRORS[got.kind]
        return {
            "kind": got.kind,
            "message": str(got),
            "field": getattr(got, "field", None),
            "value": getattr(got, "value", None),
            "key": getattr(got, "key", None),
        }
    if kind == "unit":
        assert got is None
    if kind == "bool":
        assert isinstance(got, bool)
    if kind == "count":
        assert isinstance(got, int) and not isinstance(got, bool)
    return got


@pytest.mark.parametrize("record", VECTORS["records"], ids=lambda r: r["name"])
def test_record(record: Dict[str, Any]) -> None:
    assert set(record) == RECORD_FIELDS, set(record) ^ RECORD_FIELDS
    [(ctx, got)] = _polylimit._read_records(bytes.fromhex(record["hex"]))
    assert ctx == record["ctx"]
    assert as_expected(record["kind"], got) == record["value"]


def test_the_batch_is_every_record_in_order() -> None:
    got = _polylimit._read_records(bytes.fromhex(VECTORS["batch"]))
    assert [ctx for ctx, _ in got] == [r["ctx"] for r in VECTORS["records"]]
    for (_, value), record in zip(got, VECTORS["records"]):
        assert as_expected(record["kind"], value) == record["value"]


def test_a_malformed_batch_is_a_value_error() -> None:
    first = bytes.fromhex(VECTORS["records"][0]["hex"])
    with pytest.raises(ValueError, match="record"):
        _polylimit._read_records(first[:-1])
