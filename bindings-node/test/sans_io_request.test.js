'use strict';
// The sans-I/O path of the middlewares' requests (`_checkHttp`, sansio.js): the limiter's own
// socket carries the core's one call for a request the core plans to one enforced (policy, key)
// target needing no completion token, pipelined with the calls before it; the core makes the
// outcome from the reply by the usual path's code. Outcomes, headers and bodies are the bridge's;
// a call that timed out is decided by the fallback and never sent again; a reload between send
// and reply does not change the call (it finishes on its rules, charged once); close settles the
// calls in flight.

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Limiter } = require('..');
const { RedisServer } = require('./support');
const { setMode, DEFAULT_MODE } = require('../sansio');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `sans-req-${process.pid}-${seq++}`;

/** Counts the requests `limiter` sent on its own socket. */
function counted(limiter) {
  assert.ok(limiter._sansIo, 'a plain standalone Redis URL takes the sans-I/O path');
  const stats = { sent: 0 };
  const native = limiter._native;
  const check = native.checkHttpBatched.bind(native);
  native.checkHttpBatched = (...args) => {
    const bytes = check(...args);
    if (bytes !== null) stats.sent++;
    return bytes;
  };
  return stats;
}

/** A request as a middleware hands it (`_checkHttp`). */
function ask(limiter, { rule = undefined, path: p = '/api/x', ip = '203.0.113.7', headers = [], cost } = {}) {
  return limiter._checkHttp(rule, 'GET', p, undefined, ip, headers, undefined, undefined, undefined, false, false, undefined, false, cost);
}

/** Requests until the socket carries one (the core's connection and clock come first). */
async function warm(limiter, stats, rule) {
  for (let i = 0; i < 200 && stats.sent === 0; i++) await ask(limiter, { rule, ip: `198.51.100.${i % 250}` });
  assert.ok(stats.sent > 0, 'the socket carries requests once connected');
  stats.sent = 0;
}

/** An outcome without the parts that move with the clock. */
function shown(o) {
  const headers = o.headers.map(([n, v]) => [n, /reset|retry/i.test(n) ? 'some' : v]);
  return { status: o.status, headers, body: o.body === null ? null : JSON.parse(o.body).error, delayMs: o.delayMs, completion: o.completion, decisions: o.decisions.map((d) => [d.rule, d.policy, d.allowed, d.remaining, d.source]) };
}

function bridged(limiter) {
  limiter._sansIo.close();
  limiter._sansIo = null;
  return limiter;
}

const RULES = (rate, headers = 'both') =>
  `headers: ${headers}\npolicies:\n  api: { algorithm: fixed_window, rate: ${rate} }\n  slow: { algorithm: token_bucket, rate: 2/min, burst: 2 }\nrules:\n` +
  `  - { name: api, match: { path: "/api/*" }, key: [ip], policy: api }\n  - { name: slow, match: { path: "/slow" }, key: [ip, route], policy: slow }\n`;

function rulesFile(text) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-sans-req-'));
  const file = path.join(dir, 'rules.yaml');
  fs.writeFileSync(file, text);
  return file;
}

for (const headers of ['both', 'draft-8', 'legacy']) {
  test(`rules file, headers ${headers}: the socket's outcomes are the bridge's, allowed and refused`, async () => {
    const file = rulesFile(RULES('4/min', headers));
    const ours = new Limiter({ rulesFile: file, store: redis.url, prefix: prefix() });
    const theirs = bridged(new Limiter({ rulesFile: file, store: redis.url, prefix: prefix() }));
    const stats = counted(ours);
    await warm(ours, stats);
    for (const p of ['/api/x', '/slow']) {
      const got = [];
      const want = [];
      for (let i = 0; i < 6; i++) {
        got.push(shown(await ask(ours, { path: p })));
        want.push(shown(await ask(theirs, { path: p })));
      }
      assert.deepEqual(got, want);
      assert.equal(got.filter((o) => o.status === 429).length, p === '/slow' ? 4 : 2);
    }
    assert.equal(stats.sent, 12, 'every request went by the socket');
    // Counted in the request metrics as the bridge's.
    const count = (l) => /polylimit_requests_total\{[^}]*decision="denied"[^}]*rule="api"[^}]*\} (\d+)/.exec(l.metricsText());
    assert.deepEqual(count(ours) && count(ours)[1], count(theirs) && count(theirs)[1]);
    ours.close();
    theirs.close();
  });
}

test('a route rule (the Fastify and Express adapters): pipelined, outcomes the bridge gives', async () => {
  const policy = { algorithm: 'gcra', rate: '10/min' };
  const ours = new Limiter({ policy, store: redis.url, prefix: prefix() });
  const theirs = bridged(new Limiter({ policy, store: redis.url, prefix: prefix() }));
  const rule = ours.routeRule(['ip']);
  const theirRule = theirs.routeRule(['ip']);
  const stats = counted(ours);
  await warm(ours, stats, rule);
  // Sixteen in flight together: all on the socket, answered in order.
  const got = await Promise.all(Array.from({ length: 16 }, () => ask(ours, { rule })));
  assert.equal(stats.sent, 16);
  const want = [];
  for (let i = 0; i < 16; i++) want.push(await ask(theirs, { rule: theirRule }));
  assert.deepEqual(got.map(shown), want.map(shown));
  assert.equal(got.filter((o) => o.status === null).length, 10);
  ours.close();
  theirs.close();
});

test('the default mode carries the requests; those of one turn go in one write, to an idle socket too', async () => {
  assert.equal(DEFAULT_MODE, 'requests');
  const ours = new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/min' }, store: redis.url, prefix: prefix() });
  const rule = ours.routeRule(['ip']);
  const stats = counted(ours);
  await warm(ours, stats, rule);
  const socket = ours._sansIo.socket;
  const writes = [];
  const write = socket.write;
  socket.write = function spied(bytes, ...rest) {
    writes.push(bytes.length);
    return write.call(this, bytes, ...rest);
  };
  // The socket is idle: the first request of the turn waits for the others, one write for all.
  const got = await Promise.all(Array.from({ length: 8 }, () => ask(ours, { rule, ip: '192.0.2.9' })));
  assert.equal(stats.sent, 8);
  assert.equal(writes.length, 1, `one write for the turn's requests, not ${writes.length}`);
  assert.deepEqual(got.map((o) => o.decisions[0].remaining), [99, 98, 97, 96, 95, 94, 93, 92]);
  // A request alone goes too, in a write of its own once its turn is done.
  const lone = await ask(ours, { rule, ip: '192.0.2.9' });
  assert.equal(lone.decisions[0].remaining, 91);
  assert.equal(writes.length, 2);
  socket.write = write;
  ours.close();
});

test("mode 'single' leaves the requests to the bridge", async (t) => {
  setMode('single');
  t.after(() => setMode(DEFAULT_MODE));
  const ours = new Limiter({ policy: { algorithm: 'fixed_window', rate: '100/min' }, store: redis.url, prefix: prefix() });
  const rule = ours.routeRule(['ip']);
  const stats = counted(ours);
  for (let i = 0; i < 20; i++) await ask(ours, { rule });
  // A check alone still goes by the socket once it is connected.
  await ours.check('k');
  assert.equal(stats.sent, 0);
  ours.close();
});

test('what needs a completion token, a shadow rule, a clock or a cost bound goes the usual way', async () => {
  const ours = new Limiter({ policy: { algorithm: 'fixed_window', rate: '10/min' }, store: redis.url, prefix: prefix() });
  const stats = counted(ours);
  await warm(ours, stats, ours.routeRule(['ip']));
  const failed = ours.routeRule(['ip'], undefined, { count: 'failed' });
  const o = await ask(ours, { rule: failed });
  assert.equal(typeof o.completion, 'string', 'count modes carry a completion token');
  const at = await ours._checkHttp(ours.routeRule(['ip']), 'GET', '/', undefined, '192.0.2.1', [], undefined, undefined, undefined, false, false, 1_700_000_000_000, false, undefined);
  assert.equal(at.status, null);
  assert.equal(stats.sent, 0, 'none went by the socket');
  // A cost goes by the socket and is charged.
  const costly = await ask(ours, { rule: ours.routeRule(['ip']), ip: '192.0.2.9', cost: 4 });
  assert.equal(stats.sent, 1);
  assert.equal(costly.decisions[0].remaining, 6);
  ours.close();
});

test('a request the socket sent that timed out is never sent again: charged once, when the server ran it', async () => {
  const limiter = new Limiter({
    policy: { algorithm: 'fixed_window', rate: '100/h', onStoreError: 'fail_open' },
    store: redis.url,
    prefix: prefix(),
    timeout: '100ms',
  });
  const rule = limiter.routeRule(['ip']);
  const stats = counted(limiter);
  await warm(limiter, stats, rule);
  const busy = redis.command('DEBUG SLEEP 0.4');
  await new Promise((r) => setTimeout(r, 50)); // the server is asleep
  const [a, b] = await Promise.all([ask(limiter, { rule, ip: '192.0.2.44' }), ask(limiter, { rule, ip: '192.0.2.44' })]);
  assert.equal(stats.sent, 2, 'both went by the socket');
  for (const o of [a, b]) {
    assert.equal(o.status, null, 'fail_open lets them through');
    assert.notEqual(o.decisions[0].source, 'store', 'decided by the fallback');
  }
  await busy;
  const next = await ask(limiter, { rule, ip: '192.0.2.44' });
  assert.equal(next.decisions[0].source, 'store');
  assert.equal(next.decisions[0].remaining, 100 - 3, 'the timed-out requests were charged once each, not sent again');
  limiter.close();
});

test('a reload between send and reply: the request finishes on the rules it started with, charged once', async () => {
  const file = rulesFile(RULES('3/min'));
  const limiter = new Limiter({ rulesFile: file, store: redis.url, prefix: prefix(), timeout: '5s' });
  const stats = counted(limiter);
  await warm(limiter, stats);
  await redis.command('CLIENT PAUSE 10000 ALL');
  const pending = ask(limiter, { ip: '192.0.2.77' });
  assert.equal(stats.sent, 1, 'sent on the socket');
  fs.writeFileSync(file, RULES('7/min'));
  await limiter.reload();
  await redis.command('CLIENT UNPAUSE');
  const o = await pending;
  assert.equal(o.status, null);
  assert.equal(o.decisions[0].limit, 3, 'the rules it started with');
  assert.equal(o.decisions[0].remaining, 2);
  const next = await ask(limiter, { ip: '192.0.2.77' });
  assert.equal(next.decisions[0].limit, 7, 'the next request: the new rules');
  assert.equal(next.decisions[0].remaining, 7 - 2, 'charged once by the socket, once now');
  limiter.close();
});

test('close with requests in flight: they settle with their outcomes; later ones are refused', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'token_bucket', rate: '50/min' }, store: redis.url, prefix: prefix() });
  const rule = limiter.routeRule(['ip']);
  const stats = counted(limiter);
  await warm(limiter, stats, rule);
  const inFlight = Array.from({ length: 8 }, () => ask(limiter, { rule, ip: '192.0.2.88' }));
  assert.equal(stats.sent, 8);
  limiter.close();
  const got = await Promise.all(inFlight);
  assert.deepEqual(got.map((o) => o.decisions[0].remaining).sort((x, y) => y - x), [49, 48, 47, 46, 45, 44, 43, 42]);
  await assert.rejects(ask(limiter, { rule }), (e) => e.code === 'POLYLIMIT_CLOSED');
});

test('a socket that fails with requests in flight: the fallback decides each, the next ones reconnect', async () => {
  const limiter = new Limiter({
    policy: { algorithm: 'fixed_window', rate: '100/min', onStoreError: 'fail_closed' },
    store: redis.url,
    prefix: prefix(),
    failureThreshold: 100, // the breaker stays closed: the socket may carry the next ones at once
  });
  const rule = limiter.routeRule(['ip']);
  const stats = counted(limiter);
  await warm(limiter, stats, rule);
  await redis.command('CLIENT PAUSE 5000 ALL');
  const inFlight = Array.from({ length: 4 }, () => ask(limiter, { rule, ip: '192.0.2.99' }));
  assert.equal(stats.sent, 4);
  limiter._sansIo.socket.destroy();
  const got = await Promise.all(inFlight);
  await redis.command('CLIENT UNPAUSE');
  assert.deepEqual(got.map((o) => o.status), [503, 503, 503, 503], 'fail_closed');
  stats.sent = 0;
  let o;
  for (let i = 0; i < 200 && stats.sent === 0; i++) o = await ask(limiter, { rule, ip: '192.0.2.99' });
  assert.equal(stats.sent, 1, 'the socket carries requests again');
  assert.equal(o.status, null);
  limiter.close();
});
