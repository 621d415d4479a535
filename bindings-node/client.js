'use strict';
// A fetch that honours Retry-After (pure JavaScript: no native addon). The same
// rules as Python's polylimit.client and Go's bindings-go/client.
//
// On a response whose status is in `statuses` (429 and 503 by default) the
// request is sent again after the response's Retry-After (whole seconds, or an
// HTTP-date), plus a random jitter of up to `jitter` times that wait (never
// earlier than the server asked). It gives up and returns the last response
// when the response has no readable Retry-After (the server did not say when:
// no guessing), when Retry-After is longer than `maxWaitMs`, after `maxRetries`
// retries, when the wait would end more than `budgetMs` after the first
// attempt, or when the body cannot be sent again (a ReadableStream body).
// The request's AbortSignal also aborts the wait.

const DEFAULTS = Object.freeze({
  maxRetries: 3,
  maxWaitMs: 60_000,
  budgetMs: 120_000,
  jitter: 0.1,
  statuses: [429, 503],
});

const ASCTIME = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$/;
// IMF-fixdate, RFC 850 and asctime, each as RFC 9110 §5.6.7 spells it.
const HTTP_DATE = [
  /^[A-Za-z]{3}, \d\d [A-Za-z]{3} \d{4} \d\d:\d\d:\d\d GMT$/,
  /^[A-Za-z]{6,9}, \d\d-[A-Za-z]{3}-\d\d \d\d:\d\d:\d\d GMT$/,
  ASCTIME,
];

/**
 * Milliseconds to wait from `nowMs` per a Retry-After value: whole seconds
 * (digits only), or an HTTP-date (a date in the past is 0); null for a missing
 * or unreadable value.
 */
function parseRetryAfter(value, nowMs) {
  if (value === null || value === undefined) return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  if (!HTTP_DATE.some((re) => re.test(text))) return null;
  // asctime carries no zone: HTTP-dates are GMT.
  const when = Date.parse(ASCTIME.test(text) ? `${text} GMT` : text);
  if (Number.isNaN(when)) return null;
  return Math.max(0, when - nowMs);
}

function check(options) {
  const o = { ...DEFAULTS, ...options };
  const nonNegative = (name) => {
    if (typeof o[name] !== 'number' || !(o[name] >= 0)) {
      throw new RangeError(`${name}: ${JSON.stringify(o[name])} is not a non-negative number`);
    }
  };
  ['maxRetries', 'maxWaitMs', 'budgetMs'].forEach(nonNegative);
  if (typeof o.jitter !== 'number' || !(o.jitter >= 0 && o.jitter <= 1)) {
    throw new RangeError(`jitter: ${JSON.stringify(o.jitter)} is not a fraction from 0 to 1`);
  }
  if (!Array.isArray(o.statuses)) throw new TypeError(`statuses: ${JSON.stringify(o.statuses)} is not a list`);
  return o;
}

/** Milliseconds to wait before retrying, or null to give up (see the file comment). */
function waitFor(o, status, headers, retries, startedMs) {
  if (!o.statuses.includes(status) || retries >= o.maxRetries) return null;
  const now = o.now();
  const delay = parseRetryAfter(headers.get('retry-after'), now);
  if (delay === null || delay > o.maxWaitMs) return null;
  const wait = Math.min(delay * (1 + o.jitter * o.random()), Math.max(delay, o.maxWaitMs));
  if (now + wait - startedMs > o.budgetMs) return null;
  return wait;
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
 * `retryFetch(fetch, { maxRetries, maxWaitMs, budgetMs, jitter, statuses })`:
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
    const started = o.now();
    for (let retries = 0; ; retries += 1) {
      // A Request's body is read by fetch: send a copy, keep the original.
      const response = await fetchFn(isRequest ? input.clone() : input, init);
      const wait = canReplay ? waitFor(o, response.status, response.headers, retries, started) : null;
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
function retryWait(options, { status, retryAfter = null, retries = 0, startedMs }) {
  const o = check({ now: Date.now, random: Math.random, ...options });
  const headers = { get: (name) => (name.toLowerCase() === 'retry-after' ? retryAfter : null) };
  return waitFor(o, status, headers, retries, startedMs ?? o.now());
}

module.exports = { retryFetch, retryWait, parseRetryAfter, DEFAULTS };
module.exports.default = retryFetch;
