# bindings-python: the pyo3 abi3 wheel, built once as the manylinux2014 wheel
# that ships (maturin + zig) and installed into the checkout's .venv, its pytest
# suite (vectors on memory + real Redis, FastAPI over uvicorn) and its release
# artifacts (that wheel and an sdist) in $(DIST).
PY_DIR := bindings-python
PY_VENV := $(CURDIR)/.venv
PY := $(PY_VENV)/bin/python
# Rust triples `make dist` builds for (the Node and Go parts read the same).
DIST_TARGETS ?= x86_64-unknown-linux-gnu
PY_HOST := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
# The host's wheel is linked by zig against glibc 2.17 symbols (a genuine
# manylinux2014 wheel from any host) with core-release's linker and C compiler
# ($(RELEASE_ENV)), in the same target dir, on core-release's compile of the
# core and its dependencies: maturin runs `cargo rustc --crate-type cdylib`,
# and a cdylib alone makes cargo compile every dependency for LTO as bitcode
# only, a second release tree beside core-release's (whose rlib roots keep
# object code too); the cargo of $(PY_CARGO_SHIM) drops that `--crate-type
# cdylib`, so the crate builds as its manifest's cdylib + rlib, as the Node and
# JVM libraries do (cross-crate LTO as theirs: none across crates), and its
# Cargo.toml declares what the other bindings add to the shared tree. The
# sdist test builds through it too. Other triples are cross-built with
# maturin's own zig. Stripping is set in pyproject.toml.
PY_CARGO_SHIM := $(CARGO_TARGET_DIR)/maturin-cargo
PY_CARGO_REAL := $(shell command -v $(CARGO))
PY_WHEEL_FLAGS := --release --compatibility manylinux2014 --quiet
PY_WHEELHOUSE := $(CARGO_TARGET_DIR)/python-wheels
PY_MATURIN = cd $(PY_DIR) && $(PY_MATURIN_ENV) PATH="$(PY_VENV)/bin:$$PATH" maturin
PY_SDIST = $(DIST)/polylimit-$(POLYLIMIT_VERSION).tar.gz

.PHONY: python-deps python-build python-test python-bench python-dist python-sdist-test

## A venv with maturin (+ ziglang, auditwheel), pytest, FastAPI, uvicorn, httpx and the benchmark peers.
python-deps:
	@test -x $(PY) || python3 -m venv $(PY_VENV)
	@$(PY) -m pip install -q --disable-pip-version-check -r $(PY_DIR)/requirements-dev.txt

# One wheel for a triple into $(PY_WHEELHOUSE)/<triple>/ (cargo does nothing
# when the sources did not change; maturin then only repacks the wheel).
python-wheel-$(PY_HOST): zig-wrappers python-cargo-shim
python-wheel-$(PY_HOST): PY_MATURIN_ENV = $(RELEASE_ENV) PATH="$(PY_CARGO_SHIM):$$PATH"
python-wheel-%: python-deps
	rm -rf $(PY_WHEELHOUSE)/$*
	$(PY_MATURIN) build $(PY_WHEEL_FLAGS) $(if $(filter $(PY_HOST),$*),,--zig) --target $* --out $(PY_WHEELHOUSE)/$*

.PHONY: python-cargo-shim
python-cargo-shim:
	@mkdir -p $(PY_CARGO_SHIM) && printf '%s\n' '#!/bin/bash' \
	  '# bindings-python/make.mk: cargo for maturin, without its `rustc --crate-type cdylib`.' \
	  'args=(); rest=; skip=' \
	  'for a in "$$@"; do' \
	  '  if [ -n "$$rest" ]; then args+=("$$a"); elif [ "$$a" = -- ]; then rest=1; args+=("$$a");' \
	  '  elif [ -n "$$skip" ]; then skip=; [ "$$a" = cdylib ] || args+=(--crate-type "$$a");' \
	  '  elif [ "$$a" = --crate-type ]; then skip=1; else args+=("$$a"); fi' \
	  'done' \
	  'exec $(PY_CARGO_REAL) "$${args[@]}"' > $(PY_CARGO_SHIM)/cargo.new \
	  && chmod +x $(PY_CARGO_SHIM)/cargo.new && mv $(PY_CARGO_SHIM)/cargo.new $(PY_CARGO_SHIM)/cargo

## The host's release wheel, installed into the venv: the suites test the shipped artifact.
python-build: python-wheel-$(PY_HOST)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --force-reinstall $(PY_WHEELHOUSE)/$(PY_HOST)/polylimit-*.whl

python-test: python-build redis-server
	cd $(PY_DIR) && $(PY) -m pytest -q

python-bench: python-build redis-server
	cd $(PY_DIR) && $(PY) bench/bench.py

## The wheels for $(DIST_TARGETS) and the sdist into $(DIST), each wheel checked
## by auditwheel (manylinux_2_17 for its arch) and every member list by check_dist.py.
python-dist: python-build $(addprefix python-wheel-,$(filter-out $(PY_HOST),$(DIST_TARGETS)))
	mkdir -p $(DIST) && rm -f $(DIST)/polylimit-*.whl $(PY_SDIST)
	set -e; for t in $(DIST_TARGETS); do \
	  w=$$(ls $(PY_WHEELHOUSE)/$$t/polylimit-$(POLYLIMIT_VERSION)-cp39-abi3-manylinux*.whl); \
	  arch=$${t%%-*}; \
	  $(PY_VENV)/bin/auditwheel show $$w | tr -s ' \n' ' ' | grep -q "consistent with the following platform tag: \"manylinux_2_17_$$arch\"" \
	    || { $(PY_VENV)/bin/auditwheel show $$w; echo "python-dist: $$w is not manylinux_2_17_$$arch" >&2; exit 1; }; \
	  cp $$w $(DIST)/; done
	$(PY_MATURIN) sdist --out $(DIST) >/dev/null
	$(PY) $(PY_DIR)/check_dist.py $(POLYLIMIT_VERSION) $(DIST)/polylimit-$(POLYLIMIT_VERSION)-*.whl $(PY_SDIST)

## The sdist built from source in a fresh venv, as pip does where no wheel fits
## (Rust + a C compiler). Its crates compile from the sdist's copy; the
## crates.io dependencies come from the host wheel's build (same target,
## linker, features and crate type: a cold build of the whole tree took
## minutes and tested nothing of the sdist more).
python-sdist-test: python-dist python-cargo-shim
	rm -rf $(CARGO_TARGET_DIR)/sdist-test && python3 -m venv $(CARGO_TARGET_DIR)/sdist-test/venv
	cd $(CARGO_TARGET_DIR)/sdist-test && $(RELEASE_ENV) CARGO_BUILD_TARGET=$(RELEASE_TRIPLE) PATH="$(PY_CARGO_SHIM):$$PATH" \
	  venv/bin/pip install -q --disable-pip-version-check $(PY_SDIST) \
	  && venv/bin/python -c "import polylimit, sys; v = polylimit.__version__; print('sdist build:', v); sys.exit(v != '$(POLYLIMIT_VERSION)')"

BINDING_DEPS += python-deps
BINDING_TESTS += python-test
BINDING_BENCHES += python-bench
BINDING_DISTS += python-dist
