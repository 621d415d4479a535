## The API reference of each language (docs/reference/api.md), read from the
## bindings' doc comments by tests/docs/api_reference.py (griffe for Python,
## go/doc for Go, the KDoc of the hand-written Kotlin), which fails on a public
## item without one; and the generated references the site serves: rustdoc for
## the core at api/rust/, TypeDoc for bindings-node/index.d.ts at api/node/ and
## Dokka for the Kotlin sources at api/jvm/ (built here, added to the site by
## tests/docs/api_html.py), mkdocstrings' Python page and `go doc -all` (built
## with the site). rustdoc fails on a public item without a doc comment by
## `#![deny(missing_docs)]` under -D warnings, TypeDoc by validation.notDocumented
## with treatWarningsAsErrors (tests/docs/typedoc.json). TypeDoc is a
## devDependency of tests/docs/package.json, not of the published npm package.
API_HTML := $(CARGO_TARGET_DIR)/api-html
export POLYLIMIT_API_HTML := $(API_HTML)
# The site build of `make docs`. Not --quiet: mkdocs then drops warnings before
# --strict counts them, and a broken link passes (docs-strict-check proves it fails).
MKDOCS_BUILD = NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
.PHONY: docs-strict-check
docs-test: docs-strict-check
docs-strict-check: docs
	@tmp=$$(mktemp -d) && mkdir $$tmp/docs && printf 'site_name: t\n' > $$tmp/mkdocs.yml \
	  && printf '[gone](gone.md)\n' > $$tmp/docs/index.md \
	  && if $(MKDOCS_BUILD) -f $$tmp/mkdocs.yml -d $$tmp/site >$$tmp/log 2>&1; then \
	    rm -rf $$tmp; echo "mkdocs build --strict passed a broken link"; exit 1; fi; \
	  grep -q "gone.md" $$tmp/log && rm -rf $$tmp && echo "docs-strict-check: a broken link fails the build"

.PHONY: api-docs api-docs-check api-html api-rust api-node api-jvm docs-deps-node docs-deps-python
api-docs api-docs-check: docs-deps-python
api-docs:
	$(PY) tests/docs/api_reference.py
api-docs-check:
	$(PY) tests/docs/api_reference.py --check
docs-deps-python: python-deps
	@$(PY) -m pip install -q --disable-pip-version-check -r tests/docs/requirements.txt
docs-test: api-docs-check

api-html: api-rust api-node api-jvm
docs: api-html
# The core's rustdoc: the `polylimit` lib and its example programs
# (core/examples), as `cargo doc --workspace --no-deps --examples` documents
# them, but against rust-build's libraries: tests/rustdoc.py runs rustdoc with
# rust-build's own command lines of those units (cargo doc compiled all 120
# dependencies once more in check mode, ~170 s of CPU on a fresh clone).
api-rust: rust-build
	RUSTDOCFLAGS="-D warnings" python3 tests/rustdoc.py $(CARGO_TARGET_DIR)/api-rustdoc
	@rm -rf $(API_HTML)/api/rust && mkdir -p $(API_HTML)/api && cp -r $(CARGO_TARGET_DIR)/api-rustdoc $(API_HTML)/api/rust
api-node: docs-deps-node
	cd tests/docs && node node_modules/typedoc/bin/typedoc --logLevel Warn --out $(API_HTML)/api/node
# Dokka (tests/docs/dokka/pom.xml): about 45 s of CPU.
api-jvm:
	@rm -rf $(API_HTML)/api/jvm
	cd tests/docs/dokka && mvn -q -B org.jetbrains.dokka:dokka-maven-plugin:2.2.0:dokka -Dapi.out=$(API_HTML)/api/jvm
docs-deps-node:
	@command -v node >/dev/null || { echo "node (>= 18) is required"; exit 1; }
	@cd tests/docs && if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then \
	  npm ci --no-audit --no-fund --loglevel=error; fi

## The Grafana dashboard (docs/grafana/polylimit-dashboard.json) names only
## metrics the core exports: tests/docs/test_dashboard.py reads each panel's
## PromQL and compares with a real limiter's families (on a real Redis).
.PHONY: dashboard-test
dashboard-test: python-build redis-server
	$(PY) -m pytest -q tests/docs/test_dashboard.py
docs-test: dashboard-test
