'use strict';
// One app of bench/http.js: `node apps.js <express|fastify> <polylimit|peer|none> <redis url>`.
// polylimit and the framework's usual Redis-backed limiter allow everything (a
// limit never reached), so every request pays for one decision; `none` is the
// same app unlimited. Prints the port once listening.
const [framework, which, redisUrl] = process.argv.slice(2);
// Never reached in a run (one client, well under a million requests a minute), and below
// 1,000,000: a fixed window's count is then one integer in Redis, as for any usual limit
// (a count of a million or more is stored as packed cells, by the general script).
const LIMIT = 999999;
// bench/sans_io_ab.js's A/B: the sans-I/O mode of this app's limiters ('pipeline', 'single', 'off').
if (process.env.BENCH_SANS_IO) require('../sansio').setMode(process.env.BENCH_SANS_IO);
// Its call timeout (default the limiter's): on a loaded machine a reply stalled past 100 ms makes
// the fallback decide locally for a while, and the app stops paying for Redis at all.
const TIMEOUT = process.env.BENCH_TIMEOUT ? { timeout: process.env.BENCH_TIMEOUT } : {};

function peerRedis() {
  const Redis = require('ioredis');
  return new Redis(redisUrl);
}

async function expressApp() {
  const express = require('express');
  const app = express();
  if (which === 'polylimit') {
    const { rateLimit } = require('../express');
    app.use(rateLimit({ policy: { algorithm: 'fixed_window', rate: `${LIMIT}/min` }, store: redisUrl, prefix: 'bench-express', ...TIMEOUT }));
  } else if (which === 'peer') {
    const { rateLimit } = require('express-rate-limit');
    const { RedisStore } = require('rate-limit-redis');
    const client = peerRedis();
    app.use(
      rateLimit({
        windowMs: 60000,
        limit: LIMIT,
        standardHeaders: 'draft-7',
        legacyHeaders: true,
        store: new RedisStore({ sendCommand: (command, ...args) => client.call(command, ...args), prefix: 'bench-erl:' }),
      }),
    );
  }
  app.get('/', (req, res) => res.send('ok'));
  return new Promise((resolve) => {
    const server = app.listen(0, '127.0.0.1', () => resolve(server.address().port));
  });
}

async function fastifyApp() {
  const app = require('fastify')();
  if (which === 'polylimit') {
    await app.register(require('../fastify'), {
      policy: { algorithm: 'fixed_window', rate: `${LIMIT}/min` },
      store: redisUrl,
      prefix: 'bench-fastify',
      // The headers @fastify/rate-limit sends by default, X-RateLimit-Limit, -Remaining and -Reset
      // (as the Express line gives express-rate-limit polylimit's: draft-7 and legacy); with both
      // sets (polylimit's default) each response carries two more headers (BENCH_HEADERS=both).
      ...(process.env.BENCH_HEADERS === 'both' ? {} : { standardHeaders: false }),
      ...TIMEOUT,
    });
  } else if (which === 'peer') {
    await app.register(require('@fastify/rate-limit'), { max: LIMIT, timeWindow: 60000, redis: peerRedis(), nameSpace: 'bench-frl:' });
  }
  app.get('/', async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app.server.address().port;
}

(framework === 'fastify' ? fastifyApp() : expressApp()).then(
  (port) => process.send({ port }),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
process.on('disconnect', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
