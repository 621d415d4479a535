'use strict';
// Peek and reset through the Node API, on the memory store and a real Redis: a
// peek is the decision (or outcome) a check would get and charges nothing;
// resetRequest forgets what a request would be charged, penalty blocks included.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter, ConfigError, ClosedError, StoreError } = require('..');
const { RedisServer } = require('./support');

const NOW = 1_700_000_000_000;
let redis;
let next = 0;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

const stores = () => [
  ['memory', 'memory'],
  ['redis', redis.url],
];
const prefix = (tag) => `node-peek-${process.pid}-${tag}-${next++}`;

const RULES = {
  policies: {
    api: { rate: '100/min', burst: 100 },
    login: { algorithm: 'fixed_window', rate: '3/15m', penalty: { threshold: 2, within: '15m', cooldowns: ['1h'] } },
  },
  rules: [
    { match: { path: '/api/*' }, key: ['ip'], policy: 'api' },
    { match: { method: 'POST', path: '/api/login' }, key: ['user', 'ip'], policy: 'login' },
  ],
};

const login = (peer, user, nowMs) => ({ method: 'POST', path: '/api/login', peer, user, nowMs });
const seen = (o) => [o.status, o.headers, o.body, o.decisions.map((d) => d.remaining)];

test('peek is the next check and charges nothing', async () => {
  for (const [name, store] of stores()) {
    const limiter = new Limiter({ policy: { rate: '10/s', burst: 3 }, store, timeout: '10s', prefix: prefix('key') });
    const metrics = limiter.metricsText();
    for (let i = 0; i < 5; i++) {
      const first = await limiter.peek('k', { nowMs: NOW });
      assert.deepStrictEqual(await limiter.peek('k', { cost: 1, nowMs: NOW }), first, `${name} ${i}`);
      assert.deepStrictEqual(await limiter.check('k', { nowMs: NOW }), first, `${name} ${i}`);
    }
    const denied = await limiter.peek('k', { cost: 2, nowMs: NOW });
    assert.deepStrictEqual([denied.allowed, denied.remaining, denied.retryAfterMs], [false, 0, 200], name);
    if (name === 'memory') {
      const before = new Limiter({ policy: { rate: '10/s', burst: 3 }, prefix: prefix('m') });
      const fresh = before.metricsText();
      await before.peek('k');
      assert.equal(before.metricsText(), fresh, 'a peek is not counted as a request');
      assert.notEqual(limiter.metricsText(), metrics, 'checks are');
    }
    await assert.rejects(limiter.peek('k', { cost: 0 }), (e) => e instanceof ConfigError && e.field === 'cost');
    await assert.rejects(limiter.peek(42), ConfigError);
    limiter.close();
    await assert.rejects(limiter.peek('k'), ClosedError);
  }
});

test('peekRequest and resetRequest', async () => {
  for (const [name, store] of stores()) {
    const limiter = Limiter.fromRules({ ...RULES, store, timeout: '10s', prefix: prefix('req') });
    const [ann, bob] = ['203.0.113.7', '198.51.100.9'];
    for (let i = 0; i < 6; i++) {
      const req = login(ann, 'ann', NOW + i * 1000);
      const peeked = await limiter.peekRequest(req);
      assert.deepStrictEqual(seen(await limiter.peekRequest(req)), seen(peeked), `${name} ${i}`);
      const checked = await limiter.checkRequest(req);
      if (i === 4) {
        // The denial that starts the block: a peek records nothing.
        assert.equal(peeked.decisions[1].source, 'store');
        assert.equal(checked.decisions[1].source, 'penalty');
      } else {
        assert.deepStrictEqual(seen(peeked), seen(checked), `${name} ${i}`);
      }
      assert.equal(checked.status !== null, i >= 3, `${name} ${i}`);
    }
    const blocked = await limiter.peekRequest(login(ann, 'ann', NOW + 7000));
    assert.equal(blocked.status, 429);
    assert.ok(blocked.headers.some(([k, v]) => k === 'Retry-After' && v === '3597'), JSON.stringify(blocked.headers));

    // Bob's state is made at the time of Ann's reset: made at NOW, it would be idle (full again)
    // by then, and the memory store's sampling sweep may reclaim idle state (a random shard seed).
    const bobApi = { path: '/api/x', peer: bob, nowMs: NOW + 8000 };
    await limiter.checkRequest(bobApi);
    assert.equal(await limiter.resetRequest(login(ann, 'ann', NOW + 8000)), 2, name);
    const again = await limiter.checkRequest(login(ann, 'ann', NOW + 8000));
    assert.equal(again.status, null);
    assert.deepStrictEqual(
      again.decisions.map((d) => d.remaining),
      [99, 2],
      name,
    );
    assert.equal((await limiter.checkRequest(bobApi)).decisions[0].remaining, 98, `${name}: Bob's state stays`);
    assert.equal(await limiter.resetRequest({ path: '/health', peer: ann }), 0);
  }
});

test('reset forgets a penalty block', async () => {
  for (const [name, store] of stores()) {
    const policy = { rate: '1/h', burst: 1, penalty: { threshold: 1, within: '1m', cooldowns: ['1h'] } };
    const limiter = new Limiter({ policy, store, timeout: '10s', prefix: prefix('reset') });
    assert.ok((await limiter.check('k', { nowMs: NOW })).allowed);
    assert.equal((await limiter.check('k', { nowMs: NOW })).source, 'penalty');
    assert.equal((await limiter.peek('k', { nowMs: NOW + 1000 })).source, 'penalty', name);
    await limiter.reset('k');
    assert.ok((await limiter.peek('k', { nowMs: NOW + 1000 })).allowed, name);
    assert.ok((await limiter.check('k', { nowMs: NOW + 1000 })).allowed, name);
  }
});

test('a policy limiter peeks and resets requests by its key (ip)', async () => {
  const limiter = new Limiter({ policy: { rate: '10/s', burst: 1 }, prefix: prefix('one') });
  const req = { path: '/', peer: '203.0.113.7', nowMs: NOW };
  assert.equal((await limiter.peekRequest(req)).status, null);
  assert.equal((await limiter.checkRequest(req)).status, null);
  assert.equal((await limiter.peekRequest(req)).status, 429);
  assert.equal(await limiter.resetRequest(req), 1);
  assert.equal((await limiter.checkRequest(req)).status, null);
  await assert.rejects(limiter.resetRequest({ path: '/', cost: 'x' }), ConfigError);
  limiter.close();
  await assert.rejects(limiter.resetRequest(req), ClosedError);
  await assert.rejects(limiter.peekRequest(req), ClosedError);
});

test('while the store is down a peek answers by the fallback', async () => {
  // A port nothing listens on: every store call fails at once.
  const server = require('node:net').createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const store = `redis://127.0.0.1:${server.address().port}`;
  await new Promise((resolve) => server.close(resolve));
  const limiter = new Limiter({ policy: { rate: '2/min', burst: 2, onStoreError: 'local' }, store });
  for (let i = 0; i < 3; i++) {
    const d = await limiter.peek('k', { nowMs: NOW });
    assert.deepStrictEqual([d.allowed, d.remaining, d.source], [true, 1, 'local']);
  }
  assert.equal((await limiter.check('k', { nowMs: NOW })).remaining, 1);
  assert.equal((await limiter.peek('k', { nowMs: NOW })).remaining, 0);
  const closed = new Limiter({ policy: { rate: '2/min', onStoreError: 'fail_closed' }, store });
  assert.equal((await closed.peek('k')).source, 'fail_closed');
  await assert.rejects(closed.resetRequest({ path: '/', peer: '203.0.113.7' }), (e) => e.code === 'POLYLIMIT_STORE_UNAVAILABLE');
});

test("a key someone else's data holds is a StoreError naming that store key", async () => {
  const key = prefix('wrongtype');
  const storeKey = `polylimit:token_bucket:default:p1000:{${key}}`;
  assert.equal(await redis.command(`SET ${storeKey} hello`), '+OK\r\n');
  const limiter = new Limiter({ policy: { rate: '10/s' }, store: redis.url, timeout: '10s' }); // a slow CI check would fall back, not raise
  await assert.rejects(limiter.check(key), (e) => {
    assert.ok(e instanceof StoreError, e.name);
    assert.equal(e.key, storeKey);
    assert.match(e.message, /WRONGTYPE|POLYLIMIT_STATE/);
    return true;
  });
  assert.equal((await limiter.check(`${key}-other`)).allowed, true);
});
