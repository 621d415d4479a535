'use strict';
// A policy's `sync` through the Node API (issue 19): the core admits from a
// local share on a real Redis, durations in ms as JavaScript writes them.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter, ConfigError, effectiveConfig } = require('..');
const { RedisServer } = require('./support');

const NOW = 1_700_000_000_000;
let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

test('a synced policy admits from its share', async () => {
  const policy = { algorithm: 'fixed_window', rate: '100/10s', sync: { interval: 1000, share: 10 } };
  assert.deepEqual(effectiveConfig({ policy }).policies.default.sync, { interval: '1000ms', share: 10 });
  const limiter = new Limiter({ policy, store: redis.url, prefix: 'node-sync', timeout: 5000 }); // never the fallback
  const remaining = [];
  for (let i = 0; i < 3; i++) remaining.push((await limiter.check('k', { nowMs: NOW })).remaining);
  // The store charged a share of 10: 90 left there, 9 of it here.
  assert.deepEqual(remaining, [99, 98, 97]);
  // The interval ended: the 7 left are dropped, another share is taken.
  assert.equal((await limiter.check('k', { nowMs: NOW + 1000 })).remaining, 89);
  limiter.close();
});

test('a bad share names the field', () => {
  assert.throws(() => new Limiter({ policy: { rate: '5/s', sync: { share: 6 } } }), (e) => e instanceof ConfigError && /sync\.share/.test(e.message));
});
