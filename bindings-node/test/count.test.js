'use strict';
// `count`: charged before the handler, given back after the response when its status does not
// count. Real Express and Fastify servers on loopback, on memory and a real Redis: the
// express-rate-limit form, a route rule of a limiter, a rules file, a Fastify route config; a
// handler that throws counts as failed, a client that goes away is charged as the handler's
// answer; `limiter.complete`.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { EventEmitter, once } = require('node:events');
const express = require('express');
const Fastify = require('fastify');
const { rateLimit } = require('../express');
const polylimitFastify = require('../fastify');
const { Limiter, ConfigError } = require('..');
const { RedisServer } = require('./support');
const { request } = require('./http_support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-count-${process.pid}-${seq++}`;
// 3 per hour: nothing comes back during a test but what `count` gives back.
const WINDOW = { algorithm: 'fixed_window', rate: '3/h' };

/** Answers the status its `status` query parameter asks for; `status=0` throws. */
function answer(status) {
  if (status === 0) throw new Error('the handler failed');
  return status;
}

async function listen(server) {
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${server.address().port}`;
}

async function expressApp(middleware) {
  const app = express();
  // `started` when a hanging handler runs, `ended` once it answered the client that left.
  const hangs = new EventEmitter();
  app.post('/login', middleware, (req, res) => {
    const status = answer(Number(req.query.status ?? 200));
    if (req.query.hang) {
      // Answers only after the client gave up, as a handler busy with its work does: the request
      // is settled, as the status the handler answered with, once the handler is done with it.
      res.once('close', () => {
        res.status(status).json({ status });
        hangs.emit('ended');
      });
      hangs.emit('started');
      return undefined;
    }
    return res.status(status).json({ status });
  });
  // eslint-disable-next-line no-unused-vars
  app.use((err, req, res, next) => res.status(500).json({ error: 'the handler failed' }));
  const server = http.createServer(app);
  const url = await listen(server);
  return { url, hangs, close: () => new Promise((resolve) => server.close(resolve)) };
}

async function fastifyApp(pluginOptions, routeConfig) {
  const app = Fastify();
  await app.register(polylimitFastify, pluginOptions);
  app.post('/login', { config: routeConfig ? { rateLimit: routeConfig } : {} }, async (req, reply) => {
    const status = answer(Number(req.query.status ?? 200));
    return reply.code(status).send({ status });
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
}

const post = (url, status) => request(`${url}/login?status=${status}`, { method: 'POST' });

// The response ends only once `complete` answered, so the client's next request sees the charge
// given back (settling on 'finish' raced it). `complete` here answers 20 event-loop turns late:
// a response sent before it answered would reach the client first.
for (const framework of ['express', 'fastify']) {
  test(`${framework}: a response ends only after its completion settled`, async () => {
    const limiter = new Limiter({ policy: WINDOW, prefix: prefix() });
    const complete = limiter.complete.bind(limiter);
    const order = [];
    limiter.complete = (token, status) => {
      order.push('complete');
      return (async () => {
        for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
        order.push('settled');
        return complete(token, status);
      })();
    };
    const s = framework === 'express'
      ? await expressApp(rateLimit({ limiter, key: ['ip'], count: 'failed' }))
      : await fastifyApp({ limiter, global: false }, { key: ['ip'], count: 'failed' });
    try {
      assert.equal((await post(s.url, 200)).status, 200);
      order.push('response');
      assert.deepEqual(order, ['complete', 'settled', 'response']);
    } finally {
      await s.close();
      limiter.close();
    }
  });
}

/** Right answers are free, failures count, the 4th failure-free attempt after 3 failures is refused. */
async function successesFreeFailuresCount(url) {
  const ok = [];
  for (let i = 0; i < 5; i++) ok.push(await post(url, 200));
  assert.deepEqual(
    ok.map((r) => r.status),
    [200, 200, 200, 200, 200],
  );
  assert.deepEqual(
    ok.map((r) => r.header('x-ratelimit-remaining')),
    ['2', '2', '2', '2', '2'],
  );
  const failed = [];
  for (let i = 0; i < 3; i++) failed.push((await post(url, 401)).status);
  assert.deepEqual(failed, [401, 401, 401]);
  const locked = await post(url, 200);
  assert.equal(locked.status, 429);
  assert.equal(JSON.parse(locked.body).error, 'rate_limit_exceeded');
}

/** A request whose handler throws (500 from the error handler, or no answer) is counted. */
async function crashesCount(url) {
  for (let i = 0; i < 3; i++) {
    const r = await post(url, 0).catch(() => ({ status: 0 }));
    assert.ok([0, 500].includes(r.status), `status ${r.status}`);
  }
  assert.equal((await post(url, 200)).status, 429);
}

const storeOf = (store) => (store === 'redis' ? redis.url : 'memory');

for (const store of ['memory', 'redis']) {
  test(`express: the express-rate-limit form with count on ${store}`, async () => {
    const s = await expressApp(
      rateLimit({ windowMs: 3600000, limit: 3, count: 'failed', store: storeOf(store), timeout: '10s', prefix: prefix() }),
    );
    try {
      await successesFreeFailuresCount(s.url);
    } finally {
      await s.close();
    }
  });

  test(`express: a route rule of a limiter with count, and crashes count, on ${store}`, async () => {
    const limiter = new Limiter({ policy: WINDOW, store: storeOf(store), timeout: '10s', prefix: prefix() });
    const s = await expressApp(rateLimit({ limiter, key: ['ip'], count: ['4xx', '5xx'] }));
    try {
      await crashesCount(s.url);
    } finally {
      await s.close();
      limiter.close();
    }
  });

  test(`express: a rules file's count, and a client that goes away is charged as the answer, on ${store}`, async () => {
    const rules = {
      store: storeOf(store),
      timeout: '10s', // decisions, not latency
      prefix: prefix(),
      policies: { login: WINDOW },
      rules: [{ match: { path: '/login' }, key: ['ip'], policy: 'login', count: 'successful' }],
    };
    const s = await expressApp(rateLimit({ rules }));
    try {
      // `successful`: errors are free; successes count, also when the client left before the
      // handler answered 200 (issue 33: it was "no response", so free).
      for (let i = 0; i < 4; i++) assert.equal((await post(s.url, 404)).status, 404);
      for (let i = 0; i < 3; i++) {
        const started = once(s.hangs, 'started');
        const req = http.request(`${s.url}/login?hang=1`, { method: 'POST', agent: false });
        req.on('error', () => {}); // the hang-up below
        req.end();
        await started;
        const ended = once(s.hangs, 'ended');
        req.destroy();
        await ended;
      }
      assert.deepEqual([(await post(s.url, 200)).status, (await post(s.url, 404)).status], [429, 429]);
    } finally {
      await s.close();
    }
  });

  test(`fastify: plugin options and a route config with count on ${store}`, async () => {
    const plugin = await fastifyApp({ policy: WINDOW, count: 'failed', store: storeOf(store), timeout: '10s', prefix: prefix() });
    try {
      await successesFreeFailuresCount(plugin.url);
    } finally {
      await plugin.close();
    }
    const limiter = new Limiter({ policy: WINDOW, store: storeOf(store), timeout: '10s', prefix: prefix() });
    const routed = await fastifyApp({ limiter, global: false }, { key: ['ip'], count: 'failed' });
    try {
      await crashesCount(routed.url);
    } finally {
      await routed.close();
      limiter.close();
    }
  });
}

test('limiter.complete, the outcome token and bad values', async () => {
  const limiter = new Limiter({ policy: WINDOW, count: ['4xx', 503] });
  const at = { method: 'POST', path: '/x', peer: '203.0.113.7', nowMs: 1700000000000 };
  const first = await limiter.checkRequest(at);
  assert.match(first.completion, /^pl1;/);
  await limiter.complete(first.completion, 500); // not counted: given back
  await limiter.complete((await limiter.checkRequest(at)).completion, null); // no response: counted
  for (let i = 0; i < 2; i++) await limiter.complete((await limiter.checkRequest(at)).completion, 404);
  const refused = await limiter.checkRequest(at);
  assert.equal(refused.status, 429);
  assert.equal(refused.completion, undefined);
  await assert.rejects(limiter.complete('not a token', 200), (e) => e instanceof ConfigError && e.field === 'token');
  assert.throws(
    () => new Limiter({ policy: WINDOW, count: 'sometimes' }),
    (e) => e instanceof ConfigError && e.field === 'count',
  );
  assert.throws(
    () => limiter.routeRule(['ip'], null, { count: ['4xx', 99] }),
    (e) => e instanceof ConfigError && e.field === 'count[1]',
  );
  limiter.close();
});
