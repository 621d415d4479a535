'use strict';
// Request outcomes and errors cross from the addon one way, without JSON: the core's packed
// records (polylimit::wire::packed, read by packed.js). `checkRequest`, `peekRequest` and the
// middlewares (`_checkHttp`) all read them with the same decoder, so comparing them with each
// other proves nothing about it: each outcome is compared with the core's own JSON outcome for
// the same request at the same time (outcome_encoding.expected.json: `OutcomeWire` in camelCase,
// recorded from the JSON channel `checkRequest` used before this one replaced it) — the same
// status, headers (names, values, order), body, delay, completion token, decisions (every
// field, in order) and the same keys in the same order.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Limiter, ConfigError } = require('..');

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

// The core's JSON outcome of each request of REQUESTS, in order.
const EXPECTED = JSON.parse(fs.readFileSync(path.join(__dirname, 'outcome_encoding.expected.json'), 'utf8'));

/**
 * `got` is `want`, field by field, keys in the same order (the outcome's and each decision's).
 * A completion token's number (`;t<n>`, the limiter's registry of outstanding tokens) is
 * drawn per limiter, so it is checked for shape and left out of the comparison.
 */
function sameOutcome(got, want, label) {
  if (typeof got.completion === 'string') {
    assert.match(got.completion, /^pl1;n\d+;c\d+;t\d+;/, `${label}: token number`);
    got = { ...got, completion: got.completion.replace(/;t\d+/, '') };
  }
  assert.deepStrictEqual(got, want, label);
  assert.deepStrictEqual(Object.keys(got), Object.keys(want), `${label}: keys`);
  got.decisions.forEach((d, i) => assert.deepStrictEqual(Object.keys(d), Object.keys(want.decisions[i]), `${label}: decision ${i} keys`));
}

function pairs(flat) {
  const out = [];
  for (let i = 0; i < flat.length; i += 2) out.push([flat[i], flat[i + 1]]);
  return out;
}

test('checkRequest, peekRequest and middleware outcomes are the core\'s outcomes, field by field', async () => {
  assert.equal(EXPECTED.length, REQUESTS.length);
  const viaRequest = new Limiter({ rules: RULES });
  const viaHttp = new Limiter({ rules: RULES });
  try {
    const seen = { delay: false, completion: false, denied: false, forbidden: false, shadow: false, unicode: false };
    for (const [i, [method, path, peer, headers, at]] of REQUESTS.entries()) {
      const nowMs = T0 + at;
      const want = EXPECTED[i];
      const label = `${method} ${path} from ${peer} at +${at}`;
      const request = { method, path, peer, headers: pairs(headers), nowMs };
      // A peek gives the outcome the check next to it gives (nothing charged), completion token aside.
      const peeked = await viaRequest.peekRequest(request);
      const { completion, ...uncharged } = want;
      sameOutcome(peeked, uncharged, `${label}: peekRequest`);
      sameOutcome(await viaRequest.checkRequest(request), want, `${label}: checkRequest`);
      const got = await viaHttp._checkHttp(null, method, path, undefined, peer, headers, undefined, undefined, undefined, false, false, nowMs);
      sameOutcome(got, want, `${label}: middleware`);
      seen.delay ||= got.delayMs > 0;
      seen.completion ||= typeof got.completion === 'string' && /[^\x00-\x7f]/.test(got.completion);
      seen.denied ||= got.status === 429 && got.headers.some(([n]) => n === 'Retry-After') && got.body !== null;
      seen.forbidden ||= got.status === 403;
      seen.shadow ||= got.decisions.some((d) => d.shadow);
      seen.unicode ||= got.decisions.some((d) => d.policy === 'débit-ünïcode' && d.rule === 'login ✓');
    }
    // Every field the encoding carries was exercised.
    assert.deepStrictEqual(seen, { delay: true, completion: true, denied: true, forbidden: true, shadow: true, unicode: true });
  } finally {
    viaRequest.close();
    viaHttp.close();
  }
});

test('a request the core refuses rejects with the core\'s error, through checkRequest and a middleware', async () => {
  const limiter = new Limiter({ rules: RULES });
  try {
    const viaRequest = await limiter.checkRequest({ method: 'GET', path: '/api/x', peer: '198.51.100.9', key: 'k' }).catch((e) => e);
    const viaHttp = await limiter._checkHttp(null, 'GET', '/api/x', undefined, '198.51.100.9', [], 'k', undefined, undefined, false, false).catch((e) => e);
    for (const e of [viaRequest, viaHttp]) {
      assert.ok(e instanceof ConfigError, String(e));
      assert.equal(e.code, 'POLYLIMIT_CONFIG');
      assert.equal(e.field, 'key');
      assert.equal(e.value, '');
      assert.match(e.message, /^key: is given by the middleware's key function, but no rule of this limiter keys by `key`/);
    }
  } finally {
    limiter.close();
  }
});

test('a check the core refuses rejects with its error (errors cross the outcome channel too)', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'concurrency', limit: 1 } });
  try {
    const [plain, withOptions] = await Promise.all([
      limiter.check('k').catch((e) => e),
      limiter.check('k', { nowMs: T0 }).catch((e) => e),
    ]);
    for (const e of [plain, withOptions]) {
      assert.ok(e instanceof ConfigError, String(e));
      assert.equal(e.code, 'POLYLIMIT_CONFIG');
      assert.equal(e.field, 'policy');
      assert.equal(e.value, '"default"');
      assert.match(e.message, /^policy: "default" is a concurrency policy: check would take a slot/);
    }
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
