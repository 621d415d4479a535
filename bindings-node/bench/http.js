'use strict';
// Express and Fastify under autocannon (-c 50) on one real Redis, each app in
// its own process: limited by polylimit, by the framework's usual limiter
// (express-rate-limit + rate-limit-redis; @fastify/rate-limit with ioredis),
// and not limited at all; the limited apps send the same rate-limit headers (apps.js). Rounds
// alternate the order of the apps; medians are reported, and every round.
const { fork } = require('node:child_process');
const path = require('node:path');
const autocannon = require('autocannon');
const { RedisServer } = require('../test/support');
const { version, median, record } = require('./common');
const cpu = require('./cpu');

const SECONDS = Number(process.env.BENCH_SECONDS || 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);

const PEERS = {
  express: { name: 'express-rate-limit + rate-limit-redis', packages: ['express', 'express-rate-limit', 'rate-limit-redis', 'ioredis'] },
  fastify: { name: '@fastify/rate-limit (ioredis)', packages: ['fastify', '@fastify/rate-limit', 'ioredis'] },
};

async function start(framework, which, redis) {
  const redisUrl = redis.url;
  // A 2 s call timeout: a reply stalled past the default 100 ms on a busy machine would make the
  // fallback decide locally for a while, and the line would measure an app not paying for Redis.
  const env = { ...process.env, BENCH_TIMEOUT: process.env.BENCH_TIMEOUT || '2s' };
  const child = fork(path.join(__dirname, 'apps.js'), [framework, which, redisUrl], { stdio: 'inherit', env });
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`${framework} ${which} app exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: 50, duration: 1 }); // warm-up
  return {
    /** req/s, and the CPU per request of the app, redis-server and autocannon (this process). */
    async run() {
      const used = cpu.sample({ app: child.pid, redis: redis.child.pid, load: process.pid });
      const result = await autocannon({ url, connections: 50, duration: SECONDS });
      if (result.non2xx || result.errors) throw new Error(`${framework} ${which}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      return { rate: result.requests.average, cpu: used.stop(result.requests.total) };
    },
    stop() {
      child.disconnect();
      child.kill();
    },
  };
}

async function bench(framework, redis) {
  const which = ['peer', 'polylimit', 'none'];
  const apps = [];
  const runs = which.map(() => []);
  const cpus = which.map(() => []);
  try {
    for (const w of which) apps.push(await start(framework, w, redis));
    for (let round = 0; round < ROUNDS; round++) {
      // The order alternates (peer, polylimit, none; then none, polylimit, peer): in a fixed order
      // polylimit always ran right after the peer, and the line differed from the A/B's.
      const order = round % 2 ? [2, 1, 0] : [0, 1, 2];
      for (const i of order) {
        const { rate, cpu: used } = await apps[i].run();
        runs[i].push(rate);
        cpus[i].push(used);
      }
      const appCpu = (i) => (cpus[i][round] ? (cpus[i][round].perUnit.app.main + cpus[i][round].perUnit.app.runtime + cpus[i][round].perUnit.app.other).toFixed(1) : '-');
      console.log(
        `  ${framework} round ${round + 1}: polylimit ${Math.round(runs[1][round])}, peer ${Math.round(runs[0][round])}, none ${Math.round(runs[2][round])} req/s, ` +
          `ratio ${(runs[1][round] / runs[0][round]).toFixed(2)}x; app CPU per request polylimit ${appCpu(1)}, peer ${appCpu(0)} us`,
      );
    }
  } finally {
    for (const app of apps) app.stop();
  }
  const [peer, ours, none] = runs.map(median);
  // What bounds the lines on this machine: CPU per request of each process (medians over rounds).
  const [peerCpu, oursCpu, noneCpu] = cpus.map(cpuPerRequest);
  const { name, packages } = PEERS[framework];
  const peers = Object.fromEntries(packages.map((p) => [p, version(p)]));
  const fmt = (x) => Math.round(x).toLocaleString('en').padStart(7);
  console.log(`${framework} under autocannon -c 50, real Redis, median of ${ROUNDS} rounds of ${SECONDS} s runs, order alternating (${Object.entries(peers).map(([k, v]) => `${k} ${v}`).join(', ')})`);
  console.log(`  no limiter:            ${fmt(none)} req/s`);
  console.log(`  ${name.padEnd(38)} ${fmt(peer)} req/s  ${(peer / none).toFixed(2)} of unlimited`);
  console.log(`  polylimit:             ${fmt(ours)} req/s  ${(ours / none).toFixed(2)} of unlimited, ratio ${(ours / peer).toFixed(2)}x (target >= 1.0x)`);
  let bound;
  if (oursCpu && peerCpu && noneCpu) {
    bound = `CPU per request: polylimit ${oursCpu}; ${name} ${peerCpu}; no limiter ${noneCpu}`;
    console.log(`  ${bound}`);
  }
  record({
    what: `${framework} + polylimit, Redis`, value: ours, unit: 'req/s', baseline: `${framework} + ${name}`, baseline_value: peer,
    ratio: ours / peer, target: 1.0, peers, ...(bound ? { bound } : {}),
  });
  record({ what: `${framework} + polylimit, Redis, vs no limiter`, value: ours, unit: 'req/s', baseline: `${framework} alone`, baseline_value: none, ratio: ours / none });
  record({ what: `${framework} + ${name}, vs no limiter`, value: peer, unit: 'req/s', baseline: `${framework} alone`, baseline_value: none, ratio: peer / none });
}

/** "app: event loop 22.1 + runtime 7.0 + redis-server 7.4 + autocannon 16.3 = 52.8 µs" (medians), or null. */
function cpuPerRequest(samples) {
  if (samples.some((x) => x === null)) return null;
  const pick = (f) => median(samples.map(f));
  const all = (g) => g.main + g.runtime + g.other;
  const text = cpu.describe([
    ['app event loop', pick((x) => x.perUnit.app.main)],
    ['runtime', pick((x) => x.perUnit.app.runtime)],
    ['other app threads', pick((x) => x.perUnit.app.other)],
    ['redis-server', pick((x) => all(x.perUnit.redis))],
    ['autocannon', pick((x) => all(x.perUnit.load))],
  ]);
  const busy = samples.every((x) => x.busy !== null) ? `, the machine ${pick((x) => x.busy).toFixed(2)} of ${samples[0].of} cores busy` : '';
  return `${text}${busy}`;
}

async function main() {
  const redis = await RedisServer.start();
  const only = process.env.BENCH_FRAMEWORKS ? process.env.BENCH_FRAMEWORKS.split(',') : ['express', 'fastify'];
  try {
    for (const framework of only) await bench(framework, redis);
  } finally {
    await redis.kill();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
