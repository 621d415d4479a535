# polylimit-server's tests from the outside (issue 36): a Go module of its own
# (tests/gateway) with Envoy's generated RLS client (go-control-plane) and
# grpc-go. Included by the root Makefile.
GATEWAY_DIR := tests/gateway
# envoyproxy/ratelimit, the peer of the benchmark, built from its Go module
# (the module proxy's latest when this was written); nothing of it is committed.
GATEWAY_PEER_VERSION := v1.4.1-0.20260122083618-3fb702589d36
GATEWAY_PEER := $(CARGO_TARGET_DIR)/gateway-peer/service_cmd

.PHONY: gateway-deps gateway-test gateway-peer gateway-bench

gateway-deps: go-deps
	cd $(GATEWAY_DIR) && $(GO) mod download

## The HTTP vectors through gRPC on memory and Redis, one budget over gRPC,
## /check, nginx (tests/nginx/site.conf) and the FastAPI and Go apps, the
## faults; on rust-build's target/debug/polylimit-server (server/tests runs
## the binary, so `cargo test --no-run` links it).
gateway-test: gateway-deps rust-build python-build examples-go redis-server nginx
	@cd $(GATEWAY_DIR) && unformatted="$$(gofmt -l .)" && test -z "$$unformatted" || { echo "gofmt: $$unformatted need formatting"; exit 1; }
	cd $(GATEWAY_DIR) && $(GO) vet ./... && POLYLIMIT_GATEWAY_PYTHON=$(PY) $(GO) test -count=1 ./...

gateway-peer: gateway-deps
	@test -x $(GATEWAY_PEER) && $(GO) version -m $(GATEWAY_PEER) | grep -q 'mod.*github.com/envoyproxy/ratelimit.*$(GATEWAY_PEER_VERSION)' || { \
	  echo "building envoyproxy/ratelimit $(GATEWAY_PEER_VERSION) from the Go module proxy"; \
	  GOBIN=$(dir $(GATEWAY_PEER)) $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(GATEWAY_PEER_VERSION); }

## envoyproxy/ratelimit beside polylimit-server (release) on one Redis.
GATEWAY_BENCH_FLAGS ?= -seconds 2 -rounds 3
gateway-bench: gateway-peer redis-server
	$(CARGO) build --release --quiet -p polylimit-server
	cd $(GATEWAY_DIR) && $(GO) run ./bench $(GATEWAY_BENCH_FLAGS)

BINDING_DEPS += gateway-deps
BINDING_TESTS += gateway-test
BINDING_BENCHES += gateway-bench
