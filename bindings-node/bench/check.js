'use strict';
// decisions/s of limiter.check() with 64 promises in flight on a real Redis,
// next to rate-limiter-flexible's RateLimiterRedis (ioredis) on the same
// server in the same run. Prints the ratio. Not a test.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { Limiter } = require('..');
const { RedisServer } = require('../test/support');

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
    for (let round = 0; round < ROUNDS; round++) {
      runs.peer.push(await measure((i) => flexible.consume(`user:${i % KEYS}`).catch((e) => e)));
      for (const [algorithm, limiter] of Object.entries(limiters)) {
        runs[algorithm].push(await measure((i) => limiter.check(`user:${i % KEYS}`)));
      }
    }
    for (const limiter of Object.values(limiters)) limiter.close();
    ioredis.disconnect();
  } finally {
    await redis.kill();
  }
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const peer = median(runs.peer);
  const results = ['fixed_window', 'token_bucket'].map((algorithm) => ({ algorithm, ours: median(runs[algorithm]), peer }));
  console.log(`limiter.check() on real Redis, ${IN_FLIGHT} in flight, median of ${ROUNDS} alternating ${SECONDS} s runs`);
  console.log(`rate-limiter-flexible RateLimiterRedis (ioredis): ${Math.round(results[0].peer).toLocaleString('en')} decisions/s`);
  const targets = { fixed_window: 1.0, token_bucket: 0.6 };
  for (const r of results) {
    const ratio = r.ours / r.peer;
    console.log(
      `polylimit ${r.algorithm.padEnd(13)} ${Math.round(r.ours).toLocaleString('en').padStart(9)} decisions/s  ` +
        `ratio ${ratio.toFixed(2)}x (target >= ${targets[r.algorithm].toFixed(1)}x)`,
    );
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
