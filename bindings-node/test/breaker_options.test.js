'use strict';
// tests/conformance/client/breaker_options.json: CircuitBreaker's defaults and
// checks are the core's, named as JavaScript names them; and retryFetch's
// defaults are the core's (retry_options.json).

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { CircuitBreaker, ConfigError } = require('..');
const { DEFAULTS } = require('../client');

const vectors = (name) =>
  JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'tests', 'conformance', 'client', name), 'utf8'));

test('CircuitBreaker: the core checks every value and names it (breaker_options.json)', () => {
  const v = vectors('breaker_options.json');
  const invalid = v.invalid.filter((c) => c.naming === 'camel');
  const valid = v.valid.filter((c) => c.naming === 'camel');
  assert.ok(invalid.length > 0 && valid.length > 0);
  for (const c of invalid) {
    const { threshold, cooldown, halfOpenMax } = c.options;
    for (const build of [() => new CircuitBreaker(c.options), () => new CircuitBreaker(threshold, cooldown, halfOpenMax)]) {
      assert.throws(build, (e) => e instanceof ConfigError && e.message === c.error && e.field === c.error.split(':')[0],
        c.error);
    }
  }
  for (const c of valid) assert.equal(new CircuitBreaker(c.options).state, 'closed');
});

test('retryFetch: the defaults are the core\'s (retry_options.json)', () => {
  assert.deepStrictEqual({ ...DEFAULTS }, vectors('retry_options.json').defaults.camel);
});
