# bindings-python: the pyo3 wheel, built into the checkout's .venv by maturin,
# and its pytest suite (vectors on memory + real Redis, FastAPI over uvicorn).
PY_DIR := bindings-python
PY_VENV := $(CURDIR)/.venv
PY := $(PY_VENV)/bin/python

.PHONY: python-deps python-build python-test python-bench

## A venv with maturin, pytest, FastAPI, uvicorn, httpx and the benchmark peers.
python-deps:
	@test -x $(PY) || python3 -m venv $(PY_VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -r $(PY_DIR)/requirements-dev.txt

## The native module, installed (editable) into the venv. Release: the benchmark uses it too.
python-build: python-deps
	cd $(PY_DIR) && VIRTUAL_ENV=$(PY_VENV) PATH="$(PY_VENV)/bin:$$PATH" maturin develop --release --quiet

python-test: python-build redis-server
	cd $(PY_DIR) && $(PY) -m pytest -q

python-bench: python-build redis-server
	cd $(PY_DIR) && $(PY) bench/bench.py

BINDING_DEPS += python-deps
BINDING_TESTS += python-test
BINDING_BENCHES += python-bench
