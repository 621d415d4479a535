'use strict';
// Policy-wide limits through Node: setLimit / getLimit / removeLimit on the
// memory store and a real Redis, every key of a policy, a per-key override
// still wins, a TTL on nowMs, another limiter on the store applies it at its
// next check, errors naming the field.
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

function limiter(store, prefix) {
  return new Limiter({
    policy: { algorithm: 'fixed_window', rate: '3/h', name: 'api' },
    store,
    timeout: '10s', // decisions, not latency
    prefix: prefix ?? `node-lim-${process.pid}-${prefixes++}`,
    overrides: true,
  });
}

async function admitted(lim, key, n, nowMs) {
  let allowed = 0;
  for (let i = 0; i < n; i++) allowed += (await lim.check(key, { nowMs })).allowed ? 1 : 0;
  return allowed;
}

for (const store of ['memory', 'redis']) {
  test(`set, get and remove a policy-wide limit (${store})`, async () => {
    const lim = limiter(store === 'memory' ? 'memory' : redis.url);
    assert.equal(await admitted(lim, 'a', 1, WINDOW), 1);
    const set = await lim.setLimit({ policy: 'api', rate: '10/h', ttl: 60_000, nowMs: WINDOW });
    assert.deepStrictEqual(set, { policy: 'api', rate: '10/1h', burst: 10, limit: 10, expiresAtMs: WINDOW + 60_000 });
    for (const key of ['a', 'b']) {
      const d = await lim.check(key, { nowMs: WINDOW });
      assert.deepStrictEqual([d.allowed, d.limit, d.remaining], [true, 10, 9]);
    }
    assert.equal(await admitted(lim, 'b', 12, WINDOW + 59_999), 9);
    assert.equal((await lim.getLimit({ nowMs: WINDOW + 59_999 })).limit, 10);
    assert.equal(await lim.getLimit({ policy: 'api', nowMs: WINDOW + 60_000 }), null);
    assert.equal(await admitted(lim, 'a', 5, WINDOW + 60_000), 2, 'ended: the policy decides, on its own state');
    await lim.setLimit({ rate: '1/h', nowMs: WINDOW });
    await lim.setOverride('vip', { rate: '5/h', nowMs: WINDOW });
    assert.equal((await lim.check('vip', { nowMs: WINDOW })).limit, 5, 'a per-key override wins');
    assert.equal((await lim.check('c', { nowMs: WINDOW })).limit, 1);
    assert.equal(await lim.removeLimit({ policy: 'api' }), true);
    assert.equal(await lim.removeLimit(), false);
    assert.match(lim.metricsText(), /polylimit_limit_changes_total\{policy="api",action="set"\} 2/);
  });
}

test('another limiter on the store applies it at its next check', async () => {
  const prefix = `node-lim-shared-${process.pid}`;
  const a = limiter(redis.url, prefix);
  const b = limiter(redis.url, prefix);
  assert.equal((await b.check('k', { nowMs: WINDOW })).limit, 3);
  await a.setLimit({ rate: '2/h', nowMs: WINDOW });
  assert.equal(await admitted(b, 'k', 5, WINDOW), 2);
  await b.removeLimit();
  assert.equal((await a.check('k', { nowMs: WINDOW })).limit, 3);
});

test('bad limits reject with a ConfigError naming the field', async () => {
  const lim = limiter('memory');
  for (const [options, field] of [
    [{ rate: 'ten/h' }, 'rate'],
    [{ rate: '1/h', burst: 5 }, 'burst'],
    [{ rate: '1/h', ttl: -1 }, 'ttl'],
    [{ rate: '1/h', policy: 'nope' }, 'policy'],
    [{}, 'rate'],
  ]) {
    await assert.rejects(lim.setLimit(options), (e) => e instanceof ConfigError && e.field === field);
  }
  const off = new Limiter({ policy: { rate: '3/h' }, store: 'memory' });
  await assert.rejects(off.setLimit({ rate: '1/h' }), (e) => e instanceof ConfigError && e.field === 'overrides');
});
