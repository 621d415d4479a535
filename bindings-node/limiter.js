'use strict';
// The Limiter (and its Lease): a thin layer over the addon's NativeLimiter. Every decision,
// key, header and body comes from the Rust core. Required by index.js and options.js; it
// requires neither, so no module requires one that requires it back.
const native = require('./native');
const calls = require('./calls');
const { SansIo } = require('./sansio');
const { ConfigError, fromNative } = require('./errors');

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

function noop() {}

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
 * The core's alert (a JSON record on the thread's bridge) in JavaScript's names, handed to
 * `onAnomaly`; a throw or a rejected promise is counted (`polylimit_anomaly_callback_errors_total`),
 * never reaches a request. Holds the counter, not the limiter, so a limiter with a handler can
 * still be collected (which stops its alerts: `stopAlerts`).
 */
function anomalyHandler(onAnomaly, counter) {
  return (e) => {
    const fail = () => counter.errors && counter.errors.add();
    try {
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

// A collected limiter's alerts stop (its native side, which sends them, is gone with it).
const stopAlerts = new FinalizationRegistry((id) => calls.unlisten(id));

class Limiter {
  /**
   * @param {object} options the core's options in JavaScript's names: `policy` | `policies` with `key`,
   * or `rules` (YAML/JSON text or an object) | `rulesFile` (a path), and `store`, `prefix`, `maxKeys`,
   * `timeout`, `connectTimeout`, `failureThreshold`, `cooldown`, `halfOpenProbes`, `trustedProxies`, … (docs/reference/options.md)
   */
  constructor(options) {
    const { onAnomaly, ...given } = optionsObject(options);
    if (onAnomaly !== undefined && typeof onAnomaly !== 'function') {
      throw new ConfigError(`onAnomaly: ${String(onAnomaly)} is not a function`, 'onAnomaly', String(onAnomaly));
    }
    this._native = call(() => new native.NativeLimiter(given));
    this._native.useBridge(calls.nativeBridge());
    // `check(key)` calls of one JavaScript turn, handed to the addon in one call (`_flushChecks`).
    this._queuedIds = [];
    this._queuedKeys = [];
    this._flushQueued = () => this._flushChecks();
    // `check(key)` on this thread's own socket where the core allows it (sansio.js).
    const address = this._native.sansIoAddress();
    // A call started through the bridge once the socket's calls before it are answered (`_start`).
    this._ordered = null;
    this._sansIo = address ? new SansIo(this._native, address, (key) => this._queueCheck(key)) : null;
    if (onAnomaly) {
      const counter = { errors: null };
      this._alerts = calls.listen(anomalyHandler(onAnomaly, counter));
      counter.errors = this._native.setAnomalyBridge(calls.nativeBridge(), this._alerts);
      stopAlerts.register(this, this._alerts, this);
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
      calls.failAll(ids, fromNative(e));
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
      const { cost, nowMs } = options;
      return this._start((id) => this._native.checkBatched(id, key, cost ?? undefined, nowMs ?? undefined));
    }
    // Behind a call waiting for the socket's answers (`_start`): after it, in order.
    if (this._ordered !== null) return this._start((id) => this._native.checkBatched(id, key, undefined, undefined));
    if (this._sansIo !== null) {
      const sent = this._sansIo.check(key);
      if (sent !== null) return sent;
    }
    return this._queueCheck(key);
  }

  /**
   * Starts `start(id)` through the bridge after this limiter's calls on its own socket are
   * answered (the socket is another connection: a call through the bridge could reach the store
   * before them), and after any call started so, so the store sees the calls in the order they
   * were made. With no call waiting on the socket it starts at once.
   */
  _start(start) {
    this._flushChecks();
    const before = this._ordered ?? (this._sansIo === null ? null : this._sansIo.answered());
    if (before === null) return calls.start(start);
    let started;
    const submitted = before.then(() => {
      this._flushChecks();
      started = calls.start(start);
    });
    this._ordered = submitted;
    submitted.then(() => {
      if (this._ordered === submitted) this._ordered = null;
    });
    return submitted.then(() => started);
  }

  /** `check(key)` through the bridge, queued until the end of this JavaScript turn (`_flushChecks`). */
  _queueCheck(key) {
    return calls.start((id) => {
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
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    const { cost, nowMs } = options || {};
    return this._start((id) => this._native.peekBatched(id, key, cost ?? undefined, nowMs ?? undefined));
  }

  /**
   * Decides an HTTP request by the rules (`{ method, path, route, peer, headers, user, apiKey, key, cost, nowMs }`):
   * `{ status, headers, body, delayMs, decisions }`.
   */
  checkRequest(request) {
    const info = requestJson(request);
    return this._start((id) => this._native.checkRequestBatched(id, info));
  }

  /** The outcome `checkRequest(request)` would give now, charging nothing (not counted in the metrics). */
  peekRequest(request) {
    const info = requestJson(request);
    return this._start((id) => this._native.peekRequestBatched(id, info));
  }

  /**
   * Forgets every (policy, key) that `checkRequest(request)` would charge (same rules, tiers and
   * keys), penalty blocks included: resolves with how many pairs were forgotten.
   */
  resetRequest(request) {
    return this._start((id) => this._native.resetRequest(id, requestJson(request)));
  }

  /**
   * checkRequest for the middlewares: typed arguments instead of a JSON text, and Node's
   * `rawHeaders` (`[name, value, …]`) as they are. The request is decided by `rule` (from
   * `routeRule`) or else by the limiter's rules; `grpc`: a gRPC call (the interceptor's); `cost`:
   * the request's cost from a middleware's `cost` option (undefined: the rules'). Internal.
   */
  _checkHttp(rule, method, path, route, peer, rawHeaders, key, user, apiKey, caseInsensitive, ignoreTrailingSlash, nowMs, grpc, cost) {
    this._flushChecks();
    // The request on this thread's own socket when the core takes it that way (sansio.js).
    const sansIo = this._sansIo !== null && nowMs == null && this._sansIo.readyForRequest() ? this._sansIo : null;
    return calls.start((id) => {
      const bytes = this._native.checkHttpBatched(
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
        grpc,
        cost,
        sansIo !== null,
      );
      if (bytes !== null) sansIo.sent(id, bytes);
    });
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
   * rule's `count` charges only some responses, or a rule has a `cost`), `status` the response's
   * status (null/undefined/0: no response, counted as failed), or a gRPC call's status code (0: OK).
   * The core gives back the charges whose rule does not count that status. `options.cost`: the
   * request's actual cost, learned from the response (an LLM call's tokens): the difference from
   * its reservation is given back or charged, capped at its rules' `max_cost`; `options.nowMs`:
   * that charge's clock (tests). Never rejects because the store is down; rejects with a
   * ConfigError naming `token` when it is not one, or `cost` for a bad cost (once the request is
   * completed without it, as if none was reported: its slots and uncounted charges come back).
   */
  complete(token, status, options) {
    if (typeof token !== 'string') {
      return Promise.reject(new ConfigError(`token: ${String(token)} is not a completion token`, 'token', String(token)));
    }
    const { cost, nowMs } = options || {};
    // 0 goes through: a gRPC call's OK (for HTTP the core reads 0 as no response).
    return this._start((id) =>
      this._native.complete(id, token, status === null || status === undefined ? undefined : Number(status), cost, nowMs),
    );
  }

  /**
   * Acquires `key`: a check that, for a concurrency policy, takes `cost` slots until released.
   * Resolves with `{ decision, lease }`; `lease` is null when denied or when no policy is a concurrency one.
   */
  acquire(key, options) {
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    const { cost, nowMs } = options || {};
    return this._start((id) => this._native.acquire(id, key, cost ?? undefined, nowMs ?? undefined))
      .then(({ decision, leases }) => ({ decision, lease: leases.length > 0 ? new Lease(this._native, leases) : null }));
  }

  /** Forgets every policy's state for `key`. */
  reset(key) {
    return this._start((id) => this._native.reset(id, String(key)));
  }

  /**
   * Reads the rules file (or options) again, `${NAME}` expanded anew, and
   * swaps the rules at once; requests in flight finish on the old ones. A bad
   * file rejects with a ConfigError naming the field and keeps the old rules.
   */
  reload() {
    // Not behind the socket's calls (`_start`): it reads a file, nothing the store orders.
    this._flushChecks();
    return calls.start((id) => this._native.reload(id));
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

  /**
   * Sets a policy-wide limit: every key of `options.policy` is decided under
   * `{ rate, burst }` instead of the policy's numbers (by every process on
   * the store) until removed or until `ttl` (ms, or text like '10m') ends. A
   * per-key override still wins. Needs `overrides: true`. Resolves with the limit.
   */
  setLimit(options) {
    return this._limit('set', options);
  }

  /** The policy-wide limit in force for `options.policy`, or null. */
  getLimit(options) {
    return this._limit('get', options);
  }

  /** Removes the policy-wide limit of `options.policy`: whether one was in force. */
  removeLimit(options) {
    return this._limit('remove', options);
  }

  _limit(op, options) {
    let spec;
    try {
      spec = JSON.stringify(options ?? {}, (_, v) => (v === undefined ? null : v));
    } catch (e) {
      return Promise.reject(e);
    }
    return this._start((id) => this._native.limitCall(id, op, spec)).then((value) => {
      if (value === null || typeof value !== 'object') return value;
      return {
        policy: value.policy,
        rate: value.rate,
        burst: value.burst,
        limit: value.limit,
        expiresAtMs: value.expires_at_ms,
      };
    });
  }

  _override(op, key, options) {
    if (typeof key !== 'string') {
      return Promise.reject(new ConfigError(`key: ${String(key)} is not a string`, 'key', String(key)));
    }
    let spec;
    try {
      spec = JSON.stringify(options ?? {}, (_, v) => (v === undefined ? null : v));
    } catch (e) {
      return Promise.reject(e);
    }
    return this._start((id) => this._native.overrideCall(id, op, key, spec)).then((value) => {
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
  }

  /** The limiter's metrics in Prometheus text format. */
  metricsText() {
    return this._native.metricsText();
  }

  /**
   * Every metric family, read now: `{ startUnixNanos, families: [{ name, help, kind, points }] }`.
   * The Prometheus text is rendered from the same snapshot; `polylimit/otel` bridges it.
   */
  metricsSnapshot() {
    const raw = JSON.parse(this._native.metricsSnapshotJson());
    return {
      startUnixNanos: raw.start_unix_nanos,
      families: raw.families.map((f) => ({
        name: f.name,
        help: f.help,
        kind: f.kind,
        points: f.points.map((p) =>
          f.kind === 'histogram'
            ? { labels: p.labels, bounds: p.bounds, bucketCounts: p.bucket_counts, sum: p.sum, count: p.count }
            : { labels: p.labels, value: p.value },
        ),
      })),
    };
  }

  /** The store circuit breaker's state: `closed`, `open` or `half_open`. */
  get breakerState() {
    return this._native.breakerState();
  }

  /** Later checks reject with `ClosedError`. */
  close() {
    this._flushChecks();
    if (this._sansIo !== null) this._sansIo.close();
    this._native.close();
    if (this._alerts !== undefined) {
      calls.unlisten(this._alerts);
      stopAlerts.unregister(this);
    }
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
  /** `leases`: the core's leases, `[{ policy, key, id }]` (opaque to callers). */
  constructor(nativeLimiter, leases) {
    this._native = nativeLimiter;
    this._leases = leases;
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
    const policies = Uint32Array.from(leases, (l) => l.policy);
    const keys = leases.map((l) => l.key);
    const ids = leases.map((l) => l.id);
    let submitted = false;
    const released = calls.start((id) => {
      this._native.release(id, policies, keys, ids, nowMs ?? undefined);
      submitted = true;
    });
    if (submitted) this._leases = null;
    return released;
  }
}
if (typeof Symbol.asyncDispose === 'symbol') {
  Lease.prototype[Symbol.asyncDispose] = function dispose() {
    return this.release().then(noop);
  };
}

module.exports = { Limiter, Lease, optionsObject, call };
