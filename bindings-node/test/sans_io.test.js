'use strict';
// The sans-I/O path of check(key) (sansio.js): the limiter's own socket carries the core's
// calls, pipelined, and the decisions are the bridge's; a lost library, a restart
// and a store that went away are decided the usual way (library load, reconnect, fallback).

const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter } = require('..');
const { RedisServer } = require('./support');
const { setMode, DEFAULT_MODE, MAX_IN_FLIGHT } = require('../sansio');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

/** Counts the checks `limiter` sent on its own socket. */
function counted(limiter) {
  const sans = limiter._sansIo;
  assert.ok(sans, 'a plain standalone Redis URL takes the sans-I/O path');
  const stats = { sent: 0 };
  const start = sans.native.sansIoStart.bind(sans.native);
  sans.native.sansIoStart = (key) => {
    const bytes = start(key);
    if (bytes !== null) stats.sent++;
    return bytes;
  };
  return stats;
}

/** Checks another key until the socket carries one (the core's connection and clock come first). */
async function warm(limiter, stats) {
  for (let i = 0; i < 200 && stats.sent === 0; i++) await limiter.check(`warm:${i}`);
  assert.ok(stats.sent > 0, 'the socket carries checks once connected');
}

const strip = (d) => ({ ...d, resetAfterMs: undefined, retryAfterMs: d.retryAfterMs === null ? null : 'some' });

for (const algorithm of ['fixed_window', 'token_bucket', 'gcra']) {
  test(`${algorithm}: one at a time, the socket's decisions are the bridge's`, async () => {
    const policy = { algorithm, rate: '5/min' };
    const ours = new Limiter({ policy, store: redis.url, prefix: `sans-${algorithm}` });
    const bridge = new Limiter({ policy, store: redis.url, prefix: `bridge-${algorithm}` });
    bridge._sansIo.close();
    bridge._sansIo = null;
    const stats = counted(ours);
    await warm(ours, stats);
    await bridge.check('warm');
    stats.sent = 0;
    const got = [];
    const want = [];
    for (let i = 0; i < 8; i++) {
      got.push(strip(await ours.check('k')));
      want.push(strip(await bridge.check('k')));
    }
    assert.deepEqual(got, want);
    assert.equal(got.filter((d) => d.allowed).length, 5);
    assert.equal(stats.sent, 8, 'every check went by the socket');
    // The decisions are counted as any.
    const metrics = ours.metricsText();
    assert.match(metrics, /polylimit_requests_total\{[^}]*decision="denied"[^}]*\} 3/);
    // And its store latency: the histogram counts the socket's calls as the bridge's.
    const latencies = Number(/polylimit_store_latency_seconds_count (\d+)/.exec(metrics)[1]);
    const bridged = Number(/polylimit_store_latency_seconds_count (\d+)/.exec(bridge.metricsText())[1]);
    assert.ok(latencies >= 8 && bridged >= 8, `${latencies} and ${bridged} store calls timed`);
    ours.close();
    bridge.close();
  });
}

test('a lost library is loaded again by the usual path, nothing charged twice', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/min' }, store: redis.url, prefix: 'sans-flush' });
  const stats = counted(limiter);
  await warm(limiter, stats);
  for (let i = 0; i < 3; i++) await limiter.check('k');
  await redis.command('FUNCTION FLUSH');
  const d = await limiter.check('k');
  assert.equal(d.remaining, 96);
  assert.equal(d.source, 'store');
  assert.equal((await limiter.check('k')).remaining, 95);
  assert.ok(stats.sent >= 4, `${stats.sent} checks went by the socket`);
  limiter.close();
});

test('a restarted server: the socket reconnects, the fallback decides while it is down', async () => {
  const server = await RedisServer.start();
  const limiter = new Limiter({
    policy: { algorithm: 'fixed_window', rate: '100/min', onStoreError: 'fail_open' },
    store: server.url,
    prefix: 'sans-restart',
  });
  const stats = counted(limiter);
  await warm(limiter, stats);
  for (let i = 0; i < 3; i++) assert.equal((await limiter.check('k')).source, 'store');
  const before = stats.sent;
  assert.ok(before >= 1);
  await server.kill();
  const down = await limiter.check('k');
  assert.equal(down.allowed, true);
  assert.notEqual(down.source, 'store');
  await server.spawn();
  let back = null;
  for (let i = 0; i < 200 && (back === null || back.source !== 'store' || stats.sent === before); i++) {
    back = await limiter.check('k');
    if (back.source !== 'store') await new Promise((r) => setImmediate(r));
  }
  assert.equal(back.source, 'store');
  assert.ok(stats.sent > before, 'the socket carries checks again after the restart');
  limiter.close();
  await server.kill();
});

test('checks in flight together are pipelined on the socket (mode pipeline); close settles those on it', async (t) => {
  setMode('pipeline');
  t.after(() => setMode(DEFAULT_MODE));
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/min' }, store: redis.url, prefix: 'sans-many' });
  const stats = counted(limiter);
  await warm(limiter, stats);
  stats.sent = 0;
  const all = await Promise.all(Array.from({ length: 10 }, () => limiter.check('k')));
  assert.deepEqual(all.map((d) => d.remaining), [99, 98, 97, 96, 95, 94, 93, 92, 91, 90], 'answered in the order sent');
  assert.equal(stats.sent, 10, 'every check of the batch went by the socket');
  const last = [limiter.check('k'), limiter.check('k')];
  assert.equal(stats.sent, 12);
  limiter.close();
  assert.deepEqual((await Promise.all(last)).map((d) => d.remaining), [89, 88]);
  await assert.rejects(limiter.check('k'), (e) => e.code === 'POLYLIMIT_CLOSED');
});

test('the default mode: only a check alone goes by the socket (the bridge batches the rest)', async () => {
  {
    const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/min' }, store: redis.url, prefix: 'sans-single' });
    const stats = counted(limiter);
    await warm(limiter, stats);
    stats.sent = 0;
    const all = await Promise.all(Array.from({ length: 10 }, () => limiter.check('k')));
    assert.deepEqual(all.map((d) => d.remaining).sort((a, b) => b - a), [99, 98, 97, 96, 95, 94, 93, 92, 91, 90]);
    assert.equal(stats.sent, 1, 'only the first of a batch goes by the socket');
    limiter.close();
  }
});

test('in flight on the socket are bounded: the rest go by the bridge', async (t) => {
  setMode('pipeline');
  t.after(() => setMode(DEFAULT_MODE));
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '1000/min' }, store: redis.url, prefix: 'sans-bound' });
  const stats = counted(limiter);
  await warm(limiter, stats);
  stats.sent = 0;
  const all = await Promise.all(Array.from({ length: MAX_IN_FLIGHT + 20 }, () => limiter.check('k')));
  assert.equal(stats.sent, MAX_IN_FLIGHT);
  assert.equal(new Set(all.map((d) => d.remaining)).size, MAX_IN_FLIGHT + 20, 'each charged once');
  limiter.close();
});

test('under a steady load the socket is never idle: its queue of answered calls is dropped now and then', async (t) => {
  setMode('pipeline');
  t.after(() => setMode(DEFAULT_MODE));
  const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '999999/min' }, store: redis.url, prefix: 'sans-steady' });
  const stats = counted(limiter);
  await warm(limiter, stats);
  stats.sent = 0;
  let longest = 0;
  async function worker(w) {
    for (let i = 0; i < 500; i++) {
      await limiter.check(`k${w}`);
      longest = Math.max(longest, limiter._sansIo.waiting.length);
    }
  }
  await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
  assert.ok(stats.sent > 3000, `${stats.sent} of 4000 went by the socket`);
  assert.ok(longest < 1024 + 64, `the queue held ${longest} entries`);
  limiter.close();
});

test('a URL with a password or a database takes the usual path', () => {
  for (const store of [`redis://:secret@127.0.0.1:${redis.port}`, `redis://127.0.0.1:${redis.port}/2`]) {
    const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '1/s' }, store });
    assert.equal(limiter._sansIo, null, store);
    limiter.close();
  }
});

test('a server that stops answering: the socket is dropped after the timeout, the fallback decides', async () => {
  const limiter = new Limiter({
    policy: { algorithm: 'fixed_window', rate: '100/min', onStoreError: 'fail_open' },
    store: redis.url,
    prefix: 'sans-silent',
    timeout: '100ms',
  });
  const stats = counted(limiter);
  await warm(limiter, stats);
  stats.sent = 0;
  await redis.command('CLIENT PAUSE 600 ALL');
  const started = Date.now();
  const d = await limiter.check('k');
  assert.equal(stats.sent, 1, 'the check went by the socket');
  assert.equal(d.allowed, true);
  assert.notEqual(d.source, 'store');
  assert.ok(Date.now() - started < 550, `decided after ${Date.now() - started} ms`);
  limiter.close();
  await redis.command('CLIENT UNPAUSE'); // no wait for the pause to end
});

test('a check the socket sent that timed out is never sent again: charged once, when the server ran it', async () => {
  const limiter = new Limiter({
    policy: { algorithm: 'fixed_window', rate: '100/h', onStoreError: 'fail_open' },
    store: redis.url,
    prefix: 'sans-once',
    timeout: '100ms',
  });
  const stats = counted(limiter);
  await warm(limiter, stats);
  stats.sent = 0;
  // The server is busy past the timeout, then runs the call it read: the charge happens once.
  const busy = redis.command('DEBUG SLEEP 0.4');
  await new Promise((r) => setTimeout(r, 50)); // the server is asleep
  const d = await limiter.check('k');
  assert.equal(stats.sent, 1, 'the check went by the socket');
  assert.notEqual(d.source, 'store', 'decided by the fallback');
  await busy;
  const next = await limiter.check('k');
  assert.equal(next.source, 'store');
  assert.equal(next.remaining, 100 - 2, 'the timed-out check was charged once, not sent again');
  limiter.close();
});

test('a limiter dropped unclosed is collected: its open socket does not keep it alive', async () => {
  const { execFileSync } = require('node:child_process');
  const script = `
    const { Limiter } = require(${JSON.stringify(require.resolve('..'))});
    const collected = new FinalizationRegistry(() => { console.log('collected'); process.exit(0); });
    (async () => {
      let limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/min' }, store: '${redis.url}', prefix: 'sans-gc' });
      for (let i = 0; i < 200 && !(limiter._sansIo.socket && !limiter._sansIo.socket.connecting); i++) await limiter.check('k' + i);
      await limiter.check('last');
      if (!limiter._sansIo.socket) { console.log('no socket'); process.exit(2); }
      collected.register(limiter, null);
      limiter = null;
      for (let i = 0; i < 50; i++) { global.gc(); await new Promise((r) => setTimeout(r, 20)); }
      console.log('kept'); process.exit(1);
    })();`;
  let out;
  try {
    out = execFileSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 20000 });
  } catch (e) {
    out = String(e.stdout);
  }
  assert.equal(out.trim(), 'collected');
});
