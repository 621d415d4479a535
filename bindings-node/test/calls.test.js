'use strict';
// Every limiter of a thread submits to one bridge (calls.js): the calls of several limiters
// settle each with its own result, and a limiter that becomes unreachable with calls in flight
// still settles them (the bridge is the thread's, not the limiter's).
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { Limiter, ConfigError } = require('..');

test('the calls of several limiters, interleaved in one turn, each settle with their own result', async () => {
  const a = new Limiter({ policy: { algorithm: 'fixed_window', rate: '3/h' } });
  const b = new Limiter({ policy: { algorithm: 'fixed_window', rate: '5/h' } });
  const calls = [];
  for (let i = 0; i < 4; i++) {
    calls.push(a.check('k'), b.check('k'), b.reset('other'), a.acquire('k'));
  }
  const got = await Promise.all(calls);
  const limits = got.filter((_, i) => i % 4 < 2).map((d) => d.limit);
  assert.deepEqual(limits, [3, 5, 3, 5, 3, 5, 3, 5]);
  // reset() resolves with nothing (Promise<void>), as before the bridge.
  assert.deepStrictEqual(got.filter((_, i) => i % 4 === 2), [undefined, undefined, undefined, undefined]);
  // a's checks and acquires charge the same key: 3 allowed in the order made, then denied.
  const aAllowed = got.filter((_, i) => i % 4 === 0 || i % 4 === 3).map((r) => (r.decision || r).allowed);
  assert.deepEqual(aAllowed, [true, true, true, false, false, false, false, false]);
  // An error settles only its own call.
  const [bad, good] = await Promise.allSettled([a.check('k', { nowMs: 'soon' }), b.check('k')]);
  assert.ok(bad.reason instanceof ConfigError && bad.reason.field === 'nowMs');
  assert.equal(good.value.remaining, 0);
  a.close();
  b.close();
});

test('a limiter collected with checks in flight still settles them', () => {
  const out = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      '-e',
      `const { Limiter } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
       let collected = 0;
       const registry = new FinalizationRegistry(() => collected++);
       function start() {
         const limiter = new Limiter({ policy: { rate: '2/h' } });
         registry.register(limiter, 1);
         return [limiter.check('k'), limiter.check('k'), limiter.check('k')];
       }
       (async () => {
         const pending = start();
         // The checks reach the addon in a microtask; then nothing of ours holds the limiter.
         await Promise.resolve();
         global.gc();
         const got = await Promise.all(pending);
         for (let i = 0; i < 20 && collected < 1; i++) {
           await new Promise((r) => setImmediate(r));
           global.gc();
         }
         console.log(JSON.stringify([got.map((d) => d.allowed), collected]));
       })();`,
    ],
    { encoding: 'utf8', timeout: 20000 },
  );
  assert.deepEqual(JSON.parse(out), [[true, true, false], 1]);
});

test("a limiter's onAnomaly listens on the thread's bridge until the limiter is closed or collected", () => {
  const root = JSON.stringify(path.resolve(__dirname, '..'));
  const out = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      '-e',
      `const { Limiter } = require(${root});
       const calls = require(${root} + '/calls');
       const policy = { rate: '100/s', adaptive: { window: '10s' } };
       const closed = new Limiter({ policy, onAnomaly() {} });
       const counts = [calls.listening()];
       closed.close();
       counts.push(calls.listening());
       (function () { new Limiter({ policy, onAnomaly() {} }); })();
       counts.push(calls.listening());
       (async () => {
         for (let i = 0; i < 50 && calls.listening() > 0; i++) {
           global.gc();
           await new Promise((r) => setImmediate(r));
         }
         counts.push(calls.listening());
         console.log(JSON.stringify(counts));
       })();`,
    ],
    { encoding: 'utf8', timeout: 20000 },
  );
  assert.deepEqual(JSON.parse(out), [1, 0, 1, 0]);
});
