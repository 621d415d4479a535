'use strict';
// polylimit for Node.js: a thin layer over the napi addon. Every decision,
// key, header and body comes from the Rust core.
const native = require('./native');
const errors = require('./errors');
const { DECISION_RECORD_LEN, decisionInto, readBatch, scratchArray } = require('./outcome');

const { ConfigError, CircuitOpenError, fromNative, fromRecord } = errors;

/** The options object the addon reads (JavaScript's names; the core checks every field). */
function optionsObject(options) {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new ConfigError(`options: ${JSON.stringify(options)} is not an object`, 'options', String(options));
  }
  return options;
}

function call(fn) {
  try {
    return fn();
  } catch (e) {
    throw fromNative(e);
  }
}

/** A promise of the addon that resolves with null or an error record (JSON): rejects with the error. */
function settled(failure) {
  if (failure !== null && failure !== undefined) throw fromRecord(JSON.parse(failure));
}

function noop() {}

/**
 * The settle functions of the calls in flight, by id: `get`, `set`, `delete`, `size`, as a Map.
 * Not a Map: a Map that churns (one entry per request, deleted when settled) leaves its
 * replaced hash tables in the old generation with the entries they held, and those keep each
 * request's promise chain, outcome and response alive through the scavenges: under load every
 * scavenge promoted ~1.3 MB, and the GC helper threads took 3-4 us per request (1-1.6 with
 * this; the test `pending.test.js` watches the promotion).
 */
class Pending {
  constructor() {
    this.slots = Object.create(null);
    this.size = 0;
  }
  get(id) {
    return this.slots[id];
  }
  set(id, settle) {
    if (this.slots[id] === undefined) this.size++;
    this.slots[id] = settle;
  }
  delete(id) {
    if (this.slots[id] !== undefined) {
      this.size--;
      delete this.slots[id];
    }
  }
}

/**
 * Checks in flight by id, settled by batches from the addon (src/batch.rs).
 * The handlers close over this registry only, never over the limiter, so an
 * unreachable limiter is still garbage-collected.
 */
function inFlight() {
  const pending = new Pending();
  let next = 0;
  // The completion functions do not hold the process open; a timer does, while checks are in flight.
  let keepAlive;
  const idle = () => {
    if (pending.size === 0 && keepAlive !== undefined) {
      clearInterval(keepAlive);
      keepAlive = undefined;
    }
  };
  // Lent to the addon, which copies each batch's numbers into it (src/outcome.rs).
  const scratch = scratchArray();
  const settleHttp = (id, outcome) => {
    const settle = pending.get(id);
    pending.delete(id);
    settle.resolve(outcome);
  };
  const failHttp = (id, text) => {
    const settle = pending.get(id);
    pending.delete(id);
    settle.reject(fromRecord(JSON.parse(text)));
  };
  return {
    /** A promise settled by a batch; `send(id)` hands the check to the addon (a throw rejects it). */
    start(send) {
      return new Promise((resolve, reject) => {
        next = (next + 1) >>> 0;
        const id = next;
        pending.set(id, { resolve, reject });
        if (keepAlive === undefined) keepAlive = setInterval(noop, 1 << 30);
        try {
          send(id);
        } catch (e) {
          pending.delete(id);
          idle();
          reject(fromNative(e));
        }
      });
    },
    /** Rejects the checks `ids` with `error` (their batch could not start). */
    fail(ids, error) {
      for (const id of ids) {
        const settle = pending.get(id);
        pending.delete(id);
        if (settle) settle.reject(error);
      }
      idle();
    },
    onDecisions(batch) {
      for (let i = 0; i < batch.length; i += DECISION_RECORD_LEN) {
        const settle = pending.get(batch[i]);
        pending.delete(batch[i]);
        settle.resolve(decisionInto({}, batch, i, SOURCES));
      }
      idle();
    },
    scratch,
    /** A batch of request outcomes and errors (src/outcome.rs): settles their promises. */
    onHttp(nums, text) {
      readBatch(nums, scratch, text, SOURCES, settleHttp, failHttp);
      idle();
    },
  };
}

// The core's source names by a decision record's index (Source::ALL, src/decision.rs).
const SOURCES = native.sourceNames();

const REQUEST_NAMES = {
  apiKey: 'api_key',
  nowMs: 'now_ms',
  caseInsensitive: 'case_insensitive',
  ignoreTrailingSlash: 'ignore_trailing_slash',
};

/** A request object in JavaScript's names as the JSON text of the core's `RequestInfo`. */
function requestJson(request) {
  const info = {};
  for (const [name, value] of Object.entries(request || {})) {
    if (value !== undefined) info[REQUEST_NAMES[name] || name] = value;
  }
  return JSON.stringify(info);
}

/**
 * The native side's alert (JSON text) in JavaScript's names, handed to `onAnomaly`; a throw or a
 * rejected promise is counted (`polylimit_anomaly_callback_errors_total`), never reaches a request.
 * Holds the counter, not the limiter, so a limiter with a handler can still be collected.
 */
function anomalyHandler(onAnomaly, counter) {
  return (text) => {
    const fail = () => counter.errors && counter.errors.add();
    try {
      const e = JSON.parse(text);
      const event = {
        event: e.event, policy: e.policy, key: e.key, rate: e.rate, baseline: e.baseline,
        action: e.action, limitedTo: e.limited_to, atMs: e.at_ms, suppressed: e.suppressed,
      };
      const result = onAnomaly(event);
      if (result && typeof result.then === 'function') result.then(undefined, fail);
    } catch {
      fail();
    }
  };
}

class Limiter {
  /**
   * @param {object} options the core's options in JavaScript's names: `policy` | `policies` with `key`,
   * or `rules` (YAML/JSON text or an object) | `rulesFile` (a path), and `store`, `prefix`, `maxKeys`,
   * `timeout`, `connectTimeout`, `failureThreshold`, `cooldown`, `halfOpenProbes`, `trustedProxies`, … (README)
   */
  constructor(options) {
    const { onAnomaly, ...given } = optionsObject(options);
    if (onAnomaly !== undefined && typeof onAnomaly !== 'function') {
      throw new ConfigError(`onAnomaly: ${String(onAnomaly)} is not a function`, 'onAnomaly', String(onAnomaly));
    }
    this._native = call(() => new native.NativeLimiter(given));
    this._flight = inFlight();
    this._native.setCompletionHandlers(
      this._flight.onDecisions,
      this._flight.onHttp,
      this._flight.scratch,
    );
    // `check(key)` calls of one JavaScript turn, handed to the addon in one call (`_flushChecks`).
    this._queuedIds = [];
    this._queuedKeys = [];
    this._flushQueued = () => this._flushChecks();
    if (onAnomaly) {
      const counter = { errors: null };
      counter.errors = this._native.setAnomalyHandler(anomalyHandler(onAnomaly, counter));
    }
  }

  /**
   * Hands the queued `check(key)` calls to the addon in one call: the runtime wakes once and
   * writes their Redis commands together. Every other call to the addon flushes first, so the
   * store sees the calls in the order they were made.
   */
  _flushChecks() {
    const ids = this._queuedIds;
    if (ids.length === 0) return;
    const keys = this._queuedKeys;
    this._queuedIds = [];
    this._queuedKeys = [];
    try {
      this._native.checkMany(new Uint32Array(ids), keys);
    } catch (e) {
      this._flight.fail(ids, fromNative(e));
    }
  }

  /** A limiter from a rules file (YAML or JSON, SPEC §6): `new Limiter({ ...options, rulesFile: path })`. */
  static fromFile(path, options = {}) {
    return new Limiter({ ...optionsObject(options), rulesFile: path });
  }

  /** A limiter from the text (YAML or JSON) or object of a rules file: `new Limiter({ ...options, rules })`. */
  static fromRules(rules, options = {}) {
    return new Limiter({ ...optionsObject(options), rules });
  }

  /** Decides one request for `key`: `{ allowed, limit, remaining, resetAfterMs, retryAfterMs, delayMs, source }`. */
  check(key, options) {
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    if (options && (options.cost != null || options.nowMs != null)) {
      this._flushChecks();
      const { cost, nowMs } = options;
      return this._flight.start((id) => this._native.checkBatched(id, key, cost ?? undefined, nowMs ?? undefined));
    }
    return this._flight.start((id) => {
      if (this._queuedIds.length === 0) queueMicrotask(this._flushQueued);
      this._queuedIds.push(id);
      this._queuedKeys.push(key);
    });
  }

  /**
   * The decision `check(key, options)` would return now, charging nothing and recording no
   * penalty (not counted in the metrics): `{ allowed, limit, remaining, … }`.
   */
  peek(key, options) {
    this._flushChecks();
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    const { cost, nowMs } = options || {};
    return this._flight.start((id) => this._native.peekBatched(id, key, cost ?? undefined, nowMs ?? undefined));
  }

  /**
   * Decides an HTTP request by the rules (`{ method, path, route, peer, headers, user, apiKey, key, cost, nowMs }`):
   * `{ status, headers, body, delayMs, decisions }`.
   */
  checkRequest(request) {
    this._flushChecks();
    const info = requestJson(request);
    return this._flight.start((id) => this._native.checkRequestBatched(id, info));
  }

  /** The outcome `checkRequest(request)` would give now, charging nothing (not counted in the metrics). */
  peekRequest(request) {
    this._flushChecks();
    const info = requestJson(request);
    return this._flight.start((id) => this._native.peekRequestBatched(id, info));
  }

  /**
   * Forgets every (policy, key) that `checkRequest(request)` would charge (same rules, tiers and
   * keys), penalty blocks included: resolves with how many pairs were forgotten.
   */
  resetRequest(request) {
    this._flushChecks();
    let answer;
    try {
      answer = this._native.resetRequest(requestJson(request));
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
    return answer.then((text) => {
      const { count, error } = JSON.parse(text);
      if (error) throw fromRecord(error);
      return count;
    });
  }

  /**
   * checkRequest for the Express and Fastify middlewares: typed arguments instead of
   * a JSON text, and Node's `rawHeaders` (`[name, value, …]`) as they are. Internal.
   */
  /** A middleware's request, decided by `rule` (from `routeRule`) or else by the limiter's rules. Internal. */
  _checkHttp(rule, method, path, route, peer, rawHeaders, key, user, apiKey, caseInsensitive, ignoreTrailingSlash, nowMs) {
    this._flushChecks();
    return this._flight.start((id) =>
      this._native.checkHttpBatched(
        id,
        rule,
        method,
        path,
        route,
        peer,
        rawHeaders,
        key,
        user,
        apiKey,
        caseInsensitive,
        ignoreTrailingSlash,
        nowMs,
      ),
    );
  }

  /**
   * A rule for one route, checked through this limiter (same store, state, metrics and
   * `close()`): `key` names its key dimensions (`['ip']`, `'user'`, `'header:x-tenant'`, …),
   * `policy` one of this limiter's policies (default: all), `count` which responses it charges
   * (`'failed'`, `'successful'`, `['4xx', 503]`; default all). The defaults are the core's, the
   * same in every language: no `key` is `['ip']`, or `['key']` with `{ keyFunction: true }`
   * (a `keyGenerator`); `{ perRoute: true }` puts `route` first. An opaque object for the
   * middlewares (`rateLimit({ limiter, key, policy })`); bad input throws a ConfigError.
   */
  routeRule(key, policy, { keyFunction = false, perRoute = false, count } = {}) {
    const dims = key === undefined || key === null ? undefined : Array.isArray(key) ? key : [key];
    for (const dim of dims || []) {
      if (typeof dim !== 'string') {
        throw new ConfigError(`key: ${JSON.stringify(key)} is not a list of key dimensions`, 'key', String(key));
      }
    }
    if (policy !== undefined && policy !== null && typeof policy !== 'string') {
      const shown = JSON.stringify(policy);
      throw new ConfigError(`policy: ${shown} is not a policy name of this limiter`, 'policy', String(shown));
    }
    return call(() =>
      this._native.routeRule(dims, policy ?? undefined, Boolean(keyFunction), Boolean(perRoute), count ?? undefined),
    );
  }

  /**
   * Settles a request after its response: `token` is the outcome's `completion` (present when a
   * rule's `count` charges only some responses), `status` the response's status (null/undefined/0:
   * no response, counted as failed). The core gives back the charges whose rule does not count
   * that status. Never rejects because the store is down; rejects with a ConfigError naming
   * `token` when it is not one.
   */
  complete(token, status) {
    this._flushChecks();
    try {
      if (typeof token !== 'string') {
        throw new ConfigError(`token: ${String(token)} is not a completion token`, 'token', String(token));
      }
      return this._native.complete(token, status ? Number(status) : undefined).then(settled);
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
  }

  /**
   * Acquires `key`: a check that, for a concurrency policy, takes `cost` slots until released.
   * Resolves with `{ decision, lease }`; `lease` is null when denied or when no policy is a concurrency one.
   */
  acquire(key, options) {
    this._flushChecks();
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    const { cost, nowMs } = options || {};
    let started;
    try {
      started = this._native.acquire(key, cost ?? undefined, nowMs ?? undefined);
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
    return started.then((text) => {
      const answer = JSON.parse(text);
      if (answer.error) throw fromRecord(answer.error);
      const lease = answer.leases.length > 0 ? new Lease(this._native, answer.leases) : null;
      return { decision: answer.decision, lease };
    });
  }

  /** Forgets every policy's state for `key`. */
  reset(key) {
    this._flushChecks();
    try {
      return this._native.reset(String(key)).then(settled);
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
  }

  /**
   * Sets a per-key override: `key` is decided under `{ rate, burst }` instead
   * of `policy`'s numbers (by every process on the store) until removed or
   * until `ttl` (ms, or text like '10m') ends. Resolves with the override.
   */
  setOverride(key, options) {
    return this._override('set', key, options);
  }

  /** The override in force for `key` (under `options.policy`), or null. */
  getOverride(key, options) {
    return this._override('get', key, options);
  }

  /** Removes the override of `key` (under `options.policy`): whether one was in force. */
  removeOverride(key, options) {
    return this._override('remove', key, options);
  }

  _override(op, key, options) {
    this._flushChecks();
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    try {
      const spec = JSON.stringify(options ?? {}, (_, v) => (v === undefined ? null : v));
      return this._native.overrideCall(op, key, spec).then((text) => {
        const [failed, value] = JSON.parse(text);
        if (failed) throw fromRecord(value);
        if (value === null || typeof value !== 'object') return value;
        return {
          policy: value.policy,
          key: value.key,
          rate: value.rate,
          burst: value.burst,
          limit: value.limit,
          expiresAtMs: value.expires_at_ms,
        };
      });
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
  }

  /** The limiter's metrics in Prometheus text format. */
  metricsText() {
    return this._native.metricsText();
  }

  /** The store circuit breaker's state: `closed`, `open` or `half_open`. */
  get breakerState() {
    return this._native.breakerState();
  }

  /** Later checks reject with `ClosedError`. */
  close() {
    this._flushChecks();
    this._native.close();
  }

  get closed() {
    return this._native.closed;
  }
}

/**
 * The slots one allowed `acquire` took. `release()` gives them back (idempotent: later calls
 * resolve with 0); `await using lease = ...` releases at the end of the block where supported.
 */
class Lease {
  constructor(nativeLimiter, leases) {
    this._native = nativeLimiter;
    this._leases = JSON.stringify(leases);
  }

  /** Whether `release()` was called. */
  get released() {
    return this._leases === null;
  }

  /** Gives the slots back: resolves with how many leases were still live (`nowMs` for tests). */
  release(options) {
    const leases = this._leases;
    if (leases === null) return Promise.resolve(0);
    const { nowMs } = options || {};
    let started;
    try {
      started = this._native.release(leases, nowMs ?? undefined);
    } catch (e) {
      return Promise.reject(fromNative(e));
    }
    this._leases = null;
    return started.then((text) => {
      const answer = JSON.parse(text);
      if (answer.error) throw fromRecord(answer.error);
      return answer.released;
    });
  }
}
if (typeof Symbol.asyncDispose === 'symbol') {
  Lease.prototype[Symbol.asyncDispose] = function dispose() {
    return this.release().then(noop);
  };
}

/** A circuit breaker for your own downstream calls (the same one the store uses). */
class CircuitBreaker {
  /**
   * Every argument left out (undefined or null) is the core's default; the core checks each.
   * @param {number|object} threshold consecutive failures that open it, or `{ threshold, cooldown, halfOpenMax }`
   * @param {number|string} cooldown ms (or a duration like "30s") before probing
   * @param {number} halfOpenMax successful probes that close it
   */
  constructor(threshold, cooldown, halfOpenMax) {
    if (threshold && typeof threshold === 'object') ({ threshold, cooldown, halfOpenMax } = threshold);
    this._native = call(() => new native.NativeCircuitBreaker(threshold ?? null, cooldown ?? null, halfOpenMax ?? null));
  }

  /** `closed`, `open` or `half_open`. */
  get state() {
    return this._native.state;
  }

  /**
   * Calls `fn` unless the breaker is open. A throw (or rejection) of any value counts as a failure.
   * A promise that never settles holds its permit (and, half-open, its probe slot): give `fn` its own timeout.
   * With a `fallback`, its result is returned instead of throwing (it gets the error,
   * a `CircuitOpenError` when the call was not made).
   */
  async call(fn, fallback) {
    const permit = this._native.acquire();
    if (permit === null || permit === undefined) {
      const err = new CircuitOpenError();
      if (fallback) return fallback(err);
      throw err;
    }
    let value;
    try {
      value = await fn();
    } catch (e) {
      this._native.failure(permit);
      if (fallback) return fallback(e);
      throw e;
    }
    this._native.success(permit);
    return value;
  }
}

/**
 * The configuration `new Limiter(options)` would be built from, in canonical form (every option
 * under its rules-file name with its effective value, each policy with every field, the rules).
 * Bad options throw the ConfigError the constructor would.
 */
function effectiveConfig(options) {
  const given = optionsObject(options);
  return call(() => native.effectiveConfig(given));
}

module.exports = {
  Limiter,
  Lease,
  CircuitBreaker,
  effectiveConfig,
  ...errors,
};
delete module.exports.fromNative;
delete module.exports.fromRecord;
Object.defineProperty(module.exports, 'rateLimit', {
  enumerable: true,
  get: () => require('./express').rateLimit,
});
Object.defineProperty(module.exports, 'polylimitFastify', {
  enumerable: true,
  get: () => require('./fastify'),
});
