'use strict';
// decisions/s of limiter.check() with 64 promises in flight on a real Redis,
// next to rate-limiter-flexible's RateLimiterRedis (ioredis) on the same
// server in the same run. Prints the ratio. Not a test.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { Limiter } = require('..');
const { RedisServer } = require('../test/support');
const { version, median, record } = require('./common');
const cpu = require('./cpu');

const IN_FLIGHT = Number(process.env.BENCH_IN_FLIGHT || 64);
const SECONDS = Number(process.env.BENCH_SECONDS || 2);
// Rounds alternate the contenders so background load hits both alike; medians are reported.
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const KEYS = 10000;
// Never reached (a few hundred decisions a key a minute), and below 1,000,000: a fixed
// window's count is one integer in Redis, as for any usual limit (apps.js says more).
const LIMIT = 999999;

/** Runs `once(i)` with IN_FLIGHT in flight for SECONDS; returns decisions/s and the CPU per decision of `pids`. */
async function measure(once, pids) {
  // Warm-up: connections, script loading, JIT.
  await Promise.all(Array.from({ length: IN_FLIGHT }, (_, i) => once(i)));
  let done = 0;
  const deadline = Date.now() + SECONDS * 1000;
  const started = process.hrtime.bigint();
  const cpuUse = cpu.sample(pids);
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
  return { rate: done / secs, cpu: cpuUse.stop(done) };
}

/** The median over rounds of each CPU figure (null when /proc is missing). */
function medianCpu(samples) {
  if (samples.some((x) => x === null)) return null;
  const pick = (f) => median(samples.map(f));
  return {
    main: pick((x) => x.perUnit.node.main),
    runtime: pick((x) => x.perUnit.node.runtime),
    other: pick((x) => x.perUnit.node.other),
    redis: pick((x) => x.perUnit.redis.main + x.perUnit.redis.runtime + x.perUnit.redis.other),
    cores: pick((x) => x.cores),
    busy: samples.every((x) => x.busy !== null) ? pick((x) => x.busy) : null,
    of: samples[0].of,
  };
}

/** What one decision costs in CPU, per process and thread group. */
function cpuText(c) {
  return `${cpu.describe([
    ['event loop', c.main],
    ['runtime', c.runtime],
    ['other threads', c.other],
    ['redis-server', c.redis],
  ])} CPU per decision, ${c.cores.toFixed(2)} cores busy` + (c.busy === null ? '' : ` (the machine: ${c.busy.toFixed(2)} of ${c.of})`);
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
  const cpus = { peer: [], fixed_window: [], token_bucket: [] };
  let notStore = 0;
  try {
    const ioredis = new Redis(redis.url, { enableAutoPipelining: false });
    const flexible = new RateLimiterRedis({ storeClient: ioredis, points: LIMIT, duration: 60, keyPrefix: 'rlflx' });
    const limiters = {};
    for (const algorithm of ['fixed_window', 'token_bucket']) {
      limiters[algorithm] = new Limiter({
        policy: { algorithm, rate: `${LIMIT}/min` },
        store: redis.url,
        prefix: `bench-${algorithm}`,
        // A loaded machine can stall a reply past the default 100 ms; the fallback's local
        // decisions would then inflate the count (they are counted apart below).
        timeout: '2s',
      });
    }
    const peerOnce = (i) => flexible.consume(`user:${i % KEYS}`).catch((e) => e);
    const pids = { node: process.pid, redis: redis.child.pid };
    // Decisions not made by the store (the fallback while it timed out): a line with any is not a Redis figure.
    const counted = (d) => {
      if (d.source !== 'store') notStore++;
    };
    const keep = (name, { rate, cpu: used }) => {
      runs[name].push(rate);
      cpus[name].push(used);
    };
    for (let round = 0; round < ROUNDS; round++) {
      keep('peer', await measure(peerOnce, pids));
      for (const [algorithm, limiter] of Object.entries(limiters)) {
        keep(algorithm, await measure((i) => limiter.check(`user:${i % KEYS}`).then(counted), pids));
      }
    }
    // Each quantile the median of ROUNDS runs, which side goes first alternating (the first after
    // the throughput rounds inherits their garbage).
    const median = (runs) => [0, 1, 2].map((q) => runs.map((r) => r[q]).sort((a, b) => a - b)[runs.length >> 1]);
    for (const concurrency of [1, 32, 256]) {
      const oursRuns = [];
      const theirsRuns = [];
      const oursOnce = (i) => limiters.fixed_window.check(`lat:${i % KEYS}`);
      for (let round = 0; round < ROUNDS; round++) {
        const sides = [[oursOnce, oursRuns], [peerOnce, theirsRuns]];
        if (round % 2 === 1) sides.reverse();
        for (const [once, runs] of sides) runs.push(await latency(once, concurrency));
      }
      const ours = median(oursRuns);
      const theirs = median(theirsRuns);
      const f = (xs) => xs.map((x) => x.toFixed(2)).join(' / ');
      console.log(`latency, ${String(concurrency).padStart(3)} in flight: polylimit p50/p99/p99.9 ${f(ours)} ms   rate-limiter-flexible ${f(theirs)} ms (medians of ${ROUNDS} alternating runs)`);
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
  if (notStore > 0) {
    throw new Error(`${notStore} decisions came from the fallback, not Redis (the store timed out): rerun on a quieter machine`);
  }
  const peer = median(runs.peer);
  const peers = { 'rate-limiter-flexible': version('rate-limiter-flexible'), ioredis: version('ioredis') };
  const results = ['fixed_window', 'token_bucket'].map((algorithm) => ({ algorithm, ours: median(runs[algorithm]), peer }));
  console.log(`limiter.check() on real Redis, ${IN_FLIGHT} in flight, median of ${ROUNDS} alternating ${SECONDS} s runs`);
  console.log(
    `rate-limiter-flexible ${peers['rate-limiter-flexible']} RateLimiterRedis (ioredis ${peers.ioredis}): ${Math.round(results[0].peer).toLocaleString('en')} decisions/s`,
  );
  const targets = { fixed_window: 1.2, token_bucket: 1.2 };
  // What bounds the ratio on this machine: the CPU each decision costs the event loop (the load
  // generator too), polylimit's runtime thread and redis-server, and how many cores were busy.
  const peerCpu = medianCpu(cpus.peer);
  if (peerCpu) console.log(`  rate-limiter-flexible: ${cpuText(peerCpu)}`);
  for (const r of results) {
    const ratio = r.ours / r.peer;
    console.log(
      `polylimit ${r.algorithm.padEnd(13)} ${Math.round(r.ours).toLocaleString('en').padStart(9)} decisions/s  ` +
        `ratio ${ratio.toFixed(2)}x (target >= ${targets[r.algorithm].toFixed(1)}x)`,
    );
    const ours = medianCpu(cpus[r.algorithm]);
    let bound;
    if (ours && peerCpu) {
      // With every core busy, decisions/s go as 1 / (CPU per decision); with redis-server's one
      // thread the bottleneck, as 1 / (its CPU per decision): the ratios each bound allows.
      const total = (c) => c.main + c.runtime + c.other + c.redis;
      bound =
        `CPU per decision: polylimit ${cpuText(ours)}; rate-limiter-flexible ${cpuText(peerCpu)}; ` +
        `ratio the CPU allows: ${(total(peerCpu) / total(ours)).toFixed(2)}x with the cores the bound, ` +
        `${(peerCpu.redis / ours.redis).toFixed(2)}x with redis-server's one thread the bound (${Math.round(1e3 / ours.redis)}k decisions/s at 100 %)`;
      console.log(`  ${bound}`);
    }
    record({
      what: `check(), ${IN_FLIGHT} in flight, Redis, ${r.algorithm}`, value: r.ours, unit: 'decisions/s',
      baseline: 'rate-limiter-flexible RateLimiterRedis', baseline_value: r.peer, ratio, target: targets[r.algorithm], peers,
      ...(bound ? { bound } : {}),
    });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
