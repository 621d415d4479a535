'use strict';
// A fetch that honours Retry-After. The rules (the parsing of Retry-After and
// the wait) are polylimit's core, through the addon, as Python's
// polylimit.client, Go's bindings-go/client and the JVM's RetryAfterClient call
// them; this file keeps only the fetch, the sleep and the clock.
//
// On a response whose status is in `statuses` (429 and 503 by default) the
// request is sent again (a status other than 429, which may come after the app
// processed the request, only for an idempotent method: GET, HEAD, OPTIONS,
// PUT, DELETE, unless `retryNonIdempotent: true`) after the response's Retry-After (whole seconds, or an
// HTTP-date), plus a random jitter of up to `jitter` times that wait (never
// earlier than the server asked). It gives up and returns the last response
// when the response has no readable Retry-After (the server did not say when:
// no guessing), when Retry-After is longer than `maxWaitMs`, after `maxRetries`
// retries, when the wait would end more than `budgetMs` after the first
// attempt, or when the body cannot be sent again (a ReadableStream body).
// The request's AbortSignal also aborts the wait.

const native = require('./native');

// The core's defaults (core/src/client.rs), in JavaScript's names and ms.
const DEFAULTS = Object.freeze(native.retryDefaults());

/**
 * Milliseconds to wait from `nowMs` per a Retry-After value: whole seconds
 * (digits only), or an HTTP-date (a date in the past is 0); null for a missing
 * or unreadable value.
 */
function parseRetryAfter(value, nowMs) {
  if (value === null || value === undefined) return null;
  return native.parseRetryAfter(String(value), nowMs);
}

/** The options with the defaults, checked by the core (a RangeError naming the field and value). */
function check(options) {
  const o = { ...DEFAULTS, ...options };
  if (!Array.isArray(o.statuses)) throw new TypeError(`statuses: ${JSON.stringify(o.statuses)} is not a list`);
  try {
    o.native = new native.NativeRetryOptions({
      maxRetries: o.maxRetries, maxWaitMs: o.maxWaitMs, budgetMs: o.budgetMs, jitter: o.jitter, statuses: o.statuses,
      retryNonIdempotent: o.retryNonIdempotent,
    });
  } catch (e) {
    throw Object.assign(new RangeError(e.message), { field: e.field, value: e.value });
  }
  return o;
}

/** Milliseconds to wait before retrying, or null to give up (see the file comment). */
function waitFor(o, method, status, headers, retries, startedMs) {
  return o.native.waitMs(String(method ?? 'GET'), status, headers.get('retry-after') ?? null, retries, startedMs, o.now(), o.random());
}

function abortError(signal) {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** Waits `ms`, or rejects with the signal's reason when it aborts first. */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortError(signal));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A body fetch can send again: none, a string, bytes, a Blob, FormData, URLSearchParams. */
function replayable(init) {
  const body = init?.body;
  if (body === undefined || body === null) return true;
  return !(typeof ReadableStream !== 'undefined' && body instanceof ReadableStream) &&
    typeof body[Symbol.asyncIterator] !== 'function';
}

/**
 * `retryFetch(fetch, { maxRetries, maxWaitMs, budgetMs, jitter, statuses, retryNonIdempotent })`:
 * a fetch-compatible function honouring Retry-After. `fetchFn` defaults to
 * the global fetch; `sleep(ms, signal)`, `now()` and `random()` can be given
 * (tests).
 */
function retryFetch(fetchFn, options) {
  if (typeof fetchFn !== 'function') {
    options = fetchFn ?? options;
    fetchFn = (...args) => globalThis.fetch(...args);
  }
  const o = check({ sleep, now: Date.now, random: Math.random, ...options });
  return async function fetchWithRetry(input, init) {
    const isRequest = typeof Request !== 'undefined' && input instanceof Request;
    const signal = init?.signal ?? (isRequest ? input.signal : undefined);
    const canReplay = replayable(init);
    const method = init?.method ?? (isRequest ? input.method : 'GET');
    const started = o.now();
    for (let retries = 0; ; retries += 1) {
      // A Request's body is read by fetch: send a copy, keep the original.
      const response = await fetchFn(isRequest ? input.clone() : input, init);
      const wait = canReplay ? waitFor(o, method, response.status, response.headers, retries, started) : null;
      if (wait === null) return response;
      await response.body?.cancel().catch(() => {});
      await o.sleep(wait, signal);
    }
  };
}

/**
 * The wait (ms) retryFetch makes after a response with `status` and the
 * Retry-After value `retryAfter`, `retries` retries into a request begun at
 * `startedMs`; null when it would give up and return the response.
 */
function retryWait(options, { method = 'GET', status, retryAfter = null, retries = 0, startedMs }) {
  const o = check({ now: Date.now, random: Math.random, ...options });
  const headers = { get: (name) => (name.toLowerCase() === 'retry-after' ? retryAfter : null) };
  return waitFor(o, method, status, headers, retries, startedMs ?? o.now());
}

module.exports = { retryFetch, retryWait, parseRetryAfter, DEFAULTS };
module.exports.default = retryFetch;
