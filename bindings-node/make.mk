# Node binding: npm deps, the napi addon (built by @napi-rs/cli, which runs
# cargo and downloads nothing), node:test suite, benchmarks. Included by the
# root Makefile.
NODE_DIR := bindings-node
# `npm run build` is `napi build --platform --release`; POLYLIMIT_PROFILE=debug
# runs `npm run build:debug` (the same without --release).
NODE_BUILD_SCRIPT := $(if $(filter debug,$(POLYLIMIT_PROFILE)),build:debug,build)

.PHONY: node-deps node-build node-test node-bench

# The release addon is core-release's build for the host (linked by zig
# against glibc $(RELEASE_GLIBC), see node-dist): napi runs cargo in its
# environment and finds the crates Fresh. Other triples: node-dist.
DIST_TARGETS ?= x86_64-unknown-linux-gnu
NODE_DIST_STAGE := $(CARGO_TARGET_DIR)/node-dist
NODE_ZIG_VENV ?= $(PY_VENV)
NODE_HOST := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')
NODE_RELEASE := $(if $(filter debug,$(POLYLIMIT_PROFILE)),,yes)

## npm packages at the versions of package-lock.json (skipped when node_modules
## matches it). `npm install`, not `npm ci`: some registries lack a few of the
## other-platform optional packages of @napi-rs/cli's dependencies, npm then
## leaves them out of the lock, and `npm ci` refuses such a lock as out of sync.
node-deps:
	@command -v node >/dev/null || { echo "node (>= 18) is required"; exit 1; }
	@cd $(NODE_DIR) && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  npm install --no-audit --no-fund --loglevel=error; else echo "node_modules up to date"; fi

## The addon and its loader (cargo decides whether anything needs rebuilding).
## The release addon is the one `make dist` ships (see node-dist: linked by
## zig against glibc $(RELEASE_GLIBC)), built once: the suites test it.
node-build: node-deps $(if $(NODE_RELEASE),core-release)
	cd $(NODE_DIR) && CARGO="$(CARGO)" CARGO_TERM_QUIET=true $(if $(NODE_RELEASE),$(RELEASE_ENV)) \
	  npm run --silent $(NODE_BUILD_SCRIPT) $(if $(NODE_RELEASE),-- --target $(RELEASE_TRIPLE))

node-test: node-build redis-server
	cd $(NODE_DIR) && node --test --test-concurrency=1 test/*.test.js

node-bench: node-build redis-server
	cd $(NODE_DIR) && node bench/check.js && node bench/http.js

BINDING_DEPS += node-deps
BINDING_TESTS += node-test
BINDING_BENCHES += node-bench

## The npm packages of a release into $(DIST): polylimit-<v>.tgz (the JS, the
## generated loader, the types; optionalDependencies on every platform package
## of package.json's napi.targets) and polylimit-<platform>-<v>.tgz, holding the
## stripped addon, for each Rust triple of DIST_TARGETS. Linux glibc addons are
## linked by zig against glibc $(RELEASE_GLIBC), so they load on any
## distribution since then. The host's addon is node-build's (core-release's
## build: one release build for the suites and the package); other triples
## are cross-built here (`napi build -x`, i.e. cargo-zigbuild; ziglang and
## cargo-zigbuild come from PyPI into Python's venv) in a target dir of their
## own (cargo hashes the linker into every fingerprint).
## The platform package.json files come from `napi create-npm-dirs`;
## scripts/dist.js stamps the version, packs, and fails on a file list other
## than expected.
NODE_RUSTC_SYSROOT = $(shell rustc --print sysroot)
NODE_RUST_OBJCOPY = $(NODE_RUSTC_SYSROOT)/lib/rustlib/$(NODE_HOST)/bin/rust-objcopy

.PHONY: node-dist node-dist-zig
node-dist-zig: python-deps
	@[ -x $(NODE_ZIG_VENV)/bin/cargo-zigbuild ] || { echo "no cargo-zigbuild in $(NODE_ZIG_VENV) (bindings-python/requirements-dev.txt installs it)"; exit 1; }

node-dist: node-build node-dist-zig
	@[ -z "$(filter debug,$(POLYLIMIT_PROFILE))" ] || { echo "node-dist: ships release addons (POLYLIMIT_PROFILE=debug)"; exit 1; }
	@set -e; cd $(NODE_DIR); addons=; \
	for t in $(DIST_TARGETS); do \
	  out=$(NODE_DIST_STAGE)/$$t; rm -rf $$out; \
	  if [ $$t = $(NODE_HOST) ]; then \
	    echo "node-dist: $$t: node-build's addon"; mkdir -p $$out && cp polylimit.*.node $$out/; \
	  else \
	    case $$t in *-linux-gnu) zt=$$t.$(RELEASE_GLIBC);; *) zt=$$t;; esac; \
	    echo "node-dist: napi build --release -x --target $$zt"; \
	    PATH="$(NODE_ZIG_VENV)/bin:$$PATH" CARGO_TARGET_DIR=$(NODE_DIST_STAGE)/cargo CARGO_TERM_QUIET=true \
	      node_modules/.bin/napi build --platform --release -x --target $$zt --no-js --output-dir $$out >/dev/null; \
	  fi; \
	  LD_LIBRARY_PATH="$(NODE_RUSTC_SYSROOT)/lib" $(NODE_RUST_OBJCOPY) --strip-all $$out/polylimit.*.node $$out.node; \
	  addons="$$addons --addon $$t=$$out.node"; \
	done; \
	rm -f $(DIST)/polylimit-$(POLYLIMIT_VERSION).tgz $(DIST)/polylimit-*-$(POLYLIMIT_VERSION).tgz; \
	node scripts/dist.js --version $(POLYLIMIT_VERSION) --dist $(DIST) --stage $(NODE_DIST_STAGE)/stage $$addons

BINDING_DISTS += node-dist
