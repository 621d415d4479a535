# Cross-language end-to-end tests: the example apps on one real redis-server.
.PHONY: e2e-test

e2e-test: examples-build redis-server
	$(PY) -m pytest -q -p no:cacheprovider tests/e2e
