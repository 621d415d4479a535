'use strict';
// Express and Fastify under autocannon (-c 50) on one real Redis, each app in
// its own process: limited by polylimit, by the framework's usual limiter
// (express-rate-limit + rate-limit-redis; @fastify/rate-limit with ioredis),
// and not limited at all. Rounds alternate the apps; medians are reported.
const { fork } = require('node:child_process');
const path = require('node:path');
const autocannon = require('autocannon');
const { RedisServer } = require('../test/support');
const { version, median, record } = require('./common');

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);

const PEERS = {
  express: { name: 'express-rate-limit + rate-limit-redis', packages: ['express', 'express-rate-limit', 'rate-limit-redis', 'ioredis'] },
  fastify: { name: '@fastify/rate-limit (ioredis)', packages: ['fastify', '@fastify/rate-limit', 'ioredis'] },
};

async function start(framework, which, redisUrl) {
  const child = fork(path.join(__dirname, 'apps.js'), [framework, which, redisUrl], { stdio: 'inherit' });
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`${framework} ${which} app exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: 50, duration: 1 }); // warm-up
  return {
    async run() {
      const result = await autocannon({ url, connections: 50, duration: SECONDS });
      if (result.non2xx || result.errors) throw new Error(`${framework} ${which}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      return result.requests.average;
    },
    stop() {
      child.disconnect();
      child.kill();
    },
  };
}

async function bench(framework, redisUrl) {
  const which = ['peer', 'polylimit', 'none'];
  const apps = [];
  const runs = which.map(() => []);
  try {
    for (const w of which) apps.push(await start(framework, w, redisUrl));
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, app] of apps.entries()) runs[i].push(await app.run());
    }
  } finally {
    for (const app of apps) app.stop();
  }
  const [peer, ours, none] = runs.map(median);
  const { name, packages } = PEERS[framework];
  const peers = Object.fromEntries(packages.map((p) => [p, version(p)]));
  const fmt = (x) => Math.round(x).toLocaleString('en').padStart(7);
  console.log(`${framework} under autocannon -c 50, real Redis, median of ${ROUNDS} alternating ${SECONDS} s runs (${Object.entries(peers).map(([k, v]) => `${k} ${v}`).join(', ')})`);
  console.log(`  no limiter:            ${fmt(none)} req/s`);
  console.log(`  ${name.padEnd(38)} ${fmt(peer)} req/s  ${(peer / none).toFixed(2)} of unlimited`);
  console.log(`  polylimit:             ${fmt(ours)} req/s  ${(ours / none).toFixed(2)} of unlimited, ratio ${(ours / peer).toFixed(2)}x (target >= 1.0x)`);
  record({ what: `${framework} + polylimit, Redis`, value: ours, unit: 'req/s', baseline: `${framework} + ${name}`, baseline_value: peer, ratio: ours / peer, target: 1.0, peers });
  record({ what: `${framework} + polylimit, Redis, vs no limiter`, value: ours, unit: 'req/s', baseline: `${framework} alone`, baseline_value: none, ratio: ours / none });
  record({ what: `${framework} + ${name}, vs no limiter`, value: peer, unit: 'req/s', baseline: `${framework} alone`, baseline_value: none, ratio: peer / none });
}

async function main() {
  const redis = await RedisServer.start();
  try {
    for (const framework of ['express', 'fastify']) await bench(framework, redis.url);
  } finally {
    await redis.kill();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
