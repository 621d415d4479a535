'use strict';
// Adaptive limits (issue 20): the shared vectors on memory and a real Redis,
// the onAnomaly guarantees, and the incident through Express on a real Redis:
// 50 good clients and one that jumps 30x.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const http = require('node:http');
const { EventEmitter, once } = require('node:events');
const express = require('express');
const { rateLimit } = require('../express');
const { Limiter } = require('..');
const { RedisServer } = require('./support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-adaptive-${process.pid}-${seq++}`;
const vectors = process.env.POLYLIMIT_VECTORS || path.join(__dirname, '../../tests/conformance');

// Every onAnomaly of these tests pushes its event and emits 'alert' here.
const delivered = new EventEmitter();
const collect = (list) => (e) => {
  list.push(e);
  delivered.emit('alert');
};

/** The events once `list` holds `n` (woken by each delivery), or what it holds after `ms`. */
async function waitFor(list, n, ms) {
  const deadline = Date.now() + ms;
  while (list.length < n && Date.now() < deadline) {
    await once(delivered, 'alert', { signal: AbortSignal.timeout(deadline - Date.now()) }).catch(() => {});
  }
  return list.slice();
}

for (const store of ['memory', 'redis']) {
  test(`adaptive vectors on ${store}`, async () => {
    const dir = path.join(vectors, 'adaptive');
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
    assert.ok(files.length > 0);
    const failures = [];
    for (const file of files) {
      const { cases } = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
      for (const c of cases) {
        const events = [];
        const limiter = new Limiter({
          policy: c.policy, store: store === 'memory' ? 'memory' : redis.url, timeout: '10s', prefix: prefix(),
          onAnomaly: collect(events),
        });
        let seen = 0;
        for (const [i, step] of c.steps.entries()) {
          const { events: wanted = [], ...want } = step.expect;
          for (let n = 0; n < (step.times ?? 1); n++) {
            const nowMs = step.now_ms + n * (step.every_ms ?? 0);
            const opts = { cost: step.cost ?? 1, nowMs };
            const d = step.peek ? await limiter.peek(step.key ?? 'k', opts) : await limiter.check(step.key ?? 'k', opts);
            const got = { allowed: d.allowed, remaining: d.remaining, retry_after_ms: d.retryAfterMs ?? null, source: d.source };
            for (const k of Object.keys(want)) {
              if (got[k] !== want[k]) failures.push(`${file}: ${c.name} step ${i} at ${nowMs}: ${k} ${got[k]} != ${want[k]}`);
            }
          }
          // An event no step expects shows in the next step's, or fails the count at the end.
          const all = await waitFor(events, seen + wanted.length, wanted.length ? 5000 : 0);
          const items = all.slice(seen);
          seen += items.length;
          const gotEvents = items.map((e) => ({
            kind: e.event.split('.')[1], key: e.key, rate: e.rate, baseline: e.baseline, limited_to: e.limitedTo,
          }));
          const order = (e) => ({ kind: e.kind, key: e.key, rate: e.rate, baseline: e.baseline, limited_to: e.limited_to });
          if (JSON.stringify(gotEvents.map(order)) !== JSON.stringify(wanted.map(order))) {
            failures.push(`${file}: ${c.name} step ${i}: events ${JSON.stringify(gotEvents)} != ${JSON.stringify(wanted)}`);
          }
        }
        if (events.length !== seen) failures.push(`${file}: ${c.name}: ${events.length - seen} events no step expected`);
        limiter.close();
      }
    }
    assert.deepEqual(failures, []);
  });
}

test('a throwing or rejecting onAnomaly is counted and never reaches the request', async () => {
  for (const fail of [() => { throw new Error('down'); }, async () => { throw new Error('down'); }]) {
    let called;
    const invoked = new Promise((resolve) => { called = resolve; });
    const onAnomaly = (e) => {
      called();
      return fail(e);
    };
    const policy = { rate: '1000/s', adaptive: { window: '1s', horizon: '4s', factor: 3, floor: '4/s' } };
    const limiter = new Limiter({ policy, onAnomaly });
    for (let t = 0; t < 4000; t += 500) assert.ok((await limiter.check('k', { nowMs: t })).allowed);
    const sources = [];
    for (let i = 0; i < 6; i++) sources.push((await limiter.check('k', { nowMs: 4000 })).source);
    assert.deepEqual(sources, ['store', 'store', 'store', 'store', 'adaptive', 'adaptive']);
    // The handler counts a throw at once, a rejection in a microtask: both done
    // one event-loop turn after the call.
    await invoked;
    await new Promise((r) => setImmediate(r));
    assert.match(limiter.metricsText(), /polylimit_anomaly_callback_errors_total 1\n/);
    limiter.close();
  }
});

test('onAnomaly must be a function', () => {
  assert.throws(() => new Limiter({ policy: { rate: '1/s' }, onAnomaly: 'yes' }), { code: 'POLYLIMIT_CONFIG', field: 'onAnomaly' });
});

// The incident on real traffic: windows of 1 s, horizon 4 s; every client sends 2 requests a
// second; from WARM s the bad one sends 60 (30x) for ATTACK s, then 2 again for CALM s.
const GOOD = 50;
const MAX_LAG_MS = 250;
const NORMAL = 2;
const BURST = 60;
const WARM = 5;
const ATTACK = 3;
const CALM = 4;

test('the incident through Express on Redis: the bad client is limited, the good ones never', async () => {
  const events = [];
  const limiter = new Limiter({
    policy: {
      name: 'payments', rate: '1000/s',
      adaptive: { window: '1s', horizon: '4s', factor: 10, floor: '10/s', minRate: '5/s', alertKeys: 'raw' },
    },
    store: redis.url, timeout: '10s', prefix: prefix(), onAnomaly: collect(events),
  });
  const app = express();
  app.use(rateLimit({ limiter, key: ['header:x-client'] }));
  app.get('/pay', (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 100 });
  const url = `http://127.0.0.1:${server.address().port}/pay`;
  const get = (client) => new Promise((resolve, reject) => {
    http.get(url, { agent, headers: { 'x-client': client } }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode)); })
      .on('error', reject);
  });
  const log = {};
  const start = performance.now();
  const client = async (name, bad) => {
    log[name] = [];
    let t = bad ? 0 : (seq * 7 + Number(name.split('-')[1] || 0) * 10) % 500 / 1000;
    while (t < WARM + ATTACK + CALM) {
      const delay = start + t * 1000 - performance.now();
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      // A paced client skips the sends it missed instead of bursting them: on a loaded
      // host a burst of late calm sends would look like the attack going on.
      else if (-delay > MAX_LAG_MS) t -= delay / 1000;
      const rate = bad && t >= WARM && t < WARM + ATTACK ? BURST : NORMAL;
      const sent = (performance.now() - start) / 1000;
      log[name].push([sent, await get(name)]);
      t += 1 / rate;
    }
  };
  try {
    await Promise.all([...Array.from({ length: GOOD }, (_, i) => client(`good-${i}`, false)), client('bad', true)]);
  } finally {
    agent.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
  await waitFor(events, 2, 5000);
  const goodRefused = Object.entries(log).filter(([n]) => n.startsWith('good')).flatMap(([, r]) => r).filter(([, s]) => s !== 200).length;
  const refused = log.bad.filter(([, s]) => s === 429).map(([t]) => t);
  console.log(`incident: ${Object.values(log).flat().length} requests; good clients refused: ${goodRefused}; bad: ${log.bad.length} requests, ${refused.length} refused between ${Math.min(...refused).toFixed(2)}s and ${Math.max(...refused).toFixed(2)}s; events: ${JSON.stringify(events.map((e) => [e.event, e.rate, e.baseline, e.limitedTo]))}`);
  assert.equal(goodRefused, 0);
  assert.deepEqual(events.map((e) => [e.event, e.key.includes('bad')]), [['polylimit.anomalous', true], ['polylimit.recovered', true]]);
  assert.ok(refused.length > 0, 'the bad client was never limited');
  assert.ok(Math.min(...refused) >= WARM && Math.min(...refused) <= WARM + 1.5, `first refusal at ${Math.min(...refused)}`);
  assert.ok(log.bad.filter(([t]) => t >= WARM + ATTACK + CALM - 2).every(([, s]) => s === 200), 'back to normal');
  assert.ok(events[0].rate > 10 * events[0].baseline);
  assert.equal(events[0].limitedTo, 5);
  assert.match(limiter.metricsText(), /polylimit_anomalies_total\{policy="payments"\} 1\n/);
  assert.match(limiter.metricsText(), /polylimit_anomalous_keys\{policy="payments"\} 0\n/);
  limiter.close();
});
