'use strict';
// Concurrency limits (issue 18) from JavaScript: limiter.acquire / lease.release, the config fields,
// $POLYLIMIT_VECTORS/concurrency played on memory and a real Redis, and 100 acquires at once on Redis.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter, Lease, ConfigError } = require('..');
const { RedisServer, vectorFiles, strictFields } = require('./support');

const CASE = ['name', 'description', 'policy', 'steps'];
const ACQUIRE = ['now_ms', 'key', 'cost', 'expect'];
const RELEASE = ['now_ms', 'release', 'released'];
const EXPECT = ['allowed', 'remaining', 'reset_after_ms', 'retry_after_ms', 'limit'];

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let prefixes = 0;
const make = (store, policy, options = {}) =>
  new Limiter({ policy, store, timeout: '10s', prefix: `node-conc-${process.pid}-${prefixes++}`, ...options }); // decisions, not latency

async function playVectors(store) {
  const failures = [];
  let steps = 0;
  for (const [file, doc] of vectorFiles('concurrency')) {
    strictFields(doc, ['cases'], ['cases'], file);
    assert.ok(doc.cases.length > 0, `${file}: no cases`);
    for (const [ci, c] of doc.cases.entries()) {
      strictFields(c, CASE, ['name', 'policy', 'steps'], `${file}: case ${ci}`);
      assert.ok(c.steps.length > 0, `${file}: ${c.name}: no steps`);
      const limiter = make(store, c.policy);
      const leases = [];
      for (const [i, step] of c.steps.entries()) {
        const at = `${store}: ${file}: ${c.name} step ${i} (now_ms ${step.now_ms})`;
        steps++;
        if ('release' in step) {
          strictFields(step, RELEASE, RELEASE, at);
          const lease = leases[step.release];
          assert.ok(step.release < i && lease, `${at}: \`release\` names an earlier allowed acquire`);
          const released = await lease.release({ nowMs: step.now_ms });
          if (released !== Number(step.released)) failures.push(`${at}: released ${released}, expected ${step.released}`);
          leases.push(null);
          continue;
        }
        strictFields(step, ACQUIRE, ['now_ms', 'expect'], at);
        strictFields(step.expect, EXPECT, ['allowed', 'remaining', 'reset_after_ms', 'retry_after_ms'], `${at} expect`);
        const e = step.expect;
        const { decision, lease } = await limiter.acquire(step.key ?? 'k', { cost: step.cost ?? 1, nowMs: step.now_ms });
        const want = {
          allowed: e.allowed,
          remaining: e.remaining,
          resetAfterMs: e.reset_after_ms,
          retryAfterMs: e.retry_after_ms,
          delayMs: 0,
          source: 'store',
          limit: e.limit ?? decision.limit,
        };
        try {
          assert.deepStrictEqual({ ...decision }, want);
        } catch {
          failures.push(`${at}: expected ${JSON.stringify(want)}, got ${JSON.stringify(decision)}`);
        }
        if ((lease !== null) !== decision.allowed) failures.push(`${at}: lease ${lease} for ${JSON.stringify(decision)}`);
        leases.push(lease);
      }
      if (!limiter.metricsText().includes('polylimit_store_errors_total 0\n')) failures.push(`${store}: ${c.name}: a store call failed`);
      limiter.close();
    }
  }
  return { steps, failures };
}

for (const store of ['memory', 'redis']) {
  test(`concurrency vectors on ${store}`, async () => {
    const { steps, failures } = await playVectors(store === 'memory' ? 'memory' : redis.url);
    assert.ok(steps > 0);
    assert.deepStrictEqual(failures, [], `${failures.length} mismatches:\n${failures.join('\n')}`);
  });
}

test('acquire and release: a lease per admission, released once', async () => {
  const limiter = make('memory', { algorithm: 'concurrency', limit: 2, lease: '10s' });
  const a = await limiter.acquire('k', { nowMs: 1000 });
  const b = await limiter.acquire('k', { nowMs: 1000 });
  const c = await limiter.acquire('k', { nowMs: 1000 });
  assert.deepStrictEqual([a.decision.allowed, a.decision.remaining, b.decision.remaining], [true, 1, 0]);
  assert.ok(a.lease instanceof Lease && b.lease instanceof Lease);
  assert.deepStrictEqual([c.decision.allowed, c.decision.retryAfterMs, c.lease], [false, 10000, null]);
  assert.equal(a.lease.released, false);
  assert.equal(await a.lease.release({ nowMs: 2000 }), 1);
  assert.equal(a.lease.released, true);
  assert.equal(await a.lease.release({ nowMs: 2000 }), 0, 'a second release gives nothing back');
  assert.equal((await limiter.acquire('k', { nowMs: 2000 })).decision.allowed, true);
  assert.equal((await limiter.acquire('k', { nowMs: 2000 })).decision.allowed, false, 'one slot came back, once');
});

test('Symbol.asyncDispose releases, where the runtime has it', { skip: typeof Symbol.asyncDispose !== 'symbol' }, async () => {
  const limiter = make('memory', { algorithm: 'concurrency', limit: 1 });
  const { lease } = await limiter.acquire('k');
  assert.equal((await limiter.acquire('k')).decision.allowed, false);
  await lease[Symbol.asyncDispose]();
  assert.equal(lease.released, true);
  assert.equal((await limiter.acquire('k')).decision.allowed, true);
});

test('no lease without a concurrency policy; check refuses a concurrency policy', async () => {
  const rate = make('memory', { algorithm: 'gcra', rate: '1/s' });
  assert.deepStrictEqual(await rate.acquire('k', { nowMs: 0 }), {
    decision: { allowed: true, limit: 1, remaining: 0, resetAfterMs: 1000, retryAfterMs: null, delayMs: 0, source: 'store' },
    lease: null,
  });
  assert.equal((await rate.acquire('k', { nowMs: 0 })).lease, null);
  const limiter = make('memory', { algorithm: 'concurrency', limit: 1 });
  await assert.rejects(limiter.check('k'), (e) => e instanceof ConfigError && e.field === 'policy' && /is a concurrency policy/.test(e.message));
});

test('limit and lease reach the core; errors name the field', async () => {
  const { decision } = await make('memory', { algorithm: 'concurrency', limit: 3, lease: 5000 }).acquire('k', { nowMs: 0 });
  assert.deepStrictEqual([decision.limit, decision.remaining, decision.resetAfterMs], [3, 2, 5000]);
  const text = await make('memory', { algorithm: 'concurrency', limit: 3, lease: '2s' }).acquire('k', { nowMs: 0 });
  assert.equal(text.decision.resetAfterMs, 2000);
  assert.throws(() => make('memory', { algorithm: 'concurrency', limit: 0 }), (e) => e instanceof ConfigError && e.field === 'policy.limit');
  assert.throws(() => make('memory', { algorithm: 'concurrency' }), (e) => e.field === 'policy.limit' && /is required/.test(e.message));
  assert.throws(() => make('memory', { algorithm: 'concurrency', limit: 2, lease: 'soon' }), (e) => e.field === 'policy.lease');
  const limiter = make('memory', { algorithm: 'concurrency', limit: 2 });
  await assert.rejects(limiter.acquire('k', { nowMs: 'x' }), (e) => e instanceof ConfigError && e.field === 'nowMs');
  await assert.rejects(limiter.acquire(42), (e) => e instanceof ConfigError && e.field === 'key');
});

test('100 acquires at once on Redis with limit 10: exactly 10 leases; releasing them admits 10 more', async () => {
  const limiter = make(redis.url, { algorithm: 'concurrency', limit: 10, lease: '30s' });
  const first = await Promise.all(Array.from({ length: 100 }, () => limiter.acquire('api')));
  for (const { decision, lease } of first) assert.equal(decision.allowed, lease !== null);
  const leases = first.map((r) => r.lease).filter(Boolean);
  assert.equal(leases.length, 10);
  const released = await Promise.all(leases.map((l) => l.release()));
  assert.equal(released.reduce((a, b) => a + b, 0), 10);
  const again = await Promise.all(Array.from({ length: 100 }, () => limiter.acquire('api')));
  assert.equal(again.filter((r) => r.decision.allowed).length, 10);
  assert.ok(limiter.metricsText().includes('polylimit_store_errors_total 0\n'));
  await Promise.all(again.filter((r) => r.lease).map((r) => r.lease.release()));
  limiter.close();
});

test('a lease releases after the limiter is closed (requests in flight finish)', async () => {
  for (const store of ['memory', redis.url]) {
    const limiter = make(store, { algorithm: 'concurrency', limit: 1 });
    const { lease } = await limiter.acquire('k');
    limiter.close();
    await assert.rejects(limiter.acquire('k'), (e) => e.code === 'POLYLIMIT_CLOSED');
    assert.equal(await lease.release(), 1, store);
  }
});
