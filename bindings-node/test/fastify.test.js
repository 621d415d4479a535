'use strict';
// A real Fastify server on loopback, on a real Redis: the classic scenarios,
// route-level config, shape delays and fail-closed 503 through the plugin.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const Fastify = require('fastify');
const polylimitFastify = require('../fastify');
const { RedisServer } = require('./support');
const { request, requestAt, scenarios, trustScenarios, TOO_MANY } = require('./http_support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-fastify-${process.pid}-${seq++}`;

async function serve(pluginOptions, extra = () => {}) {
  const app = Fastify();
  await app.register(polylimitFastify, pluginOptions);
  app.get('/api/items', async () => 'ok');
  app.get('/api/items/:id', async (req) => `item ${req.params.id}`);
  app.get('/api/slow', async () => 'ok');
  app.get('/health', { config: { rateLimit: false } }, async () => 'healthy');
  extra(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${app.server.address().port}`, app, limiter: app.polylimit, close: () => app.close() };
}

scenarios(test, serve, () => redis.url, 'fastify');

/** A Fastify app limiting `GET /api/items` with the plugin, on `socketPath` or loopback TCP. */
async function listen(options, socketPath, fastifyOptions = {}) {
  const app = Fastify(fastifyOptions);
  await app.register(polylimitFastify, options);
  app.get('/api/items', async () => 'ok');
  await app.listen(socketPath ? { path: socketPath } : { port: 0, host: '127.0.0.1' });
  return { at: socketPath ? { socketPath } : { port: app.server.address().port }, close: () => app.close() };
}

trustScenarios(test, listen, () => redis.url, 'fastify');

test('fastify: path rules follow Fastify routing: case-sensitive and trailing slash significant by default, else as configured', async () => {
  const rules = {
    store: redis.url,
    timeout: '10s', // decisions, not latency
    headers: 'none',
    policies: { api: { rate: '1/min', burst: 2 } },
    rules: [{ match: { path: '/api/items' }, key: ['global'], policy: 'api' }],
  };
  let srv = await listen({ rules: { ...rules, prefix: prefix() } });
  try {
    const got = [];
    for (const target of ['/%61pi/items', '/api/items#f', '/api/items']) got.push((await requestAt(srv.at, target)).status);
    assert.deepStrictEqual(got, [200, 200, 429]);
  } finally {
    await srv.close();
  }
  // Fastify told to ignore case and a trailing slash routes /API/items/ to the handler: it counts.
  const loose = { routerOptions: { caseSensitive: false, ignoreTrailingSlash: true } };
  srv = await listen({ rules: { ...rules, prefix: prefix() } }, undefined, loose);
  try {
    const got = [];
    for (const target of ['/API/items/', '/Api/Items', '/api/items']) got.push((await requestAt(srv.at, target)).status);
    assert.deepStrictEqual(got, [200, 200, 429]);
  } finally {
    await srv.close();
  }
});

test('fastify: route-level config: exempt routes and a route with its own policy', async () => {
  const srv = await serve({ policy: { rate: '1/min', burst: 1 }, store: redis.url, timeout: '10s', prefix: prefix() }, (app) => {
    app.get('/api/search', { config: { rateLimit: { policy: { rate: '3/min', name: 'search' } } } }, async () => 'found');
  });
  try {
    for (let i = 0; i < 3; i++) assert.equal((await request(`${srv.url}/health`)).status, 200);
    assert.deepStrictEqual((await request(`${srv.url}/health`)).rate, []);
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await request(`${srv.url}/api/search`)).status);
    assert.deepStrictEqual(statuses, [200, 200, 200, 429]);
    const first = await request(`${srv.url}/api/items`);
    assert.equal(first.status, 200);
    assert.equal(first.header('ratelimit-policy'), '"default";q=1;w=60');
    const denied = await request(`${srv.url}/api/items`);
    assert.equal(denied.status, 429);
    assert.equal(denied.header('retry-after'), '60');
    assert.equal(denied.body, TOO_MANY.replace('"retry_after":1', '"retry_after":60'));
  } finally {
    await srv.close();
  }
});

test('fastify: a rules file keyed by route template and header', async () => {
  const srv = await serve({
    rules: {
      store: redis.url,
      timeout: '10s', // decisions, not latency
      prefix: prefix(),
      headers: 'legacy',
      policies: { per_tenant: { algorithm: 'fixed_window', rate: '2/min' } },
      rules: [{ match: { route: '/api/items/:id' }, key: ['route', 'header:x-tenant'], policy: 'per_tenant' }],
    },
  });
  try {
    const t1 = { headers: { 'x-tenant': 't1' } };
    const first = await request(`${srv.url}/api/items/1`, t1);
    assert.equal(first.status, 200);
    assert.equal(first.body, 'item 1');
    assert.deepStrictEqual(first.rate.map(([n]) => n), ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']);
    assert.equal(first.header('x-ratelimit-remaining'), '1');
    assert.equal((await request(`${srv.url}/api/items/2`, t1)).status, 200);
    assert.equal((await request(`${srv.url}/api/items/3`, t1)).status, 429);
    assert.equal((await request(`${srv.url}/api/items/3`, { headers: { 'x-tenant': 't2' } })).status, 200);
    // No tenant header: the rule does not apply.
    const none = await request(`${srv.url}/api/items/3`);
    assert.equal(none.status, 200);
    assert.deepStrictEqual(none.rate, []);
  } finally {
    await srv.close();
  }
});


test('fastify: a route naming a policy checks through the limiter the plugin built from its rules', async () => {
  const rules = `prefix: ${prefix()}\nstore: ${redis.url}\ntimeout: 10s\nheaders: legacy\npolicies:\n  api: { rate: 1/min, burst: 2 }\n  site: { rate: 1/min, burst: 100 }\nrules:\n  - { match: { path: /api/* }, key: [ip], policy: site }\n`;
  const srv = await serve({ rules, global: false }, (app) => {
    app.get('/x', { config: { rateLimit: { policy: 'api' } } }, async () => 'x');
    app.get('/y', { config: { rateLimit: { policy: 'api' } } }, async () => 'y');
    app.get('/shared1', { config: { rateLimit: { policy: 'api', perRoute: false } } }, async () => 's1');
    app.get('/shared2', { config: { rateLimit: { policy: 'api', perRoute: false } } }, async () => 's2');
  });
  try {
    const got = [];
    for (const p of ['/x', '/x', '/x', '/y', '/shared1', '/shared2', '/shared1']) got.push((await request(`${srv.url}${p}`)).status);
    // Per route by default: /x and /y two budgets of 2; perRoute: false, one budget for both.
    assert.deepStrictEqual(got, [200, 200, 429, 200, 200, 200, 429]);
    // The plugin's limiter decided them (its metrics), with the document's header mode.
    const metrics = srv.limiter.metricsText();
    assert.ok(metrics.includes('polylimit_requests_total{policy="api",route="route_rule",decision="denied",source="store"} 2'), metrics);
    assert.equal((await request(`${srv.url}/y`)).header('x-ratelimit-limit'), '2');
    // A direct check on the same state: /shared1 and /shared2 are keyed `ip=…`, and spent it.
    assert.equal((await srv.limiter.check('ip=127.0.0.1')).allowed, false);
  } finally {
    await srv.close();
  }
  // The plugin built that limiter, so Fastify's close() closed it.
  assert.equal(srv.limiter.closed, true);
});

test('fastify: a route with its own policy under a rules-file plugin: the document settings, the route limit, its own keys', async () => {
  const rulesFile = path.join(os.tmpdir(), `polylimit-fastify-${process.pid}-${seq++}.yaml`);
  fs.writeFileSync(
    rulesFile,
    `prefix: ${prefix()}\nstore: ${redis.url}\ntimeout: 10s\nheaders: legacy\npolicies:\n  api: { rate: 1/min, burst: 1 }\nrules:\n  - { key: [ip], policy: api }\n`,
  );
  try {
    const srv = await serve({ rulesFile }, (app) => {
      app.get('/own', { config: { rateLimit: { policy: { rate: '1/min', burst: 3, name: 'own' } } } }, async () => 'own');
    });
    try {
      const got = [];
      for (let i = 0; i < 4; i++) got.push((await request(`${srv.url}/own`)).status);
      assert.deepStrictEqual(got, [200, 200, 200, 429]);
      // The plugin-wide rule (burst 1) was never charged by /own: its own key space.
      const items = await request(`${srv.url}/api/items`);
      assert.equal(items.status, 200);
      // The document's header mode applies to the route's own limiter too.
      assert.equal((await request(`${srv.url}/own`)).header('x-ratelimit-limit'), '3');
      assert.equal((await request(`${srv.url}/api/items`)).status, 429);
    } finally {
      await srv.close();
    }
    assert.equal(srv.limiter.closed, true);
  } finally {
    fs.unlinkSync(rulesFile);
  }
});

test('fastify: keyGenerator keys the plugin-wide rule; a key leaving it out is a ConfigError', async () => {
  const srv = await serve({
    policy: { rate: '1/min', burst: 1 },
    headers: 'none',
    keyGenerator: (req) => req.headers['x-tenant'] || 'anonymous',
  });
  try {
    const got = [];
    for (const tenant of ['t1', 't2', 't1']) got.push((await request(`${srv.url}/api/items`, { headers: { 'x-tenant': tenant } })).status);
    assert.deepStrictEqual(got, [200, 200, 429]);
  } finally {
    await srv.close();
  }
  const app = Fastify();
  await assert.rejects(
    (async () => {
      await app.register(polylimitFastify, { policy: { rate: '1/s' }, key: ['ip'], keyGenerator: () => 'k' });
      await app.ready();
    })(),
    (e) => e.code === 'POLYLIMIT_CONFIG' && e.field === 'key',
  );
  await app.close().catch(() => {});
});
