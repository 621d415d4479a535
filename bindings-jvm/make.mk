# JVM binding: the uniffi cdylib (cargo, the shared target dir), its generated
# Kotlin (checked in; the `kotlin` cargo test fails when stale) and the Maven
# build (Java 17, Kotlin, JNA) whose jar carries the library at JNA's resource
# path linux-x86-64/. Included by the root Makefile.
JVM_DIR := bindings-jvm
MVN ?= mvn
# The Maven tests load the library from the jar layout staged here.
JVM_NATIVE_DIR := $(CARGO_TARGET_DIR)/jvm-native
JVM_PROFILE := $(if $(filter release,$(POLYLIMIT_PROFILE) $(POLYLIMIT_APPS_PROFILE)),release,debug)

.PHONY: jvm-deps jvm-native jvm-kotlin jvm-install jvm-test jvm-bench jvm-call-cost

## Java 17+ and Maven must be there (Maven downloads the plugins and
## dependencies once into ~/.m2, then builds offline).
jvm-deps:
	@command -v java >/dev/null && command -v $(MVN) >/dev/null || { echo "Java 17+ and Maven are required"; exit 1; }

## Regenerates src/main/kotlin/dev/polylimit/polylimit_jvm.kt with the
## crate's uniffi-bindgen from the built library.
jvm-kotlin:
	POLYLIMIT_UPDATE_KOTLIN=1 $(CARGO) test --quiet --workspace --test kotlin

## The library in JNA's layout, its debug info stripped (the debug build's
## 140 MB are mostly DWARF): rust-build's, or core-release's for release.
jvm-native: $(if $(filter release,$(JVM_PROFILE)),core-release,rust-build)
	mkdir -p $(JVM_NATIVE_DIR)/linux-x86-64
	strip --strip-debug -o $(JVM_NATIVE_DIR)/linux-x86-64/libpolylimit_jvm.so $(CARGO_TARGET_DIR)/$(JVM_PROFILE)/libpolylimit_jvm.so

## The polylimit jar (the library inside) and the framework modules' jars
## (Spring MVC, WebFlux, Ktor, grpc-java: one reactor, frameworks.xml) into
## the Maven repository (~/.m2), untested: what the example apps build on.
## $(JVM_INSTALL_FLAGS) adds to both Maven runs.
JVM_INSTALL_FLAGS ?= -DskipTests
jvm-install: jvm-deps jvm-native
	cd $(JVM_DIR) && $(MVN) -q -B install -Dpolylimit.native.dir=$(JVM_NATIVE_DIR) $(JVM_INSTALL_FLAGS)
	cd $(JVM_DIR) && $(MVN) -q -B -f frameworks.xml install $(JVM_INSTALL_FLAGS)

## The crate's Rust test that the Kotlin is up to date (its unit tests, that
## errors map one to one and panics are caught, run in rust-test: a `cargo
## test -p polylimit-jvm` would compile the core once more, see rust-build),
## then jvm-install with the tests: the JUnit suite
## on the packaged jar layout (the conformance vectors on memory and on a real
## redis-server), the core jar into ~/.m2, then the framework modules'
## suites (spring/: a real app on a loopback port; webflux/, ktor/: the HTTP
## vectors through the adapter on memory and Redis; grpc/: the gRPC vectors
## through the interceptor on a loopback server) and their jars. (The flags
## reach jvm-install as a prerequisite: `make test` installs once, tested.)
jvm-test: JVM_INSTALL_FLAGS =
jvm-test: jvm-deps jvm-native redis-server jvm-install
	$(CARGO) test --quiet --workspace --test kotlin

BINDING_DEPS += jvm-deps
BINDING_TESTS += jvm-test

## The benchmark (bench/, a plain Java main): check() on a real redis-server
## beside Bucket4j's Lettuce proxy manager (decisions/s at 64 in flight,
## latency at 1/32/256), and a Spring Boot app with the filter beside the same
## app unlimited. On the release build of the library, staged apart from the
## tests' debug one; the jars it runs are installed without their tests.
JVM_BENCH_NATIVE_DIR := $(CARGO_TARGET_DIR)/jvm-native-release
jvm-bench: jvm-deps redis-server
	$(MAKE) --no-print-directory jvm-install POLYLIMIT_PROFILE=release JVM_NATIVE_DIR=$(JVM_BENCH_NATIVE_DIR) JVM_INSTALL_FLAGS=-Dmaven.test.skip=true
	cd $(JVM_DIR)/bench && $(MVN) -q -B package dependency:build-classpath
	cd $(JVM_DIR)/bench && java -cp target/classes:$$(cat target/classpath.txt) dev.polylimit.bench.Bench

BINDING_BENCHES += jvm-bench

## The JVM's release artifacts in $(DIST): polylimit-<v>.jar (the release
## library, stripped, at linux-x86-64/) and polylimit-<framework>-<v>.jar
## (spring, webflux, ktor, grpc), each with its .pom (the core jar is installed into the local Maven repository
## first: the Spring module resolves it there). The core jar's runtime class
## path (JNA, the Kotlin standard library, coroutines) goes to
## $(JVM_DIST_STAGE)/classpath.txt for the clean room (tests/dist).
JVM_DIST_STAGE := $(CARGO_TARGET_DIR)/jvm-dist
# The framework modules (frameworks.xml), each polylimit-<name>-<v>.jar.
JVM_FRAMEWORKS := spring webflux ktor grpc otel
JVM_POM_VERSION = $(shell sed -n '0,/<version>/s/.*<version>\(.*\)<\/version>.*/\1/p' $(JVM_DIR)/pom.xml)

.PHONY: jvm-dist
jvm-dist: jvm-deps core-release
	@[ "$(JVM_POM_VERSION)" = "$(POLYLIMIT_VERSION)" ] || { echo "jvm-dist: pom.xml says $(JVM_POM_VERSION), Cargo.toml $(POLYLIMIT_VERSION)"; exit 1; }
	mkdir -p $(JVM_DIST_STAGE)/native/linux-x86-64 $(DIST)
	strip --strip-all -o $(JVM_DIST_STAGE)/native/linux-x86-64/libpolylimit_jvm.so $(CARGO_TARGET_DIR)/release/libpolylimit_jvm.so
	cd $(JVM_DIR) && $(MVN) -q -B install -Dmaven.test.skip=true -Dmaven.resources.overwrite=true -Dpolylimit.native.dir=$(JVM_DIST_STAGE)/native \
	  && $(MVN) -q -B dependency:build-classpath -DincludeScope=runtime -Dmdep.outputFile=$(JVM_DIST_STAGE)/classpath.txt
	python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("linux-x86-64/libpolylimit_jvm.so"))' \
	  $(JVM_DIR)/target/polylimit-$(POLYLIMIT_VERSION).jar | cmp - $(JVM_DIST_STAGE)/native/linux-x86-64/libpolylimit_jvm.so
	cd $(JVM_DIR) && $(MVN) -q -B -f frameworks.xml package -Dmaven.test.skip=true
	cp $(JVM_DIR)/target/polylimit-$(POLYLIMIT_VERSION).jar $(JVM_DIR)/pom.xml $(DIST)/ && mv $(DIST)/pom.xml $(DIST)/polylimit-$(POLYLIMIT_VERSION).pom
	for m in $(JVM_FRAMEWORKS); do \
	  cp $(JVM_DIR)/$$m/target/polylimit-$$m-$(POLYLIMIT_VERSION).jar $(DIST)/ && cp $(JVM_DIR)/$$m/pom.xml $(DIST)/polylimit-$$m-$(POLYLIMIT_VERSION).pom || exit 1; \
	done

BINDING_DISTS += jvm-dist

## Process CPU per call of each fast native call beside the generated call it
## replaces, on memory and on a real redis-server (CallCostBench, a JUnit
## class tagged `bench` that `make test` leaves out; it prints, asserts
## nothing). On the release build of the library, like jvm-bench.
## POLYLIMIT_CALL_COST_ROUNDS sets the rounds.
jvm-call-cost: jvm-deps redis-server
	$(MAKE) --no-print-directory jvm-native POLYLIMIT_PROFILE=release JVM_NATIVE_DIR=$(JVM_BENCH_NATIVE_DIR)
	cd $(JVM_DIR) && $(MVN) -q -B test -Dpolylimit.native.dir=$(JVM_BENCH_NATIVE_DIR) -Dpolylimit.excludedGroups= -Dgroups=bench -Dtest=CallCostBench -Dsurefire.failIfNoSpecifiedTests=false
