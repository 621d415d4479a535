'use strict';
// The blocked-key cache through Node (blockCache): the option is accepted, a
// denied key is then answered locally until its retry time, and the hits
// show in metricsText(); a bad value rejects with a ConfigError naming the field.
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

function hits(lim) {
  const line = 'polylimit_block_cache_hits_total{policy="default"} ';
  const found = lim.metricsText().split('\n').find((l) => l.startsWith(line));
  assert.ok(found, lim.metricsText());
  return Number(found.slice(line.length));
}

for (const blockCache of [true, 50]) {
  test(`a denied key is answered from the cache (blockCache: ${blockCache})`, async () => {
    const lim = new Limiter({
      policy: { rate: '10/s', burst: 1 },
      store: redis.url,
      timeout: '10s', // decisions, not latency
      prefix: `node-bc-${process.pid}-${blockCache}`,
      blockCache,
    });
    try {
      assert.equal((await lim.check('k', { nowMs: NOW })).allowed, true);
      const denied = await lim.check('k', { nowMs: NOW });
      assert.deepEqual([denied.allowed, denied.retryAfterMs], [false, 100]);
      assert.equal(hits(lim), 0);
      const cached = await lim.check('k', { nowMs: NOW + 30 });
      assert.deepEqual([cached.allowed, cached.retryAfterMs, cached.source], [false, 70, 'store']);
      assert.equal(hits(lim), 1);
      assert.equal((await lim.check('k', { nowMs: NOW + 100 })).allowed, true);
      assert.equal(hits(lim), 1);
    } finally {
      lim.close();
    }
  });
}

test('a bad blockCache names the field', () => {
  for (const blockCache of [0, -1, 'yes', 1.5]) {
    assert.throws(
      () => new Limiter({ policy: { rate: '1/s' }, blockCache }),
      (e) => e instanceof ConfigError && e.field === 'blockCache',
      String(blockCache),
    );
  }
});
