## The API reference of each language (docs/reference/api.md), read from the
## bindings' doc comments by tests/docs/api_reference.py, and rustdoc for the core.
## `make docs-test` fails on a public item without a doc comment or a stale page.
.PHONY: api-docs api-docs-check
api-docs:
	python3 tests/docs/api_reference.py
	RUSTDOCFLAGS="-D warnings" cargo doc -p polylimit --no-deps --quiet
	@echo "rustdoc: $(or $(CARGO_TARGET_DIR),target)/doc/polylimit/index.html"
api-docs-check:
	python3 tests/docs/api_reference.py --check
docs-test: api-docs-check
