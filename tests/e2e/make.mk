# Cross-language end-to-end tests: the example apps on one real redis-server.
.PHONY: e2e-test e2e-sync-driver sync-bench

# The Go process of the local-with-sync measurement (tests/e2e/sync_run.py).
SYNC_GO_DRIVER := $(CARGO_TARGET_DIR)/e2e/sync-driver
SYNC_GO_DRIVER_RELEASE := $(CARGO_TARGET_DIR)/e2e/sync-driver-release

## Two processes, whole files each (a file's module fixtures, e.g. a cluster,
## start once): the suite mostly waits (slow handlers, leases, app starts),
## about a third of a core for five minutes in one process.
E2E_WORKERS ?= 2
e2e-test: examples-build redis-server e2e-sync-driver
	$(PY) -m pytest -q -p no:cacheprovider -n $(E2E_WORKERS) --dist loadfile tests/e2e

e2e-sync-driver: go-deps $(GO_APPS_CAPI)
	cd tests/e2e/sync/go && $(GO_APPS_VET) ./... && $(GO_APPS_BUILD) -o $(SYNC_GO_DRIVER) .

## Synced vs exact on one key, Python, Node and Go processes mixed, 10 s each (issue 19).
sync-bench: python-build node-build go-capi-release redis-server
	cd tests/e2e/sync/go && $(GO_RELEASE_ENV) $(GO) build -tags polylimit_release -o $(SYNC_GO_DRIVER_RELEASE) .
	POLYLIMIT_SYNC_GO_DRIVER=$(SYNC_GO_DRIVER_RELEASE) $(PY) tests/e2e/sync_run.py --seconds 10 --bench

BINDING_BENCHES += sync-bench
