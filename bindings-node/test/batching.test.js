'use strict';
// check(key) calls of one JavaScript turn go to the addon in one call
// (checkMany), and other calls flush them first, so the store sees calls in
// the order they were made. (A loaded machine can take longer than the default 100 ms
// timeout to connect: the tests give 5 s, the fallback's decisions are not the point here.)
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter, ClosedError } = require('..');
const { RedisServer } = require('./support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

/** Counts the calls of the addon's method `name` on `limiter`. */
function spy(limiter, name) {
  const native = limiter._native;
  const original = native[name].bind(native);
  const calls = [];
  native[name] = (...args) => {
    calls.push(args);
    return original(...args);
  };
  return calls;
}

test('the check(key) calls of one turn reach the addon in one call, each with its own decision', async () => {
  for (const store of ['memory', redis.url]) {
    const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '30/h' }, store, prefix: 'batch-one-call', timeout: '5s' });
    // The bridge's batching (the limiter's own socket, sansio.js, would pipeline them: sans_io.test.js).
    if (limiter._sansIo) {
      limiter._sansIo.close();
      limiter._sansIo = null;
    }
    const calls = spy(limiter, 'checkMany');
    const keys = Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? 'even' : `odd-${i}`));
    const decisions = await Promise.all(keys.map((key) => limiter.check(key)));
    assert.equal(calls.length, 1, store);
    assert.equal(calls[0][1].length, 50, store);
    // 25 checks of 'even' under 30/min: all allowed, remaining counting down; each odd key once.
    assert.deepEqual(
      decisions.filter((_, i) => i % 2 === 0).map((d) => d.remaining).sort((a, b) => b - a),
      Array.from({ length: 25 }, (_, i) => 29 - i),
      store,
    );
    assert.ok(decisions.every((d) => d.allowed && d.source === 'store'), store);
    assert.ok(decisions.filter((_, i) => i % 2 === 1).every((d) => d.remaining === 29), store);
    // The next turn is a new call.
    await Promise.all([limiter.check('even'), limiter.check('even')]);
    assert.equal(calls.length, 2, store);
    limiter.close();
  }
});

test('a call made after check() in the same turn sees the check', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '10/h' }, store: redis.url, prefix: 'batch-order', timeout: '5s' });
  // Connected first: calls waiting for the first connection may go in any order.
  await limiter.check('warm-up');
  const checked = limiter.check('k');
  const peeked = limiter.peek('k');
  assert.equal((await checked).remaining, 9);
  // A peek shows the decision a check would get now: one more charged.
  assert.equal((await peeked).remaining, 8);
  const again = limiter.check('k');
  const withCost = limiter.check('k', { cost: 2 });
  assert.equal((await again).remaining, 8);
  assert.equal((await withCost).remaining, 6);
  const last = limiter.check('k');
  await limiter.reset('k');
  assert.equal((await last).remaining, 5);
  assert.equal((await limiter.peek('k')).remaining, 9);
  limiter.close();
});

test('a call through the bridge after a check on the socket reaches the store after it', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '10/h' }, store: redis.url, prefix: 'batch-order-socket', timeout: '5s' });
  const sansIo = limiter._sansIo;
  assert.ok(sansIo, 'a plain standalone Redis URL gives the limiter its own socket');
  // Until a lone check goes by the socket (the bridge connects and samples the clock first).
  for (let i = 0; i < 200 && sansIo.sentCount === 0; i++) await limiter.check('warm-up');
  assert.ok(sansIo.sentCount > 0, 'a check went by the socket');
  // The check's bytes held in this process; the reset goes through the bridge, another connection.
  sansIo.socket.cork();
  const sent = sansIo.sentCount;
  const checked = limiter.check('k');
  assert.equal(sansIo.sentCount, sent + 1, 'the check went by the socket');
  const reset = limiter.reset('k');
  // Before the fix the reset reached Redis (and settled) while the check was still held; 200 ms
  // bounds how long this waits to see that it does not.
  const first = await Promise.race([reset.then(() => 'reset'), new Promise((r) => setTimeout(r, 200, 'held'))]);
  sansIo.socket.uncork();
  assert.equal((await checked).remaining, 9);
  await reset;
  assert.equal(first, 'held', 'the reset waited for the check on the socket');
  // A peek shows the decision a check would get: 9 with nothing charged (8 had the reset gone first).
  assert.equal((await limiter.peek('k')).remaining, 9, 'the reset came after the check');
  limiter.close();
});

test('checks queued when the limiter closes settle; later ones reject with ClosedError', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '10/min' }, store: redis.url, prefix: 'batch-close' });
  const queued = limiter.check('k');
  limiter.close();
  const settled = await queued.then(
    (d) => d,
    (e) => e,
  );
  assert.ok(settled instanceof ClosedError || settled.allowed !== undefined, String(settled));
  await assert.rejects(limiter.check('k'), ClosedError);
  const many = await Promise.allSettled([limiter.check('a'), limiter.check('b')]);
  assert.deepEqual(
    many.map((r) => r.status === 'rejected' && r.reason instanceof ClosedError),
    [true, true],
  );
});
