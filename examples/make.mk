# The example apps (FastAPI, Express, Fastify, Go net/http, gin, echo, Spring
# Boot, WebFlux, Ktor, the grpc-go and grpc-java Greeters) and what they run
# on: the Python module, the Node addon, the Go binaries, the JVM jars. Included by the root
# Makefile; `make demo` runs them, tests/e2e tests them.
EXAMPLES_DIR := examples
SPRING_EXAMPLE := $(CARGO_TARGET_DIR)/examples/spring-example.jar

.PHONY: examples-build examples-node examples-go examples-spring examples-jvm

examples-build: python-build examples-node examples-go examples-spring examples-jvm

## express, fastify, koa, hono, nestjs, grpc-node, and polylimit linked from bindings-node.
examples-node: node-build
	@cd $(EXAMPLES_DIR) && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  npm ci --no-audit --no-fund --loglevel=error; else echo "examples/node_modules up to date"; fi

## net/http, gin, echo and the gRPC Greeter (grpc-go): target/examples/<dir>-example.
examples-go: go-deps $(GO_APPS_CAPI)
	@set -e; for d in go gin echo grpc-go; do echo "examples/$$d: go vet, go build"; \
	  (cd $(EXAMPLES_DIR)/$$d && $(GO_APPS_VET) ./... && $(GO_APPS_BUILD) -o $(CARGO_TARGET_DIR)/examples/$$d-example .); done

## The Spring Boot app as an executable jar (`java -jar`), on the polylimit
## and polylimit-spring jars jvm-install puts into the Maven repository.
examples-spring: jvm-install
	cd $(EXAMPLES_DIR)/spring && $(MVN) -q -B package -Dpolylimit.build.dir=$(CARGO_TARGET_DIR)/examples/spring-build
	cp $(CARGO_TARGET_DIR)/examples/spring-build/spring-example.jar $(SPRING_EXAMPLE)

## The WebFlux and Ktor apps and the grpc-java Greeter as executable jars
## (target/examples/webflux-example.jar, ktor-example.jar, grpc-java-example.jar),
## on the jars jvm-install puts into the Maven repository.
examples-jvm: jvm-install
	cd $(EXAMPLES_DIR)/webflux && $(MVN) -q -B clean package -Dpolylimit.build.dir=$(CARGO_TARGET_DIR)/examples/webflux-build
	cp $(CARGO_TARGET_DIR)/examples/webflux-build/webflux-example.jar $(CARGO_TARGET_DIR)/examples/
	cd $(EXAMPLES_DIR)/ktor && $(MVN) -q -B clean package -Dpolylimit.build.dir=$(CARGO_TARGET_DIR)/examples/ktor-build
	cp $(CARGO_TARGET_DIR)/examples/ktor-build/ktor-example.jar $(CARGO_TARGET_DIR)/examples/
	cd $(EXAMPLES_DIR)/grpc-java && $(MVN) -q -B clean package -Dpolylimit.build.dir=$(CARGO_TARGET_DIR)/examples/grpc-java-build
	cp $(CARGO_TARGET_DIR)/examples/grpc-java-build/grpc-java-example.jar $(CARGO_TARGET_DIR)/examples/
