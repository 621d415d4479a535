'use strict';
// Per-route middlewares on the user's limiter (issue 14): `rateLimit({ limiter, key, policy })`
// and Fastify's `config: { rateLimit: { key, policy } }` check through `limiter.routeRule`,
// so they share its state, metrics and close(). Real servers on loopback; memory and a real Redis.
const test = require('node:test');
const assert = require('node:assert/strict');
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
const STORES = { memory: () => 'memory', redis: () => redis.url };

function userLimiter(store) {
  return new Limiter({
    policies: { api: { rate: '1/min', burst: 3 }, other: { rate: '1/min', burst: 100 } },
    store: store(),
    timeout: '10s', // decisions, not latency
    prefix: `node-route-rule-${process.pid}-${seq++}`,
  });
}

const ALLOWED = 'polylimit_requests_total{policy="api",route="route_rule",decision="allowed",source="store"} 2';
const DENIED = 'polylimit_requests_total{policy="api",route="route_rule",decision="denied",source="store"} 1';

/** Two routes and `limiter.check` on one budget; after close() the routes answer through the error path. */
async function sharesTheLimiter(url, limiter, errors) {
  assert.equal((await request(`${url}/a`)).status, 200);
  assert.equal((await request(`${url}/b`)).status, 200);
  // The route rule keys the request as `ip=<client>`: the same budget as a direct check.
  const direct = await limiter.check('ip=127.0.0.1');
  assert.equal(direct.allowed, true);
  assert.equal(direct.remaining, 0);
  const refused = await request(`${url}/a`);
  assert.equal(refused.status, 429);
  const header = (name) => (refused.headers.find(([n]) => n === name) || [])[1];
  // Only the route's policy, not every policy of the limiter.
  assert.equal(header('RateLimit-Policy'), '"api";q=3;w=180');
  const metrics = limiter.metricsText();
  assert.ok(metrics.includes(ALLOWED), metrics);
  assert.ok(metrics.includes(DENIED), metrics);

  limiter.close();
  const closed = await request(`${url}/b`);
  assert.equal(closed.status, 500);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, 'POLYLIMIT_CLOSED');
  // No hidden limiter decided it: the user's metrics did not move.
  assert.equal(limiter.metricsText(), metrics);
}

for (const [name, store] of Object.entries(STORES)) {
  test(`express routes with { limiter, key, policy } share the user's limiter (${name})`, async () => {
    const limiter = userLimiter(store);
    const errors = [];
    const app = express();
    app.get('/a', rateLimit({ limiter, key: ['ip'], policy: 'api' }), (req, res) => res.send('a'));
    app.get('/b', rateLimit({ limiter, key: 'ip', policy: 'api' }), (req, res) => res.send('b'));
    app.use((err, req, res, next) => {
      errors.push(err);
      res.status(500).send(err.code);
    });
    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    try {
      await sharesTheLimiter(`http://127.0.0.1:${server.address().port}`, limiter, errors);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test(`fastify route config { key, policy } shares the plugin's limiter (${name})`, async () => {
    const limiter = userLimiter(store);
    const errors = [];
    const app = Fastify();
    app.setErrorHandler((err, request, reply) => {
      errors.push(err);
      reply.code(500).send({ error: err.code });
    });
    await app.register(polylimitFastify, { limiter, global: false });
    // perRoute: false: the two routes share one budget (by default each route has its own).
    app.get('/a', { config: { rateLimit: { key: ['ip'], policy: 'api', perRoute: false } } }, async () => 'a');
    app.get('/b', { config: { rateLimit: { key: 'ip', policy: 'api', perRoute: false } } }, async () => 'b');
    app.get('/free', async () => 'free');
    await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const url = `http://127.0.0.1:${app.server.address().port}`;
      assert.equal((await request(`${url}/free`)).status, 200);
      await sharesTheLimiter(url, limiter, errors);
    } finally {
      await app.close();
    }
  });
}

test('a bad key or policy for the shared limiter is a ConfigError when the middleware is built', async () => {
  const limiter = userLimiter(STORES.memory);
  const cases = [
    [{ key: ['ip', 'shoe'], policy: 'api' }, 'key', '"shoe"'],
    [{ key: [], policy: 'api' }, 'key', '[]'],
    [{ key: ['ip'], policy: 'nope' }, 'policy', '"nope"'],
    [{ policy: { rate: '1/s' } }, 'policy', '{"rate":"1/s"}'],
  ];
  for (const [options, field, value] of cases) {
    const where = JSON.stringify(options);
    if (typeof options.policy === 'object') {
      // Express: a policy object beside `limiter` contradicts it. Fastify: a route's own limit.
      assert.throws(
        () => rateLimit({ limiter, ...options }),
        (e) => e instanceof ConfigError && e.field === field && e.value === value,
        `express ${where}`,
      );
      continue;
    }
    assert.throws(
      () => rateLimit({ limiter, ...options }),
      (e) => e instanceof ConfigError && e.field === field && e.value === value,
      `express ${where}`,
    );
    const app = Fastify();
    await app.register(polylimitFastify, { limiter, global: false });
    await assert.rejects(
      (async () => {
        app.get('/x', { config: { rateLimit: options } }, async () => 'x');
        await app.ready();
      })(),
      (e) => e instanceof ConfigError && e.field === field && e.value === value,
      `fastify ${where}`,
    );
    await app.close().catch(() => {});
  }
  // The rules-limiter form without key/policy is unchanged, and a good rule builds.
  assert.equal(typeof rateLimit({ limiter }), 'function');
  assert.equal(typeof rateLimit({ limiter, key: ['route', 'header:x-tenant'], policy: 'other' }), 'function');
  limiter.close();
});

test('a policy object beside a Fastify route config\'s limiter is a ConfigError naming policy, as in Express', async () => {
  // One rule, the core's (tests/conformance/middleware): `policy` beside a `limiter` names a
  // rule of it. The route config used to drop the object silently and apply the limiter's rules.
  const limiter = userLimiter(STORES.memory);
  const app = Fastify();
  await app.register(polylimitFastify, { limiter, global: false });
  await assert.rejects(
    (async () => {
      app.get('/x', { config: { rateLimit: { limiter, policy: { rate: '1/s' } } } }, async () => 'x');
      await app.ready();
    })(),
    (e) => e instanceof ConfigError && e.field === 'policy' && e.value === '{"rate":"1/s"}',
  );
  await app.close().catch(() => {});
  limiter.close();
});

/** Statuses of `n` requests to each path in turn. */
async function statuses(url, paths, n) {
  const out = [];
  for (let i = 0; i < n; i++) for (const p of paths) out.push((await request(`${url}${p}`)).status);
  return out;
}

test('per-route forms key per route by default in Fastify, with perRoute: true in Express', async () => {
  const limiter = new Limiter({ policies: { api: { rate: '1/min', burst: 1 } } });
  const fastify = Fastify();
  await fastify.register(polylimitFastify, { limiter, global: false });
  fastify.get('/a', { config: { rateLimit: { policy: 'api' } } }, async () => 'a');
  fastify.get('/b', { config: { rateLimit: { policy: 'api' } } }, async () => 'b');
  await fastify.listen({ port: 0, host: '127.0.0.1' });
  const app = express();
  app.get('/a', rateLimit({ limiter, policy: 'api', perRoute: true }), (req, res) => res.send('a'));
  app.get('/b', rateLimit({ limiter, policy: 'api', perRoute: true }), (req, res) => res.send('b'));
  app.get('/c', rateLimit({ limiter, policy: 'api' }), (req, res) => res.send('c'));
  app.get('/d', rateLimit({ limiter, policy: 'api' }), (req, res) => res.send('d'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  try {
    // One budget per route: each answers once, then refuses.
    assert.deepStrictEqual(await statuses(`http://127.0.0.1:${fastify.server.address().port}`, ['/a', '/b'], 2), [200, 200, 429, 429]);
    // Express (the same key `route=/a|ip=…`, so the same state as Fastify's /a)...
    assert.deepStrictEqual(await statuses(`http://127.0.0.1:${server.address().port}`, ['/a', '/b'], 1), [429, 429]);
    // ...and without perRoute two Express routes share one budget keyed by ip alone.
    assert.deepStrictEqual(await statuses(`http://127.0.0.1:${server.address().port}`, ['/c', '/d'], 1), [200, 429]);
  } finally {
    await fastify.close();
    await new Promise((resolve) => server.close(resolve));
  }
  // The user's limiter is theirs: Fastify's close() leaves it open.
  assert.equal(limiter.closed, false);
  limiter.close();
});
