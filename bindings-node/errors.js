'use strict';
// Error classes, one per core error kind, each with a stable `code`.

class PolylimitError extends Error {
  constructor(message, code = 'POLYLIMIT_INTERNAL') {
    super(message);
    this.name = this.constructor.name;
    this.code = code;
  }
}

/** A bad option: `field` names it (`policies.api.rate`), `value` is what was given. */
class ConfigError extends PolylimitError {
  constructor(message, field, value) {
    super(message, 'POLYLIMIT_CONFIG');
    this.field = field;
    this.value = value;
  }
}

class StoreUnavailableError extends PolylimitError {
  constructor(message) {
    super(message, 'POLYLIMIT_STORE_UNAVAILABLE');
  }
}

/** The store answered with an error for one key: `key` is that store key. */
class StoreError extends PolylimitError {
  constructor(message, key) {
    super(message, 'POLYLIMIT_STORE');
    this.key = key;
  }
}

class ClosedError extends PolylimitError {
  constructor(message = 'limiter is closed') {
    super(message, 'POLYLIMIT_CLOSED');
  }
}

class InternalError extends PolylimitError {
  constructor(message) {
    super(message, 'POLYLIMIT_INTERNAL');
  }
}

/** Raised (or given to the fallback) when a CircuitBreaker is open. */
class CircuitOpenError extends PolylimitError {
  constructor(message = 'circuit breaker is open') {
    super(message, 'POLYLIMIT_CIRCUIT_OPEN');
  }
}

const BY_CODE = {
  POLYLIMIT_STORE_UNAVAILABLE: StoreUnavailableError,
  POLYLIMIT_STORE: StoreError,
  POLYLIMIT_CLOSED: ClosedError,
  POLYLIMIT_INTERNAL: InternalError,
};

/**
 * The error of the addon's properties `{ code, message, field?, value?, key? }` (an error it threw,
 * or a record of a failed check), as the class of its code.
 */
function fromRecord(record) {
  if (record.code === 'POLYLIMIT_CONFIG') return new ConfigError(record.message, record.field, record.value);
  if (record.code === 'POLYLIMIT_STORE') return new StoreError(record.message, record.key);
  return new (BY_CODE[record.code] || InternalError)(record.message);
}

/** Turns an error thrown by the addon (it carries `code`, `field`, `value`) into its class; others pass through. */
function fromNative(e) {
  if (!(e instanceof Error) || e instanceof PolylimitError) return e;
  if (typeof e.code !== 'string' || !e.code.startsWith('POLYLIMIT_')) return e;
  return fromRecord(e);
}

module.exports = {
  PolylimitError,
  ConfigError,
  StoreUnavailableError,
  StoreError,
  ClosedError,
  InternalError,
  CircuitOpenError,
  fromNative,
  fromRecord,
};
