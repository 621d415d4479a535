/* The C ABI on its own: links include/polylimit.h and the static library
 * (`make go-abi-test`), without the Go wrapper. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "polylimit.h"

static int failures = 0;

/* Little-endian integers of a packed record (wire::packed). */
static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      failures++;                                                    \
    }                                                                \
  } while (0)

int main(void) {
  polylimit_limiter_t *limiter = NULL;
  polylimit_error_t *err = NULL;
  int32_t rc = polylimit_limiter_build(
      "{\"Policy\": {\"Algorithm\": \"gcra\", \"Rate\": \"10/s\", \"Burst\": 2}, \"Store\": \"\"}", &limiter, &err);
  CHECK(rc == POLYLIMIT_OK && limiter != NULL && err == NULL);

  polylimit_decision_t d;
  const char *key = "user:1";
  for (int i = 0; i < 2; i++) {
    rc = polylimit_limiter_check_blocking(limiter, (const uint8_t *)key, strlen(key), 1, 1000000, &d, &err);
    CHECK(rc == POLYLIMIT_OK && d.allowed && d.remaining == (uint64_t)(1 - i) && d.limit == 2);
  }
  rc = polylimit_limiter_check_blocking(limiter, (const uint8_t *)key, strlen(key), 1, 1000000, &d, &err);
  CHECK(rc == POLYLIMIT_OK && !d.allowed && d.has_retry_after && d.retry_after_ms == 100 && d.reset_after_ms == 200);
  CHECK(strcmp(polylimit_source_name(d.source), "store") == 0);

  /* Every source has its own name; past the last one, "unknown". */
  const char *source_names[] = {"store", "local", "fail_open", "fail_closed", "penalty", "allowlist", "denylist", "adaptive"};
  const polylimit_source_t source_values[] = {
      POLYLIMIT_SOURCE_STORE,       POLYLIMIT_SOURCE_LOCAL,     POLYLIMIT_SOURCE_FAIL_OPEN, POLYLIMIT_SOURCE_FAIL_CLOSED,
      POLYLIMIT_SOURCE_PENALTY,     POLYLIMIT_SOURCE_ALLOWLIST, POLYLIMIT_SOURCE_DENYLIST,  POLYLIMIT_SOURCE_ADAPTIVE};
  for (int i = 0; i < 8; i++) {
    CHECK(source_values[i] == i && strcmp(polylimit_source_name(source_values[i]), source_names[i]) == 0);
  }
  CHECK(strcmp(polylimit_source_name(8), "unknown") == 0 && strcmp(polylimit_source_name(-1), "unknown") == 0);

  /* The core's error kinds, each with its status and name, then POLYLIMIT_OK. */
  const char *kind_names[] = {"config", "store_unavailable", "store", "closed", "internal"};
  const int32_t kind_statuses[] = {POLYLIMIT_CONFIG, POLYLIMIT_STORE_UNAVAILABLE, POLYLIMIT_STORE, POLYLIMIT_CLOSED,
                                   POLYLIMIT_INTERNAL};
  for (size_t i = 0; i < 5; i++) {
    CHECK(polylimit_error_kind_status(i) == kind_statuses[i] &&
          strcmp(polylimit_status_name(kind_statuses[i]), kind_names[i]) == 0);
  }
  CHECK(polylimit_error_kind_status(5) == POLYLIMIT_OK);
  CHECK(strcmp(polylimit_status_name(POLYLIMIT_INVALID_ARGUMENT), "invalid_argument") == 0 &&
        strcmp(polylimit_status_name(99), "unknown") == 0);

  /* Errors: a code, an owned message, the field of a config error. */
  rc = polylimit_limiter_check_blocking(limiter, (const uint8_t *)key, strlen(key), 0, -1, &d, &err);
  CHECK(rc == POLYLIMIT_CONFIG && err != NULL && err->code == POLYLIMIT_CONFIG && strcmp(err->field, "cost") == 0);
  polylimit_error_free(err);
  err = NULL;
  rc = polylimit_limiter_check_blocking(NULL, (const uint8_t *)key, strlen(key), 1, -1, &d, &err);
  CHECK(rc == POLYLIMIT_INVALID_ARGUMENT && err != NULL && err->field == NULL);
  polylimit_error_free(err);
  err = NULL;

  /* A call's completion with a cost: a negative cost is refused once the
     call is completed without it, so a malformed token is what a negative
     cost with it names (Go's suite names "cost" with a real token); a code
     that is no gRPC status (nor -1) is an invalid argument, a malformed
     token names "token". */
  polylimit_pending_t *done = NULL;
  const char *token = "not-a-token";
  rc = polylimit_limiter_try_complete_call_cost(limiter, (const uint8_t *)token, strlen(token), 0, true, -1, false, 0,
                                                &done, &err);
  CHECK(rc == POLYLIMIT_CONFIG && err != NULL && strcmp(err->field, "token") == 0 && done == NULL);
  polylimit_error_free(err);
  err = NULL;
  rc = polylimit_limiter_try_complete_call_cost(limiter, (const uint8_t *)token, strlen(token), 70000, true, 5, false, 0,
                                                &done, &err);
  CHECK(rc == POLYLIMIT_INVALID_ARGUMENT && err != NULL && done == NULL);
  polylimit_error_free(err);
  err = NULL;
  rc = polylimit_limiter_try_complete_call_cost(limiter, (const uint8_t *)token, strlen(token), -1, true, 5, false, 0,
                                                &done, &err);
  CHECK(rc == POLYLIMIT_CONFIG && err != NULL && strcmp(err->field, "token") == 0 && done == NULL);
  polylimit_error_free(err);
  err = NULL;

  char *metrics = NULL;
  rc = polylimit_limiter_metrics(limiter, &metrics, &err);
  CHECK(rc == POLYLIMIT_OK && strstr(metrics, "polylimit_") != NULL);
  polylimit_string_free(metrics);
  char *snapshot = NULL;
  rc = polylimit_limiter_metrics_snapshot(limiter, &snapshot, &err);
  CHECK(rc == POLYLIMIT_OK && strstr(snapshot, "\"families\"") != NULL && strstr(snapshot, "polylimit_requests_total") != NULL);
  polylimit_string_free(snapshot);
  rc = polylimit_limiter_metrics_snapshot(limiter, NULL, &err);
  CHECK(rc == POLYLIMIT_INVALID_ARGUMENT && err != NULL);
  polylimit_error_free(err);
  err = NULL;

  polylimit_limiter_close(limiter);
  polylimit_limiter_close(limiter);
  rc = polylimit_limiter_check_blocking(limiter, (const uint8_t *)key, strlen(key), 1, -1, &d, &err);
  CHECK(rc == POLYLIMIT_CLOSED && err != NULL && strcmp(err->message, "limiter is closed") == 0);
  polylimit_error_free(err);
  err = NULL;
  polylimit_limiter_free(limiter);

  polylimit_limiter_t *bad = NULL;
  rc = polylimit_limiter_build("{\"Policy\": {\"Rate\": \"ten/s\"}}", &bad, &err);
  CHECK(rc == POLYLIMIT_CONFIG && bad == NULL && strcmp(err->field, "Policy.Rate") == 0 &&
        strcmp(err->value, "\"ten/s\"") == 0);
  polylimit_error_free(err);

  /* The effective configuration: canonical names, durations from nanoseconds. */
  err = NULL;
  char *config = NULL;
  rc = polylimit_effective_config("{\"Policy\": {\"Rate\": \"1/s\"}, \"Timeout\": 250000000}", &config, &err);
  CHECK(rc == POLYLIMIT_OK && strstr(config, "\"timeout\":\"250ms\"") != NULL);
  polylimit_string_free(config);
  rc = polylimit_effective_config("{\"Timeout\": 1}", &config, &err);
  CHECK(rc == POLYLIMIT_CONFIG && strcmp(err->field, "Timeout") == 0);
  polylimit_error_free(err);

  /* The rules path. A middleware packs only the headers deciding may read:
     a rule's header dimension (any case), not the others. */
  err = NULL;
  rc = polylimit_limiter_build("{\"Rules\": \"policies: {api: {rate: 1/s, burst: 1}}\\n"
                               "rules: [{key: [ip], policy: api}, {key: ['header:x-api-key'], policy: api}]\\n\"}",
                               &limiter, &err);
  CHECK(rc == POLYLIMIT_OK);
  CHECK(polylimit_limiter_reads_header(limiter, (const uint8_t *)"X-API-Key", 9) == 1);
  CHECK(polylimit_limiter_reads_header(limiter, (const uint8_t *)"Accept", 6) == 0);
  CHECK(polylimit_limiter_reads_header(NULL, (const uint8_t *)"Accept", 6) == -POLYLIMIT_INVALID_ARGUMENT);
  CHECK(polylimit_limiter_reads_header(limiter, (const uint8_t *)"\xff", 1) == -POLYLIMIT_INVALID_ARGUMENT);
  /* No rule matches, keys or tiers by route: a middleware need not find it. */
  CHECK(polylimit_limiter_reads_route(limiter) == 0);
  CHECK(polylimit_limiter_reads_route(NULL) == -POLYLIMIT_INVALID_ARGUMENT);
  /* A reload swaps the rules in: what a binding remembered of them is stale. */
  CHECK(polylimit_limiter_rules_generation(limiter) == 0);
  CHECK(polylimit_limiter_reload(limiter, &err) == POLYLIMIT_OK);
  CHECK(polylimit_limiter_rules_generation(limiter) == 1);
  CHECK(polylimit_limiter_rules_generation(NULL) == -POLYLIMIT_INVALID_ARGUMENT);

  /* The packed path: a request in one buffer (absent strings, one header),
   * the outcome in the caller's buffer or, when it does not fit, in one the
   * library owns. */
  uint8_t packed[128];
  size_t n = 0;
  const char *fields[7] = {NULL, "/x", NULL, "203.0.113.8", NULL, NULL, NULL};
  for (int i = 0; i < 7; i++) {
    uint32_t len = fields[i] ? (uint32_t)strlen(fields[i]) : POLYLIMIT_ABSENT;
    memcpy(packed + n, &len, 4); /* little-endian on every platform cgo targets here */
    n += 4;
    if (fields[i]) {
      memcpy(packed + n, fields[i], len);
      n += len;
    }
  }
  const char *header[2] = {"Accept", "*" "/" "*"};
  uint32_t count = 1;
  memcpy(packed + n, &count, 4);
  n += 4;
  for (int i = 0; i < 2; i++) {
    uint32_t len = (uint32_t)strlen(header[i]);
    memcpy(packed + n, &len, 4);
    memcpy(packed + n + 4, header[i], len);
    n += 4 + len;
  }
  uint8_t out[512];
  size_t out_len = 0;
  uint8_t *owned = NULL;
  polylimit_pending_t *pending = NULL;
  rc = polylimit_limiter_try_check_request(limiter, packed, n, 0, 1700000000000, POLYLIMIT_HAS_NOW_MS, out, sizeof out,
                                           &out_len, &owned, &pending, &err);
  /* status 0 (allowed), no body, no delay, then the rate-limit headers. */
  CHECK(rc == POLYLIMIT_OK && owned == NULL && pending == NULL && out_len > 15 && out[0] == 0 && out[1] == 0 && out[2] == 0);
  rc = polylimit_limiter_try_check_request(limiter, packed, n, 0, 1700000000000, POLYLIMIT_HAS_NOW_MS, out, 4, &out_len,
                                           &owned, &pending, &err);
  /* Denied (429 = 0x1AD) with a body; too long for 4 bytes, so owned. */
  CHECK(rc == POLYLIMIT_OK && owned != NULL && out_len > 15 && owned[0] == 0xAD && owned[1] == 0x01 && owned[2] == 1);
  polylimit_bytes_free(owned, out_len);
  /* A peek (POLYLIMIT_PEEK) answers the same 429 and charges nothing; resetting the
     request forgets its one (policy, key), so the next request passes. */
  rc = polylimit_limiter_try_check_request(limiter, packed, n, 0, 1700000000000, POLYLIMIT_HAS_NOW_MS | POLYLIMIT_PEEK,
                                           out, sizeof out, &out_len, &owned, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && owned == NULL && pending == NULL && out[0] == 0xAD && out[1] == 0x01);
  size_t forgotten = 0;
  rc = polylimit_limiter_reset_request(limiter, packed, n, 0, &forgotten, &err);
  CHECK(rc == POLYLIMIT_OK && forgotten == 1);
  rc = polylimit_limiter_try_check_request(limiter, packed, n, 0, 1700000000000, POLYLIMIT_HAS_NOW_MS, out, sizeof out,
                                           &out_len, &owned, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && owned == NULL && out[0] == 0 && out[1] == 0);
  rc = polylimit_limiter_reset_request(limiter, packed, n, 0, NULL, &err);
  CHECK(rc == POLYLIMIT_INVALID_ARGUMENT && err != NULL);
  polylimit_error_free(err);
  err = NULL;
  rc = polylimit_limiter_try_check_request(limiter, packed, n - 1, 0, 0, 0, out, sizeof out, &out_len, &owned, &pending,
                                           &err);
  CHECK(rc == POLYLIMIT_INVALID_ARGUMENT && err != NULL);
  polylimit_error_free(err);
  err = NULL;
  polylimit_limiter_free(limiter);

  /* A rule keyed by route: the middleware finds the route. */
  rc = polylimit_limiter_build("{\"Rules\": \"policies: {api: {rate: 1/s}}\\nrules: [{key: [route, ip], policy: api}]\\n\"}",
                               &limiter, &err);
  CHECK(rc == POLYLIMIT_OK);
  CHECK(polylimit_limiter_reads_route(limiter) == 1);
  polylimit_limiter_free(limiter);

  /* A memory-store check is decided at once, without a pending operation. */
  rc = polylimit_limiter_build("{\"Policy\": {\"Rate\": \"1/s\", \"Burst\": 1}}", &limiter, &err);
  CHECK(rc == POLYLIMIT_OK);
  pending = NULL;
  /* A peek is decided at once too, and charges nothing. */
  rc = polylimit_limiter_try_peek(limiter, (const uint8_t *)key, strlen(key), 1, 1000000, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && pending == NULL && d.allowed && d.remaining == 0);
  rc = polylimit_limiter_try_check(limiter, (const uint8_t *)key, strlen(key), 1, 1000000, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && pending == NULL && d.allowed);
  rc = polylimit_limiter_try_check(limiter, (const uint8_t *)key, strlen(key), 1, 1000000, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && pending == NULL && !d.allowed);
  CHECK(polylimit_pending_submit(NULL, NULL, 0) == POLYLIMIT_INVALID_ARGUMENT);
  polylimit_pending_free(NULL);
  polylimit_limiter_free(limiter);

  /* Concurrency: an acquire takes a lease (JSON, opaque), a release (also
     through a clone, after the first handle is freed) gives it back once. */
  rc = polylimit_limiter_build("{\"Policy\": {\"Algorithm\": \"concurrency\", \"Limit\": 1, \"Lease\": 10000000000}}",
                               &limiter, &err);
  CHECK(rc == POLYLIMIT_OK);
  char *leases = NULL;
  rc = polylimit_limiter_try_acquire(limiter, (const uint8_t *)key, strlen(key), 1, 1000, &d, &leases, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && pending == NULL && d.allowed && d.limit == 1 && d.reset_after_ms == 10000 && leases != NULL);
  char *none = NULL;
  rc = polylimit_limiter_try_acquire(limiter, (const uint8_t *)key, strlen(key), 1, 1000, &d, &none, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && !d.allowed && none == NULL && d.retry_after_ms == 10000);
  rc = polylimit_limiter_try_check(limiter, (const uint8_t *)key, strlen(key), 1, 1000, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_CONFIG && err != NULL && strcmp(err->field, "policy") == 0);
  polylimit_error_free(err);
  err = NULL;
  polylimit_limiter_t *clone = NULL;
  CHECK(polylimit_limiter_clone(limiter, &clone, &err) == POLYLIMIT_OK && clone != NULL);
  polylimit_limiter_close(limiter);
  polylimit_limiter_free(limiter);
  uint64_t released = 99;
  rc = polylimit_limiter_try_release(clone, (const uint8_t *)leases, strlen(leases), 2000, &released, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && released == 1);
  rc = polylimit_limiter_try_release(clone, (const uint8_t *)leases, strlen(leases), 2000, &released, &pending, &err);
  CHECK(rc == POLYLIMIT_OK && released == 0);
  rc = polylimit_limiter_try_release(clone, (const uint8_t *)"[1]", 3, 2000, &released, &pending, &err);
  CHECK(rc == POLYLIMIT_CONFIG && err != NULL && strcmp(err->field, "leases") == 0);
  polylimit_error_free(err);
  err = NULL;
  rc = polylimit_limiter_try_acquire(NULL, (const uint8_t *)key, strlen(key), 1, 1000, &d, &leases, &pending, &err);
  CHECK(rc == POLYLIMIT_INVALID_ARGUMENT && err != NULL);
  polylimit_error_free(err);
  err = NULL;
  CHECK(polylimit_limiter_clone(NULL, &clone, NULL) == POLYLIMIT_INVALID_ARGUMENT);
  polylimit_string_free(leases);
  polylimit_limiter_free(clone);

  /* The bridge: an operation that waits for the store (one that accepts
     connections and never answers, until the timeout; on_store_error
     fail_open) comes back once as the packed decision record of its ctx,
     waking the host by one byte on its pipe. */
  int silent = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t addr_len = sizeof addr;
  CHECK(bind(silent, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(silent, 16) == 0 &&
        getsockname(silent, (struct sockaddr *)&addr, &addr_len) == 0);
  char options[256];
  snprintf(options, sizeof options,
           "{\"Policy\": {\"Rate\": \"10/s\", \"OnStoreError\": \"fail_open\"}, "
           "\"Store\": \"redis://127.0.0.1:%d\", \"Timeout\": 300000000}",
           ntohs(addr.sin_port));
  rc = polylimit_limiter_build(options, &limiter, &err);
  CHECK(rc == POLYLIMIT_OK);
  /* The sans-I/O path: the core gives the silent store's address and timeout,
     but no call while it has no live connection with its library loaded
     (the usual path decides); a memory limiter has no address. */
  char *host = NULL;
  uint16_t port = 0;
  uint64_t timeout_ms = 0;
  CHECK(polylimit_limiter_sans_io_address(limiter, &host, &port, &timeout_ms, &err) == POLYLIMIT_OK);
  CHECK(host != NULL && strcmp(host, "127.0.0.1") == 0 && port == ntohs(addr.sin_port) && timeout_ms == 300);
  polylimit_string_free(host);
  uint8_t call_bytes[256];
  size_t call_len = 1;
  polylimit_sans_io_call_t *call = (polylimit_sans_io_call_t *)&call_len;
  CHECK(polylimit_limiter_sans_io_start(limiter, (const uint8_t *)key, strlen(key), 1, -1, call_bytes,
                                        sizeof call_bytes, &call_len, &call, &err) == POLYLIMIT_OK);
  CHECK(call == NULL && call_len == 0);
  CHECK(polylimit_limiter_sans_io_start(limiter, (const uint8_t *)key, strlen(key), 1, -1, call_bytes,
                                        sizeof call_bytes, NULL, &call, &err) == POLYLIMIT_INVALID_ARGUMENT &&
        err != NULL);
  polylimit_error_free(err);
  err = NULL;
  int32_t state = -1;
  size_t used = 0;
  CHECK(polylimit_sans_io_finish(NULL, (const uint8_t *)":1\r\n", 4, &d, &state, &used, NULL) ==
        POLYLIMIT_INVALID_ARGUMENT);
  CHECK(polylimit_sans_io_unanswered(NULL, &d, &state, NULL) == POLYLIMIT_INVALID_ARGUMENT);
  polylimit_sans_io_call_free(NULL);
  /* The request's sans-I/O path, likewise: no call without a live
     connection, NULL out-pointers refused, NULL freed. */
  polylimit_sans_io_request_t *request_call = (polylimit_sans_io_request_t *)&call_len;
  call_len = 1;
  CHECK(polylimit_limiter_sans_io_request_start(limiter, packed, n, 0, 0, 0, call_bytes, sizeof call_bytes, &call_len,
                                                &request_call, &err) == POLYLIMIT_OK);
  CHECK(request_call == NULL && call_len == 0);
  CHECK(polylimit_limiter_sans_io_request_start(limiter, packed, n, 0, 0, 0, call_bytes, sizeof call_bytes, NULL,
                                                &request_call, &err) == POLYLIMIT_INVALID_ARGUMENT &&
        err != NULL);
  polylimit_error_free(err);
  err = NULL;
  uint8_t *request_owned = NULL;
  size_t request_out = 0;
  CHECK(polylimit_sans_io_request_finish(NULL, (const uint8_t *)":1\r\n", 4, out, sizeof out, &request_out,
                                         &request_owned, &state, &used, NULL) == POLYLIMIT_INVALID_ARGUMENT);
  CHECK(polylimit_sans_io_request_unanswered(NULL, out, sizeof out, &request_out, &request_owned, &state, NULL) ==
        POLYLIMIT_INVALID_ARGUMENT);
  polylimit_sans_io_request_free(NULL);
  CHECK(POLYLIMIT_SANS_IO_INCOMPLETE == 0 && POLYLIMIT_SANS_IO_DECIDED == 1 && POLYLIMIT_SANS_IO_USUAL == 2);
  polylimit_limiter_t *in_memory = NULL;
  CHECK(polylimit_limiter_build("{\"Policy\": {\"Rate\": \"10/s\"}}", &in_memory, &err) == POLYLIMIT_OK);
  host = (char *)&call_len;
  CHECK(polylimit_limiter_sans_io_address(in_memory, &host, &port, &timeout_ms, &err) == POLYLIMIT_OK && host == NULL);
  CHECK(polylimit_limiter_sans_io_start(in_memory, (const uint8_t *)key, strlen(key), 1, -1, call_bytes,
                                        sizeof call_bytes, &call_len, &call, &err) == POLYLIMIT_OK &&
        call == NULL);
  polylimit_limiter_free(in_memory);
  /* The calling thread waits for the record itself (ctx 0), in the caller's
     bytes or, when they are too few, in the library's; each limiter's first
     check waits for the silent store. */
  uint8_t waited[64];
  size_t waited_len = 0;
  uint8_t *waited_owned = NULL;
  polylimit_limiter_t *waiting = NULL;
  CHECK(polylimit_limiter_build(options, &waiting, &err) == POLYLIMIT_OK);
  rc = polylimit_limiter_try_check(waiting, (const uint8_t *)key, strlen(key), 1, -1, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING &&
        polylimit_pending_wait(pending, waited, sizeof waited, &waited_len, &waited_owned) == POLYLIMIT_OK);
  CHECK(waited_owned == NULL && waited_len == 8 + 1 + 1 + 5 * 8 + 1 && le64(waited) == 0 && waited[8] == 4 &&
        waited[9] == 1 && waited[waited_len - 1] == POLYLIMIT_SOURCE_FAIL_OPEN);
  polylimit_limiter_free(waiting);
  CHECK(polylimit_limiter_build(options, &waiting, &err) == POLYLIMIT_OK);
  rc = polylimit_limiter_try_check(waiting, (const uint8_t *)key, strlen(key), 1, -1, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING && polylimit_pending_wait(pending, NULL, 0, &waited_len, &waited_owned) == POLYLIMIT_OK);
  CHECK(waited_owned != NULL && waited_len == 8 + 1 + 1 + 5 * 8 + 1 && waited_owned[8] == 4);
  polylimit_bytes_free(waited_owned, waited_len);
  polylimit_limiter_free(waiting);
  CHECK(polylimit_limiter_build(options, &waiting, &err) == POLYLIMIT_OK);
  rc = polylimit_limiter_try_check(waiting, (const uint8_t *)key, strlen(key), 1, -1, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING && polylimit_pending_wait(pending, waited, sizeof waited, NULL, NULL) ==
                                       POLYLIMIT_INVALID_ARGUMENT);
  polylimit_limiter_free(waiting);
  CHECK(polylimit_pending_wait(NULL, waited, sizeof waited, &waited_len, &waited_owned) == POLYLIMIT_INVALID_ARGUMENT);
  int fds[2];
  CHECK(pipe(fds) == 0 && fcntl(fds[1], F_SETFL, O_NONBLOCK) == 0);
  polylimit_bridge_t *bridge = polylimit_bridge_open(fds[1]);
  CHECK(bridge != NULL);
  const uint8_t *records = NULL;
  size_t records_len = 0;
  CHECK(polylimit_bridge_take(bridge, &records, &records_len) == 0 && records_len == 0);
  pending = NULL;
  rc = polylimit_limiter_try_check(limiter, (const uint8_t *)key, strlen(key), 1, -1, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING && pending != NULL);
  CHECK(polylimit_pending_submit(pending, bridge, 0x0102030405060708ULL) == POLYLIMIT_PENDING);
  char byte;
  CHECK(read(fds[0], &byte, 1) == 1); /* blocks until the record is there */
  CHECK(polylimit_bridge_take(bridge, &records, &records_len) == 1);
  /* ctx, kind 4 (a decision), bits 1 (allowed), limit 10, remaining, reset,
     retry, delay, then the source: fail_open. */
  CHECK(records_len == 8 + 1 + 1 + 5 * 8 + 1);
  CHECK(le64(records) == 0x0102030405060708ULL && records[8] == 4 && records[9] == 1 && le64(records + 10) == 10);
  CHECK(records[records_len - 1] == POLYLIMIT_SOURCE_FAIL_OPEN);
  CHECK(polylimit_bridge_take(bridge, &records, &records_len) == 0);
  /* A bad argument consumes the pending operation and queues nothing. */
  rc = polylimit_limiter_try_check(limiter, (const uint8_t *)key, strlen(key), 1, -1, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING && polylimit_pending_submit(pending, NULL, 1) == POLYLIMIT_INVALID_ARGUMENT);
  polylimit_bridge_free(bridge);
  close(fds[0]);
  close(fds[1]);

  /* Without a pipe the host blocks in take_wait; an acquire's record
     (kind 6) is its decision and its leases. */
  bridge = polylimit_bridge_open(-1);
  CHECK(polylimit_bridge_take_wait(bridge, 10, &records, &records_len) == 0);
  rc = polylimit_limiter_try_peek(limiter, (const uint8_t *)key, strlen(key), 1, -1, &d, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING && polylimit_pending_submit(pending, bridge, 7) == POLYLIMIT_PENDING);
  CHECK(polylimit_bridge_take_wait(bridge, 10000, &records, &records_len) == 1);
  CHECK(records_len == 8 + 1 + 1 + 5 * 8 + 1 && le64(records) == 7 && records[8] == 4 && records[9] == 1);
  char *no_leases = NULL;
  rc = polylimit_limiter_try_acquire(limiter, (const uint8_t *)key, strlen(key), 1, -1, &d, &no_leases, &pending, &err);
  CHECK(rc == POLYLIMIT_PENDING && polylimit_pending_submit(pending, bridge, 8) == POLYLIMIT_PENDING);
  CHECK(polylimit_bridge_take_wait(bridge, 10000, &records, &records_len) == 1);
  CHECK(records_len == 8 + 1 + 1 + 5 * 8 + 1 + 4 && le64(records) == 8 && records[8] == 6 && records[9] == 1);
  CHECK(polylimit_bridge_take(NULL, &records, &records_len) == 0 && polylimit_bridge_take(bridge, NULL, NULL) == 0);
  polylimit_bridge_free(bridge);
  polylimit_bridge_free(NULL);
  polylimit_limiter_free(limiter);
  close(silent);

  polylimit_breaker_t *b = NULL;
  CHECK(polylimit_breaker_new(1, 0, 1, &b, &err) == POLYLIMIT_CONFIG && b == NULL && err != NULL);
  CHECK(strcmp(err->message, "cooldown: 0 is not a positive duration") == 0);
  polylimit_error_free(err);
  err = NULL;
  CHECK(polylimit_breaker_new(1, 60000000000LL, 1, &b, NULL) == POLYLIMIT_OK && b != NULL);
  polylimit_permit_t *p = polylimit_breaker_acquire(b);
  CHECK(p != NULL);
  polylimit_breaker_failure(b, p);
  CHECK(polylimit_breaker_state(b) == POLYLIMIT_BREAKER_OPEN && polylimit_breaker_acquire(b) == NULL);
  polylimit_breaker_free(b);

  if (failures) {
    fprintf(stderr, "abi: %d checks failed\n", failures);
    return 1;
  }
  printf("abi: all checks passed (polylimit %s)\n", polylimit_version());
  return 0;
}
