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

class StoreError extends PolylimitError {
  constructor(message) {
    super(message, 'POLYLIMIT_STORE');
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

/** Turns an error thrown by the addon into the matching class (others pass through). */
function fromNative(e) {
  if (!(e instanceof Error) || !e.message.startsWith('{"')) return e;
  let record;
  try {
    record = JSON.parse(e.message);
  } catch {
    return e;
  }
  if (!record || typeof record.polylimit !== 'string') return e;
  const err =
    record.polylimit === 'POLYLIMIT_CONFIG'
      ? new ConfigError(record.message, record.field, record.value)
      : new (BY_CODE[record.polylimit] || InternalError)(record.message);
  return err;
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
};
