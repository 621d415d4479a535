'use strict';
// A real Express server on loopback, on a real Redis: the classic scenarios,
// exact headers and bodies, options, shape delays, and fail-closed 503.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const express = require('express');
const { rateLimit } = require('../express');
const { Limiter } = require('..');
const { RedisServer } = require('./support');
const { request, requestAt, scenarios, trustScenarios } = require('./http_support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-express-${process.pid}-${seq++}`;

async function serve(middlewareOptions, mount = (app, mw) => app.use('/api', mw)) {
  const app = express();
  const mw = rateLimit(middlewareOptions);
  mount(app, mw);
  app.get('/api/items', (req, res) => res.send('ok'));
  app.get('/api/slow', (req, res) => res.send('ok'));
  app.get('/health', (req, res) => res.send('healthy'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    limiter: mw.limiter,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

scenarios(test, serve, () => redis.url, 'express');

/** An app limiting `GET /api/items` with `app.use(rateLimit(options))`, on `socketPath` or loopback TCP. */
async function listen(options, socketPath, configure = () => {}) {
  const app = express();
  configure(app);
  app.use(rateLimit(options));
  app.get('/api/items', (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => {
    const s = socketPath ? app.listen(socketPath, () => resolve(s)) : app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    at: socketPath ? { socketPath } : { port: server.address().port },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

trustScenarios(test, listen, () => redis.url, 'express');

test('express: path rules follow Express routing: case-insensitive, trailing slash ignored, unless configured', async () => {
  const rules = {
    store: redis.url,
    timeout: '10s', // decisions, not latency
    headers: 'none',
    policies: { api: { rate: '1/min', burst: 2 } },
    rules: [{ match: { path: '/api/items' }, key: ['global'], policy: 'api' }],
  };
  // Express serves all of these with the /api/items handler: each one counts.
  let srv = await listen({ rules: { ...rules, prefix: prefix() } });
  try {
    const got = [];
    for (const target of ['/API/items', 'http://evil.example/api/Items/', '/%61pi/items#f']) {
      got.push((await requestAt(srv.at, target)).status);
    }
    assert.deepStrictEqual(got, [200, 200, 429]);
  } finally {
    await srv.close();
  }
  // With strict and case-sensitive routing, /API/items and /api/items/ are other paths (404, not counted).
  srv = await listen({ rules: { ...rules, prefix: prefix() } }, undefined, (app) => {
    app.set('case sensitive routing', true);
    app.set('strict routing', true);
  });
  try {
    const got = [];
    for (const target of ['/API/items', '/api/items/', '/api/items', '/api/items', '/api/items']) {
      got.push((await requestAt(srv.at, target)).status);
    }
    assert.deepStrictEqual(got, [404, 404, 200, 200, 429]);
  } finally {
    await srv.close();
  }
});

test('express: forwardedHeader is checked when the limiter is built', () => {
  assert.throws(
    () => rateLimit({ policy: { rate: '1/s' }, forwardedHeader: 'x-real-ip' }),
    (e) => e.field === 'forwardedHeader' && /"x-real-ip" is not one of x-forwarded-for, forwarded/.test(e.message),
  );
  assert.throws(
    () => rateLimit({ policy: { rate: '1/s' }, allowlist: ['svc-batch'] }),
    (e) => e.field === 'allowlist[0]' && /is not a CIDR or a typed key/.test(e.message),
  );
});

test('express: keyGenerator keys, skip and handler', async () => {
  const app = await serve({
    policy: { rate: '2/s' },
    store: redis.url,
    timeout: '10s', // decisions, not latency
    prefix: prefix(),
    keyGenerator: (req) => req.get('x-tenant') || 'anonymous',
    skip: (req) => req.get('x-internal') === '1',
    handler: (req, res, next, outcome) => {
      res.status(outcome.status).json({ custom: true, retryAfterMs: outcome.decisions[0].retryAfterMs !== null });
    },
  });
  try {
    const a = { headers: { 'x-tenant': 'a' } };
    assert.equal((await request(`${app.url}/api/items`, a)).status, 200);
    assert.equal((await request(`${app.url}/api/items`, a)).status, 200);
    const denied = await request(`${app.url}/api/items`, a);
    assert.equal(denied.status, 429);
    assert.equal(denied.body, '{"custom":true,"retryAfterMs":true}');
    assert.deepStrictEqual(denied.rate.map(([n]) => n), [
      'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit', 'Retry-After',
    ]);
    assert.equal((await request(`${app.url}/api/items`, { headers: { 'x-tenant': 'b' } })).status, 200);
    const skipped = await request(`${app.url}/api/items`, { headers: { 'x-tenant': 'a', 'x-internal': '1' } });
    assert.equal(skipped.status, 200);
    assert.deepStrictEqual(skipped.rate, []);
  } finally {
    await app.close();
  }
});

test('express: express-rate-limit options (windowMs, limit, legacyHeaders: false) on memory', async () => {
  const app = await serve({ windowMs: 60000, limit: 2, legacyHeaders: false, prefix: prefix() });
  try {
    const first = await request(`${app.url}/api/items`);
    assert.equal(first.status, 200);
    assert.deepStrictEqual(first.rate.map(([n]) => n), ['RateLimit-Policy', 'RateLimit']);
    assert.equal(first.header('ratelimit-policy'), '"default";q=2;w=60');
    await request(`${app.url}/api/items`);
    const denied = await request(`${app.url}/api/items`);
    assert.equal(denied.status, 429);
    assert.match(denied.body, /^\{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":\d+\}$/);
    assert.equal(denied.header('retry-after'), JSON.parse(denied.body).retry_after.toString());
  } finally {
    await app.close();
  }
});

test('express: behind a trusted proxy the client is the forwarded address, from every X-Forwarded-For line', async () => {
  const app = await serve({
    policy: { rate: '1/min', burst: 1 },
    store: redis.url,
    timeout: '10s', // decisions, not latency
    prefix: prefix(),
    trustedProxies: ['127.0.0.0/8'],
    requestPropertyName: 'limit',
  });
  try {
    // Two header lines reach the core as they were sent (Node's rawHeaders); the right-most untrusted one is the client.
    const a = { headers: { 'X-Forwarded-For': ['198.51.100.1', '127.0.0.5'] } };
    assert.equal((await request(`${app.url}/api/items`, a)).status, 200);
    assert.equal((await request(`${app.url}/api/items`, { headers: { 'x-forwarded-for': '198.51.100.1' } })).status, 429);
    assert.equal((await request(`${app.url}/api/items`, { headers: { 'x-forwarded-for': '198.51.100.2' } })).status, 200);
  } finally {
    await app.close();
  }
});

test('express: req.rateLimit is the outcome, decisions included', async () => {
  const app = express();
  app.use(rateLimit({ policy: { name: 'per_ip', rate: '5/min' }, headers: 'none', prefix: prefix() }));
  app.get('/', (req, res) => res.json(req.rateLimit));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  try {
    const res = await request(`http://127.0.0.1:${server.address().port}/`);
    const outcome = JSON.parse(res.body);
    assert.equal(outcome.status, null);
    assert.deepStrictEqual(outcome.headers, []);
    assert.equal(outcome.body, null);
    assert.equal(outcome.delayMs, 0);
    assert.equal(outcome.decisions.length, 1);
    const { resetAfterMs, ...decision } = outcome.decisions[0];
    assert.ok(resetAfterMs > 0 && resetAfterMs <= 60000);
    assert.deepStrictEqual(decision, {
      rule: 'per_ip',
      policy: 'per_ip',
      allowed: true,
      limit: 5,
      remaining: 4,
      retryAfterMs: null,
      delayMs: 0,
      source: 'store',
      shadow: false,
    });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('express: a rules file with a route template and key dimensions', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-'));
  const file = path.join(dir, 'rules.yaml');
  fs.writeFileSync(
    file,
    [
      `store: ${redis.url}`,
      'timeout: 10s',
      `prefix: ${prefix()}`,
      'headers: ietf',
      'policies:',
      '  per_item: { rate: 1/min, burst: 1 }',
      'rules:',
      '  - match: { route: "/api/items/:id" }',
      '    key: [ip, route]',
      '    policy: per_item',
      '',
    ].join('\n'),
  );
  const app = express();
  const mw = rateLimit({ rulesFile: file });
  app.get('/api/items/:id', mw, (req, res) => res.send(`item ${req.params.id}`));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    const ok = await request(`${url}/api/items/1`);
    assert.equal(ok.status, 200);
    assert.deepStrictEqual(ok.rate, [
      ['RateLimit-Policy', '"per_item";q=1;w=60'],
      ['RateLimit', '"per_item";r=0;t=60'],
    ]);
    // One route template: /api/items/2 shares the limit of /api/items/1.
    const denied = await request(`${url}/api/items/2`);
    assert.equal(denied.status, 429);
    assert.equal(denied.header('retry-after'), '60');
  } finally {
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(dir, { recursive: true });
  }
});

// Express 4 and 5 (router 2) differ in what `layer.match()` returns and in the
// name of a route's method check; the route template is the same under both.
for (const [name, ex] of [
  ['express 4', express],
  ['express 5', require('express5')],
]) {
  test(`${name}: under app.use() the route is the template the router will pick`, async () => {
    const limiter = Limiter.fromRules({
      headers: 'legacy',
      policies: { per_route: { rate: '1/min', burst: 2 } },
      // As Go and FastAPI write it: the core compares one canonical spelling.
      rules: [{ match: { route: '/v1/items/{id}' }, key: ['route'], policy: 'per_route' }],
    });
    const app = ex();
    app.use(rateLimit({ limiter }));
    const v1 = ex.Router();
    v1.get('/items/:id', (req, res) => res.send('item'));
    app.use('/v1', v1);
    app.get('/other', (req, res) => res.send('other'));
    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    const url = `http://127.0.0.1:${server.address().port}`;
    try {
      const items = [];
      for (const id of [1, 2, 3]) items.push((await request(`${url}/v1/items/${id}?q=${id}`)).status);
      assert.deepStrictEqual(items, [200, 200, 429]);
      const other = await request(`${url}/other`);
      assert.equal(other.status, 200);
      assert.equal(other.header('x-ratelimit-limit'), undefined);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
}
