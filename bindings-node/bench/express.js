'use strict';
// An Express app under autocannon (-c 50) limited by polylimit vs by
// express-rate-limit + rate-limit-redis, on the same real Redis in the same
// run. Each app runs in its own process. Prints req/s and the ratio.
const { fork } = require('node:child_process');
const path = require('node:path');
const autocannon = require('autocannon');
const { RedisServer } = require('../test/support');

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
// Rounds alternate the two apps so background load hits both alike; medians are reported.
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);

async function start(which, redisUrl) {
  const child = fork(path.join(__dirname, 'express_app.js'), [which, redisUrl], { stdio: 'inherit' });
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`${which} app exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: 50, duration: 1 }); // warm-up
  return {
    async run() {
      const result = await autocannon({ url, connections: 50, duration: SECONDS });
      if (result.non2xx || result.errors) throw new Error(`${which}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      return result.requests.average;
    },
    stop() {
      child.disconnect();
      child.kill();
    },
  };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const redis = await RedisServer.start();
  try {
    const apps = [await start('express-rate-limit', redis.url), await start('polylimit', redis.url)];
    const runs = [[], []];
    try {
      for (let round = 0; round < ROUNDS; round++) {
        for (const [i, app] of apps.entries()) runs[i].push(await app.run());
      }
    } finally {
      for (const app of apps) app.stop();
    }
    const [peer, ours] = runs.map(median);
    console.log(`Express under autocannon -c 50, real Redis, median of ${ROUNDS} alternating ${SECONDS} s runs`);
    console.log(`express-rate-limit + rate-limit-redis: ${Math.round(peer).toLocaleString('en')} req/s`);
    console.log(`polylimit rateLimit():                 ${Math.round(ours).toLocaleString('en')} req/s  ratio ${(ours / peer).toFixed(2)}x (target > 1.0x)`);
  } finally {
    await redis.kill();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
