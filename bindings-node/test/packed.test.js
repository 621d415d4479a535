'use strict';
// packed.js reads every record of the shared vectors (tests/conformance/wire/packed.json) as
// the core wrote them: each record alone, and all of them as one batch.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Reader } = require('../packed');

const base = process.env.POLYLIMIT_VECTORS || path.resolve(__dirname, '..', '..', 'tests', 'conformance');
const VECTORS = JSON.parse(fs.readFileSync(path.join(base, 'wire', 'packed.json'), 'utf8'));

/** A vector's decision in JavaScript's names (the order `check()` resolves with). */
function decision(d) {
  return {
    allowed: d.allowed,
    limit: d.limit,
    remaining: d.remaining,
    resetAfterMs: d.reset_after_ms,
    retryAfterMs: d.retry_after_ms,
    delayMs: d.delay_ms,
    source: d.source,
  };
}

/** What the reader yields for a vector: `[ctx, ok, value]`, values in the binding's shapes. */
function expected(r) {
  const v = r.value;
  switch (r.kind) {
    case 'decision':
      return [r.ctx, true, decision(v)];
    case 'decisions':
      return [r.ctx, true, v.map(decision)];
    case 'acquired':
      return [r.ctx, true, { decision: decision(v.decision), leases: v.leases.map((l) => ({ policy: l.policy, key: l.key, id: l.id })) }];
    case 'outcome': {
      // The core's outcome's keys, in its order (polylimit::wire::OutcomeWire, outcome_encoding.test.js).
      const o = { status: v.status, headers: v.headers, body: v.body };
      if (v.trailers.length > 0) o.trailers = v.trailers;
      o.delayMs = v.delay_ms;
      if (v.completion !== null) o.completion = v.completion;
      o.decisions = v.decisions.map((d) => ({ rule: d.rule, policy: d.policy, ...decision(d), shadow: d.shadow }));
      return [r.ctx, true, o];
    }
    case 'unit':
      return [r.ctx, true, undefined];
    case 'error':
      return [r.ctx, false, { code: `POLYLIMIT_${v.kind.toUpperCase()}`, message: v.message, field: v.field, value: v.value, key: v.key }];
    default:
      // bool, count, json
      return [r.ctx, true, v];
  }
}

/** Every record of `hex`, as `[ctx, ok, value]`. */
function read(hex) {
  const buf = Buffer.from(hex, 'hex');
  const reader = new Reader();
  reader.reset(buf, buf.length);
  const out = [];
  while (!reader.done()) {
    reader.record(
      (ctx, value) => out.push([ctx, true, value]),
      (ctx, error) => out.push([ctx, false, error]),
    );
  }
  assert.equal(reader.pos, buf.length, 'read to the last byte');
  return out;
}

test('every packed record reads as the value the binding returns', () => {
  const kinds = new Set(VECTORS.records.map((r) => r.kind));
  assert.deepEqual([...kinds].sort(), ['acquired', 'bool', 'count', 'decision', 'decisions', 'error', 'json', 'outcome', 'unit']);
  for (const r of VECTORS.records) {
    const got = read(r.hex);
    assert.deepStrictEqual(got, [expected(r)], r.name);
    // Keys in the core's order too (deepStrictEqual ignores it).
    if (r.kind === 'outcome') assert.deepEqual(Object.keys(got[0][2]), Object.keys(expected(r)[2]), `${r.name}: keys`);
  }
});

test('a batch is the records back to back', () => {
  assert.deepStrictEqual(read(VECTORS.batch), VECTORS.records.map(expected));
});

test('a record of an unknown kind is an error, not a wrong value', () => {
  const buf = Buffer.from('0100000000000000' + '09', 'hex');
  const reader = new Reader();
  reader.reset(buf, buf.length);
  assert.throws(() => reader.record(() => {}, () => {}), /unknown kind 9/);
});
