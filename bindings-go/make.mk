# Go binding: the C ABI crate (capi/, a static library + cbindgen header) and
# the cgo package. Included by the root Makefile.
GO ?= go
GO_DIR := bindings-go
GO_NATIVE_LIBS := -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# The framework adapters and the OpenTelemetry bridge, each a module of its own (gin, echo and grpc need a
# newer Go than the base package's 1.23; a net/http user never gets them).
GO_ADAPTERS := ginlimit echolimit grpclimit otellimit
# Go's build cache does not look at the bytes of the static library cgo links,
# only at the flags: a define naming the library's build time makes each new
# core a new cache key, so no Go binary or test links a stale core.
go_core_env = CGO_CFLAGS="-O2 -g -DPOLYLIMIT_CORE_BUILD=$(shell stat -c %Y $(CARGO_TARGET_DIR)/$(1)/libpolylimit_capi.a 2>/dev/null || echo 0)"
GO_DEBUG_ENV = $(call go_core_env,debug)
GO_RELEASE_ENV = $(call go_core_env,release)
# The example apps and e2e's Go driver: on rust-build's library, or on
# core-release's with POLYLIMIT_APPS_PROFILE=release (make test).
GO_APPS_CAPI := $(if $(filter release,$(POLYLIMIT_APPS_PROFILE)),go-capi-release,go-capi)
GO_APPS_BUILD = $(if $(filter release,$(POLYLIMIT_APPS_PROFILE)),$(GO_RELEASE_ENV) $(GO) build -tags polylimit_release,$(GO_DEBUG_ENV) $(GO) build)
GO_APPS_VET = $(if $(filter release,$(POLYLIMIT_APPS_PROFILE)),$(GO_RELEASE_ENV) $(GO) vet -tags polylimit_release,$(GO_DEBUG_ENV) $(GO) vet)

.PHONY: go-deps go-header go-capi go-capi-release go-abi-test go-test go-bench

## The Go toolchain must be there; the main package has no dependencies,
## the benchmark module downloads go-redis and redis_rate, each adapter its framework.
go-deps:
	@command -v $(GO) >/dev/null || { echo "Go 1.23+ is required (https://go.dev/dl)"; exit 1; }
	@$(GO) version
	cd $(GO_DIR)/bench && $(GO) mod download
	@set -e; for m in $(GO_ADAPTERS); do (cd $(GO_DIR)/$$m && $(GO) mod download); done

## Regenerates capi/include/polylimit.h with cbindgen (the header test in
## `cargo test` fails when the checked-in copy is stale). After rust-build,
## which compiled the test: alone it waited on cargo's lock while rust-build
## ran, holding one of `make test`'s jobs for nothing.
go-header: rust-build
	POLYLIMIT_UPDATE_HEADER=1 $(CARGO) test --quiet --workspace --test header

## The static library cgo links by default: rust-build's (cargo's debug profile).
go-capi: go-header rust-build

## The release one: core-release's (shared with the JVM's).
go-capi-release: go-header core-release

## The C ABI alone, from C.
go-abi-test: go-capi
	cc -Wall -Werror -std=c11 -I$(GO_DIR)/capi/include $(GO_DIR)/capi/tests/abi.c \
	  $(CARGO_TARGET_DIR)/debug/libpolylimit_capi.a $(GO_NATIVE_LIBS) -o $(CARGO_TARGET_DIR)/polylimit-abi-test
	$(CARGO_TARGET_DIR)/polylimit-abi-test

go-test: go-deps go-capi go-abi-test
	@# Not `tee /dev/stderr`: reopening stderr truncates a log file it points to.
	@cd $(GO_DIR) && unformatted="$$(gofmt -l .)" && test -z "$$unformatted" || { echo "gofmt: $$unformatted need formatting"; exit 1; }
	cd $(GO_DIR) && $(GO_DEBUG_ENV) $(GO) vet ./... && $(GO_DEBUG_ENV) $(GO) test -race -count=1 ./...
	@set -e; for m in $(GO_ADAPTERS); do echo "cd $(GO_DIR)/$$m && go vet && go test"; \
	  (cd $(GO_DIR)/$$m && $(GO_DEBUG_ENV) $(GO) vet ./... && $(GO_DEBUG_ENV) $(GO) test -race -count=1 ./...); done
	cd $(GO_DIR)/bench && $(GO_DEBUG_ENV) $(GO) vet -tags polylimit_release ./...

go-bench: go-deps go-capi-release
	cd $(GO_DIR)/bench && $(GO_RELEASE_ENV) $(GO) run -tags polylimit_release .

BINDING_DEPS += go-deps
BINDING_TESTS += go-test
BINDING_BENCHES += go-bench

# The released module: the stripped release static library of each platform
# inside it (build/<goos>-<goarch>/), served from dist/goproxy/ as a Go module
# proxy serves a tag. x86_64 links the host's release build; other targets
# are cross-built with cargo-zigbuild (the Node dist's zig tools); the
# toolchain's rust-objcopy strips every architecture.
DIST_TARGETS ?= x86_64-unknown-linux-gnu
GO_DIST_STAGE := $(CARGO_TARGET_DIR)/go-dist

.PHONY: go-dist
go-dist: go-capi-release $(if $(filter-out x86_64-unknown-linux-gnu,$(DIST_TARGETS)),node-dist-zig)
	@set -e; mkdir -p $(GO_DIST_STAGE); libs=; \
	for t in $(DIST_TARGETS); do \
	  case $$t in x86_64-unknown-linux-gnu) p=linux-amd64;; aarch64-unknown-linux-gnu) p=linux-arm64;; \
	    *) echo "go-dist: no Go platform for $$t"; exit 1;; esac; \
	  case $$t in \
	    x86_64-unknown-linux-gnu) lib=$(CARGO_TARGET_DIR)/release/libpolylimit_capi.a;; \
	    *) echo "go-dist: cargo zigbuild --release -p polylimit-capi --target $$t"; \
	       PATH="$(NODE_ZIG_VENV)/bin:$$PATH" CARGO_TARGET_DIR=$(GO_DIST_STAGE)/cargo \
	         $(CARGO) zigbuild --quiet --release -p polylimit-capi --target $$t; \
	       lib=$(GO_DIST_STAGE)/cargo/$$t/release/libpolylimit_capi.a;; \
	  esac; \
	  mkdir -p $(GO_DIST_STAGE)/$$p; \
	  LD_LIBRARY_PATH="$(NODE_RUSTC_SYSROOT)/lib" $(NODE_RUST_OBJCOPY) --strip-debug $$lib $(GO_DIST_STAGE)/$$p/libpolylimit_capi.a; \
	  libs="$$libs --lib $$p=$(GO_DIST_STAGE)/$$p/libpolylimit_capi.a"; \
	done; \
	python3 $(GO_DIR)/dist.py --version $(POLYLIMIT_VERSION) --out $(DIST)/goproxy $$libs

BINDING_DISTS += go-dist
