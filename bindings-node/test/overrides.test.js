'use strict';
// Per-key overrides through Node: setOverride / getOverride / removeOverride
// on the memory store and a real Redis, a TTL on nowMs, errors naming the field.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter, ConfigError } = require('..');
const { RedisServer } = require('./support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

const NOW = 1_700_000_000_000;
const WINDOW = NOW - (NOW % 3_600_000);
let prefixes = 0;

function limiter(store) {
  return new Limiter({
    policy: { algorithm: 'fixed_window', rate: '3/h', name: 'api' },
    store,
    timeout: '10s', // decisions, not latency
    prefix: `node-ov-${process.pid}-${prefixes++}`,
    overrides: true,
  });
}

async function admitted(lim, key, n, nowMs) {
  let allowed = 0;
  for (let i = 0; i < n; i++) allowed += (await lim.check(key, { nowMs })).allowed ? 1 : 0;
  return allowed;
}

for (const store of ['memory', 'redis']) {
  test(`set, get and remove an override (${store})`, async () => {
    const lim = limiter(store === 'memory' ? 'memory' : redis.url);
    const set = await lim.setOverride('vip', { policy: 'api', rate: '10/h', ttl: 60_000, nowMs: WINDOW });
    assert.deepStrictEqual(set, {
      policy: 'api',
      key: 'vip',
      rate: '10/1h',
      burst: 10,
      limit: 10,
      expiresAtMs: WINDOW + 60_000,
    });
    const d = await lim.check('vip', { nowMs: WINDOW });
    assert.deepStrictEqual([d.allowed, d.limit, d.remaining], [true, 10, 9]);
    assert.equal(await admitted(lim, 'vip', 12, WINDOW + 59_999), 9);
    assert.equal((await lim.getOverride('vip', { nowMs: WINDOW + 59_999 })).limit, 10);
    assert.equal(await lim.getOverride('vip', { nowMs: WINDOW + 60_000 }), null);
    assert.equal(await admitted(lim, 'vip', 5, WINDOW + 60_000), 3, 'ended: the policy decides');
    // Removed: true while one is in force (on the store's clock: no TTL here).
    await lim.setOverride('batch', { rate: '1/h' });
    assert.equal((await lim.getOverride('batch', { policy: 'api' })).expiresAtMs, null);
    assert.equal(await lim.removeOverride('batch', { policy: 'api' }), true);
    assert.equal(await lim.removeOverride('batch'), false);
    assert.equal(await lim.getOverride('batch'), null);
  });
}

test('bad overrides reject with a ConfigError naming the field', async () => {
  const lim = limiter('memory');
  for (const [options, field] of [
    [{ rate: 'ten/h' }, 'rate'],
    [{ rate: '1/h', burst: 5 }, 'burst'],
    [{ rate: '1/h', ttl: -1 }, 'ttl'],
    [{ rate: '1/h', policy: 'nope' }, 'policy'],
    [{}, 'rate'],
  ]) {
    await assert.rejects(lim.setOverride('k', options), (e) => e instanceof ConfigError && e.field === field);
  }
});
