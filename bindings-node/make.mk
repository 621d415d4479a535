# Node binding: npm deps, the napi addon (cargo, nothing downloaded by the
# napi CLI), node:test suite, benchmarks. Included by the root Makefile.
NODE_DIR := bindings-node
NODE_ADDON := $(NODE_DIR)/polylimit.$(shell node -p 'process.platform + "-" + process.arch' 2>/dev/null).node

.PHONY: node-deps node-build node-test node-bench

## npm packages (skipped when node_modules matches package-lock.json).
node-deps:
	@command -v node >/dev/null || { echo "node (>= 18) is required"; exit 1; }
	@cd $(NODE_DIR) && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  npm ci --no-audit --no-fund --loglevel=error; else echo "node_modules up to date"; fi

## The addon (cargo decides whether anything needs rebuilding).
node-build: node-deps
	cd $(NODE_DIR) && CARGO="$(CARGO)" node scripts/build.js

node-test: node-build redis-server
	cd $(NODE_DIR) && node --test --test-concurrency=1 test/*.test.js

node-bench: node-build redis-server
	cd $(NODE_DIR) && node bench/check.js && node bench/express.js

BINDING_DEPS += node-deps
BINDING_TESTS += node-test
BINDING_BENCHES += node-bench
