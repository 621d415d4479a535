'use strict';
// polylimit for Node.js: a thin layer over the napi addon. Every decision,
// key, header and body comes from the Rust core.
const native = require('./native');
const errors = require('./errors');
const { Limiter, Lease, optionsObject, call } = require('./limiter');

const { CircuitOpenError } = errors;

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
// The middlewares load when first used: `require('polylimit')` works without Fastify's
// `fastify-plugin` installed (the published package is loaded that way in test/dist.test.js).
Object.defineProperty(module.exports, 'rateLimit', {
  enumerable: true,
  get: () => require('./express').rateLimit,
});
Object.defineProperty(module.exports, 'polylimitFastify', {
  enumerable: true,
  get: () => require('./fastify'),
});
