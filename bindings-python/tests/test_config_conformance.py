"""The configuration vectors of ``tests/conformance/config/``, as the Rust runner
(``core/tests/config_conformance.rs``) reads them: each case's options, under Python's
(snake_case) names, go through ``polylimit.effective_config`` and resolve to the
expected effective configuration (a subset) or to a ``ConfigError`` naming the field."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from conftest import vectors_dir

import polylimit

CONFIG_DIR = vectors_dir() / "config"


def load_cases() -> List[Tuple[str, Dict[str, Any]]]:
    cases = []
    for path in sorted(CONFIG_DIR.glob("*.json")):
        for case in json.loads(path.read_text())["cases"]:
            cases.append((f"{path.stem}: {case['name']}", case))
    return cases


def options_for(case: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The options Python passes for ``case``, or None when it is not written for Python."""
    if "options" in case:
        if "snake" not in case["options"]:
            return None
        options = dict(case["options"]["snake"])
    else:
        options = {}
    if "rules" in case:
        options["rules"] = case["rules"]
    # Rules files are named relative to the vector directory.
    if isinstance(options.get("rules_file"), str):
        options["rules_file"] = str(CONFIG_DIR / options["rules_file"])
    return options


CASES = [(name, case, options) for name, case in load_cases() if (options := options_for(case)) is not None]


def contains(actual: Any, expected: Any, path: str) -> None:
    """``expected`` is found in ``actual``: objects by the keys it lists, lists item by item."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, want in expected.items():
            assert key in actual, f"{path}.{key} is missing in {actual}"
            contains(actual[key], want, f"{path}.{key}")
    elif isinstance(expected, list) and isinstance(actual, list) and len(actual) == len(expected):
        for i, (got, want) in enumerate(zip(actual, expected)):
            contains(got, want, f"{path}[{i}]")
    else:
        # serde_json's equality, as the Rust runner: a bool is not 1, an integer is not a float.
        same = type(actual) is type(expected) and actual == expected
        assert same, f"{path}: got {actual!r}, expected {expected!r}"


@pytest.fixture
def case_env(request) -> Iterator[None]:
    """The case's ``env`` set in ``os.environ`` for the case, restored after."""
    env: Dict[str, str] = request.param
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_at_least_thirty_cases_run_for_python() -> None:
    assert len(CASES) >= 30, f"{len(CASES)} configuration vectors for Python"


@pytest.mark.parametrize(
    "case, options, case_env",
    [(case, options, case.get("env", {})) for _, case, options in CASES],
    ids=[name for name, _, _ in CASES],
    indirect=["case_env"],
)
def test_configuration_vector(case: Dict[str, Any], options: Dict[str, Any], case_env: None) -> None:
    expect = case["expect"]
    if "config" in expect:
        config = polylimit.effective_config(**options)
        contains(config, expect["config"], "config")
        return
    want = expect["error"]["field"]
    if isinstance(want, dict):
        want = want.get("snake")
    with pytest.raises(polylimit.ConfigError) as err:
        polylimit.effective_config(**options)
    assert err.value.kind == "config"
    assert err.value.field == want, str(err.value)
