# A real nginx (Debian's package) with auth_request to polylimit-server's
# /check, in front of the Go example app (tests/nginx/nginx_test.py).
.PHONY: nginx nginx-test

nginx:
	@command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { \
	  echo "installing nginx (apt)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq nginx >/dev/null; }
	@PATH="$$PATH:/usr/sbin" nginx -v

## The nginx site of docs/server.md in front of the Go example app answers
## as the app's own middleware does (status, rate-limit headers, body).
nginx-test: nginx rust-build examples-go
	PATH="$$PATH:/usr/sbin" POLYLIMIT_SERVER_BIN=$(CARGO_TARGET_DIR)/debug/polylimit-server python3 tests/nginx/nginx_test.py

BINDING_TESTS += nginx-test
