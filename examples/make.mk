# The example apps (FastAPI, Express, Fastify, Go net/http, Spring Boot) and
# what they run on: the Python module, the Node addon, the Go binary, the
# Spring Boot jar. Included by the root
# Makefile; `make demo` runs them, tests/e2e tests them.
EXAMPLES_DIR := examples
GO_EXAMPLE := $(CARGO_TARGET_DIR)/examples/go-example
SPRING_EXAMPLE := $(CARGO_TARGET_DIR)/examples/spring-example.jar

.PHONY: examples-build examples-node examples-go examples-spring

examples-build: python-build examples-node examples-go examples-spring

## express, fastify, koa, hono, nestjs, grpc-node, and polylimit linked from bindings-node.
examples-node: node-build
	@cd $(EXAMPLES_DIR) && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  npm ci --no-audit --no-fund --loglevel=error; else echo "examples/node_modules up to date"; fi

examples-go: go-deps go-capi
	cd $(EXAMPLES_DIR)/go && $(GO_DEBUG_ENV) $(GO) vet ./... && $(GO_DEBUG_ENV) $(GO) build -o $(GO_EXAMPLE) .

## The Spring Boot app as an executable jar (`java -jar`), on the polylimit
## and polylimit-spring jars jvm-install puts into the Maven repository.
examples-spring: jvm-install
	cd $(EXAMPLES_DIR)/spring && $(MVN) -q -B package -Dpolylimit.build.dir=$(CARGO_TARGET_DIR)/examples/spring-build
	cp $(CARGO_TARGET_DIR)/examples/spring-build/spring-example.jar $(SPRING_EXAMPLE)
