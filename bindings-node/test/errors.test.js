'use strict';
// The core's error kinds and sources, as the addon lists them, each have
// their own JavaScript form: a new kind in the core fails here instead of
// surfacing as an InternalError, a new source instead of a name the
// declarations do not know.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const native = require('../native');
const errors = require('../errors');
const polylimit = require('..');

/** The string literals of the union type `name` in index.d.ts. */
function declaredUnion(name) {
  const text = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');
  const match = new RegExp(`export type ${name} =([^;]*);`).exec(text);
  assert.ok(match, `index.d.ts declares no type ${name}`);
  return [...match[1].matchAll(/'([^']*)'/g)].map((m) => m[1]);
}

test('every core error kind has its own class', () => {
  const codes = native.errorCodes();
  assert.ok(codes.length >= 5, `codes: ${codes}`);
  const classes = new Set();
  for (const code of codes) {
    const record = { code, message: `a ${code} error`, field: 'policies.api.rate', value: '"x"' };
    const e = errors.fromRecord(record);
    assert.ok(e instanceof errors.PolylimitError, code);
    assert.equal(e.code, code);
    assert.equal(e.message, record.message);
    assert.equal(e instanceof errors.InternalError, code === 'POLYLIMIT_INTERNAL', `${code} -> ${e.name}`);
    assert.ok(!classes.has(e.constructor), `${code} shares ${e.name}`);
    classes.add(e.constructor);
    assert.equal(polylimit[e.name], e.constructor, `${e.name} is not exported`);
    // An error the addon throws carries the same properties.
    const thrown = Object.assign(new Error(record.message), record);
    assert.ok(errors.fromNative(thrown) instanceof e.constructor, code);
  }
  const config = errors.fromRecord({ code: 'POLYLIMIT_CONFIG', message: 'm', field: 'f', value: 'v' });
  assert.deepEqual([config.field, config.value], ['f', 'v']);
});

test('a code this file does not know is an InternalError', () => {
  const e = errors.fromRecord({ code: 'POLYLIMIT_NEW_KIND', message: 'm' });
  assert.ok(e instanceof errors.InternalError);
  assert.equal(e.message, 'm');
});

test('the declared error codes are the core kinds and the breaker code', () => {
  assert.deepEqual(declaredUnion('ErrorCode').sort(), [...native.errorCodes(), 'POLYLIMIT_CIRCUIT_OPEN'].sort());
});

test('the declared sources are the core sources', () => {
  assert.deepEqual(declaredUnion('Source'), native.sourceNames());
});
