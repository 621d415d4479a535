'use strict';
// decisions/s of limiter.check() with 64 promises in flight on a real Redis,
// next to rate-limiter-flexible's RateLimiterRedis (ioredis) on the same
// server in the same run. Prints the ratio. Not a test.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { Limiter } = require('..');
const { RedisServer } = require('../test/support');
const { version, median, record } = require('./common');

const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT || 64);
const SECONDS = Number(process.env.BENCH_SECONDS || 2);
// Rounds alternate the contenders so background load hits both alike; medians are reported.
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const KEYS = 10000;

/** Runs `once(i)` with IN_FLIGHT in flight for SECONDS; returns decisions/s. */
async function measure(once) {
  // Warm-up: connections, script loading, JIT.
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, i) => once(i)));
  let done = 0;
  const deadline = Date.now() + SECONDS * 1000;
  const started = process.hrtime.bigint();
  async function worker(w) {
    let i = w;
    while (Date.now() < deadline) {
      await once(i);
      i += IN_FLIGHT;
      done++;
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, w) => worker(w)));
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  return done / secs;
}

/** p50/p99/p99.9 in ms of `once(i)` with `concurrency` in flight. */
async function latency(once, concurrency) {
  const perWorker = Math.max(20, Math.floor(4000 / concurrency));
  await Promise.all(Array.from({ length: Math.min(concurrency, 8) }, (_, i) => once(i)));
  const samples = [];
  async function worker(w) {
    for (let n = 0; n < perWorker; n++) {
      const t = process.hrtime.bigint();
      await once(w + n * concurrency);
      samples.push(Number(process.hrtime.bigint() - t) / 1e6);
    }
  }
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  samples.sort((a, b) => a - b);
  const at = (q) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))];
  return [at(0.5), at(0.99), at(0.999)];
}

async function main() {
  const redis = await RedisServer.start();
  const runs = { peer: [], fixed_window: [], token_bucket: [] };
  try {
    const ioredis = new Redis(redis.url, { enableAutoPipelining: false });
    const flexible = new RateLimiterRedis({ storeClient: ioredis, points: 1e9, duration: 60, keyPrefix: 'rlflx' });
    const limiters = {};
    for (const algorithm of ['fixed_window', 'token_bucket']) {
      limiters[algorithm] = new Limiter({
        policy: { algorithm, rate: '1000000000/min' },
        store: redis.url,
        prefix: `bench-${algorithm}`,
      });
    }
    const peerOnce = (i) => flexible.consume(`user:${i % KEYS}`).catch((e) => e);
    for (let round = 0; round < ROUNDS; round++) {
      runs.peer.push(await measure(peerOnce));
      for (const [algorithm, limiter] of Object.entries(limiters)) {
        runs[algorithm].push(await measure((i) => limiter.check(`user:${i % KEYS}`)));
      }
    }
    for (const concurrency of [1, 32, 256]) {
      const ours = await latency((i) => limiters.fixed_window.check(`lat:${i % KEYS}`), concurrency);
      const theirs = await latency(peerOnce, concurrency);
      const f = (xs) => xs.map((x) => x.toFixed(2)).join(' / ');
      console.log(`latency, ${String(concurrency).padStart(3)} in flight: polylimit p50/p99/p99.9 ${f(ours)} ms   rate-limiter-flexible ${f(theirs)} ms`);
      record({
        what: `latency of one check() on Redis, ${concurrency} in flight: p50/p99/p99.9`,
        value: ours[1], unit: 'ms', baseline: 'rate-limiter-flexible p99', baseline_value: theirs[1],
        p50: ours[0], p99: ours[1], p999: ours[2], peer_p50: theirs[0], peer_p99: theirs[1], peer_p999: theirs[2],
        detail: `${f(ours)} ms; rate-limiter-flexible ${f(theirs)} ms`,
      });
    }
    for (const limiter of Object.values(limiters)) limiter.close();
    ioredis.disconnect();
  } finally {
    await redis.kill();
  }
  const peer = median(runs.peer);
  const peers = { 'rate-limiter-flexible': version('rate-limiter-flexible'), ioredis: version('ioredis') };
  const results = ['fixed_window', 'token_bucket'].map((algorithm) => ({ algorithm, ours: median(runs[algorithm]), peer }));
  console.log(`limiter.check() on real Redis, ${IN_FLIGHT} in flight, median of ${ROUNDS} alternating ${SECONDS} s runs`);
  console.log(
    `rate-limiter-flexible ${peers['rate-limiter-flexible']} RateLimiterRedis (ioredis ${peers.ioredis}): ${Math.round(results[0].peer).toLocaleString('en')} decisions/s`,
  );
  const targets = { fixed_window: 1.2, token_bucket: 1.2 };
  for (const r of results) {
    const ratio = r.ours / r.peer;
    console.log(
      `polylimit ${r.algorithm.padEnd(13)} ${Math.round(r.ours).toLocaleString('en').padStart(9)} decisions/s  ` +
        `ratio ${ratio.toFixed(2)}x (target >= ${targets[r.algorithm].toFixed(1)}x)`,
    );
    record({
      what: `check(), ${IN_FLIGHT} in flight, Redis, ${r.algorithm}`, value: r.ours, unit: 'decisions/s',
      baseline: 'rate-limiter-flexible RateLimiterRedis', baseline_value: r.peer, ratio, target: targets[r.algorithm], peers,
    });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
