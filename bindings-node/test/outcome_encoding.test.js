'use strict';
// The middlewares' outcomes cross from the addon without JSON (src/outcome.rs, outcome.js):
// numbers and one string of texts. Each outcome must be the one the JSON path gives
// (`checkRequest`): the same status, headers (names, values, order), body, delay, completion
// token, decisions (every field) and errors. Two limiters of the same rules, the same
// requests at the same times, one through each path.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter } = require('..');

const RULES = {
  headers: 'draft-8',
  denylist: ['203.0.113.66/32'],
  policies: {
    api: { algorithm: 'token_bucket', rate: '1/s', burst: 3 },
    'débit-ünïcode': { algorithm: 'fixed_window', rate: '2/min' },
    slow: { algorithm: 'leaky_bucket', mode: 'shape', rate: '5/s', burst: 4 },
    watch: { algorithm: 'fixed_window', rate: '1/min' },
  },
  rules: [
    { name: 'login ✓', match: { method: 'POST', path: '/login' }, key: ['ip', 'header:x-login-user'], policy: 'débit-ünïcode', count: 'failed' },
    { name: 'shaped', match: { path: '/slow' }, key: ['ip'], policy: 'slow' },
    { name: 'observed', match: { path: '/api/*' }, key: ['ip'], policy: 'watch', shadow: true },
    { name: 'api', match: { path: '/api/*' }, key: ['ip'], policy: 'api' },
  ],
};

const T0 = 1_800_000_000_000;
const REQUESTS = [
  ['GET', '/api/x', '198.51.100.1', ['Host', 'a'], 0],
  ['HEAD', '/api/x', '198.51.100.1', ['Host', 'a'], 10],
  ['GET', '/api/x', '198.51.100.1', ['Host', 'a', 'X-Extra', 'ü'], 20],
  ['GET', '/api/x', '198.51.100.1', ['Host', 'a'], 30], // denied: 429, Retry-After, body
  ['GET', '/api/x', '198.51.100.2', ['Host', 'a'], 40],
  ['POST', '/login', '198.51.100.1', ['X-Login-User', 'zoë'], 50], // completion token
  ['POST', '/login', '198.51.100.1', ['X-Login-User', 'zoë'], 60],
  ['POST', '/login', '198.51.100.1', ['X-Login-User', 'zoë'], 70],
  ['GET', '/slow', '198.51.100.3', [], 80],
  ['GET', '/slow', '198.51.100.3', [], 80],
  ['GET', '/slow', '198.51.100.3', [], 80],
  ['GET', '/slow', '198.51.100.3', [], 80],
  ['GET', '/slow', '198.51.100.3', [], 80], // shape mode: delayMs > 0
  ['GET', '/api/x', '203.0.113.66', [], 90], // denylisted: 403
  ['GET', '/other', '198.51.100.1', [], 100], // no rule: passes, no headers
];

function pairs(flat) {
  const out = [];
  for (let i = 0; i < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
}

test('middleware outcomes (no JSON) equal checkRequest outcomes (JSON), field by field', async () => {
  const viaJson = new Limiter({ rules: RULES });
  const viaHttp = new Limiter({ rules: RULES });
  try {
    const seen = { delay: false, completion: false, denied: false, forbidden: false, shadow: false, unicode: false };
    for (const [method, path, peer, headers, at] of REQUESTS) {
      const nowMs = T0 + at;
      const expected = await viaJson.checkRequest({ method, path, peer, headers: pairs(headers), nowMs });
      const got = await viaHttp._checkHttp(null, method, path, undefined, peer, headers, undefined, undefined, undefined, false, false, nowMs);
      const label = `${method} ${path} from ${peer} at +${at}`;
      // The completion token names its request; equal in shape, each valid for its own limiter.
      if (expected.completion !== undefined) {
        assert.equal(typeof got.completion, 'string', label);
        assert.ok(got.completion.length > 0, label);
        got.completion = expected.completion;
        seen.completion = true;
      }
      assert.deepStrictEqual(got, expected, label);
      seen.delay ||= got.delayMs > 0;
      seen.denied ||= got.status === 429 && got.headers.some(([n]) => n === 'Retry-After') && got.body !== null;
      seen.forbidden ||= got.status === 403;
      seen.shadow ||= got.decisions.some((d) => d.shadow);
      seen.unicode ||= got.decisions.some((d) => d.policy === 'débit-ünïcode' && d.rule === 'login ✓');
    }
    // Every field the encoding carries was exercised.
    assert.deepStrictEqual(seen, { delay: true, completion: true, denied: true, forbidden: true, shadow: true, unicode: true });
  } finally {
    viaJson.close();
    viaHttp.close();
  }
});

test('a middleware request the core refuses rejects with the same error as checkRequest', async () => {
  const limiter = new Limiter({ rules: RULES });
  try {
    const viaJson = await limiter.checkRequest({ method: 'GET', path: '/api/x', peer: '198.51.100.9', key: 'k' }).catch((e) => e);
    const viaHttp = await limiter._checkHttp(null, 'GET', '/api/x', undefined, '198.51.100.9', [], 'k', undefined, undefined, false, false).catch((e) => e);
    assert.ok(viaJson instanceof Error && viaHttp instanceof Error);
    assert.equal(viaHttp.constructor, viaJson.constructor);
    assert.equal(viaHttp.message, viaJson.message);
    assert.equal(viaHttp.field, viaJson.field);
  } finally {
    limiter.close();
  }
});

test('a batch larger than the scratch array arrives whole', async () => {
  const limiter = new Limiter({ rules: RULES });
  try {
    // ~40 numbers per outcome: 1000 outcomes in one batch overflow the 16384-number scratch array.
    const all = await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        limiter._checkHttp(null, 'GET', '/api/x', undefined, `198.51.${i >> 8}.${i & 255}`, [], undefined, undefined, undefined, false, false, T0),
      ),
    );
    assert.ok(all.every((o) => o.status === null && o.decisions.length === 2 && o.decisions[1].remaining === 2));
    assert.ok(all.every((o) => o.headers.length > 0 && o.headers.every(([n, v]) => typeof n === 'string' && typeof v === 'string')));
  } finally {
    limiter.close();
  }
});
