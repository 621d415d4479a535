# Node binding: npm deps, the napi addon (built by @napi-rs/cli, which runs
# cargo and downloads nothing), node:test suite, benchmarks. Included by the
# root Makefile.
NODE_DIR := bindings-node
# `npm run build` is `napi build --platform --release`; POLYLIMIT_PROFILE=debug
# runs `npm run build:debug` (the same without --release).
NODE_BUILD_SCRIPT := $(if $(filter debug,$(POLYLIMIT_PROFILE)),build:debug,build)

.PHONY: node-deps node-build node-test node-bench

## npm packages at the versions of package-lock.json (skipped when node_modules
## matches it). `npm install`, not `npm ci`: some registries lack a few of the
## other-platform optional packages of @napi-rs/cli's dependencies, npm then
## leaves them out of the lock, and `npm ci` refuses such a lock as out of sync.
node-deps:
	@command -v node >/dev/null || { echo "node (>= 18) is required"; exit 1; }
	@cd $(NODE_DIR) && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  npm install --no-audit --no-fund --loglevel=error; else echo "node_modules up to date"; fi

## The addon and its loader (cargo decides whether anything needs rebuilding).
node-build: node-deps
	cd $(NODE_DIR) && CARGO="$(CARGO)" CARGO_TERM_QUIET=true npm run --silent $(NODE_BUILD_SCRIPT)

node-test: node-build redis-server
	cd $(NODE_DIR) && node --test --test-concurrency=1 test/*.test.js

node-bench: node-build redis-server
	cd $(NODE_DIR) && node bench/check.js && node bench/http.js

BINDING_DEPS += node-deps
BINDING_TESTS += node-test
BINDING_BENCHES += node-bench
