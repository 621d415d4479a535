'use strict';
// The Hono middleware on @hono/node-server: the HTTP vectors (memory, Redis), the scenarios every
// Node framework passes, the route template, count-after-response and concurrency slots given
// back on a handler error and on a hang-up, and `getPeer` (what Bun and Deno use).
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { Hono } = require('hono');
const { getRequestListener } = require('@hono/node-server');
const { rateLimit } = require('../hono');
const { Limiter } = require('..');
const { RedisServer } = require('./support');
const { request, scenarios, trustScenarios } = require('./http_support');
const { vectorTests } = require('./http_vectors');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-hono-${process.pid}-${seq++}`;

/** `app` on a Node server, at `at` (a Unix socket path) or loopback TCP. */
function listen(app, at) {
  const server = http.createServer(getRequestListener(app.fetch));
  return new Promise((resolve) => {
    if (at) server.listen(at, () => resolve(server));
    else server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const closing = (server) => () => new Promise((resolve) => server.close(resolve));

vectorTests(
  test,
  {
    // Fetch's Headers hold names in lower case and list them sorted.
    lowercase: true,
    sorted: true,
    skip: (c, flags) => (flags.caseInsensitive || flags.ignoreTrailingSlash ? "Hono's router is case-sensitive and strict" : null),
    mount({ options, routes, handler }) {
      const app = new Hono();
      app.use(rateLimit(options));
      const answer = async (c) => c.text('ok', await handler(c));
      for (const route of routes) app.all(route, answer);
      app.notFound(answer); // paths no route matches: answered all the same, with no route template
      return { listener: getRequestListener(app.fetch) };
    },
  },
  () => redis.url,
  'hono',
);

async function serve(options) {
  const app = new Hono();
  const mw = rateLimit(options);
  app.use('/api/*', mw);
  app.get('/api/items', (c) => c.text('ok'));
  app.get('/api/slow', (c) => c.text('ok'));
  app.get('/health', (c) => c.text('healthy'));
  const server = await listen(app);
  return { url: `http://127.0.0.1:${server.address().port}`, limiter: mw.limiter, close: closing(server) };
}

scenarios(test, serve, () => redis.url, 'hono', { lowercase: true });

trustScenarios(
  test,
  async (options, socketPath) => {
    const app = new Hono();
    app.use(rateLimit(options));
    app.get('/api/items', (c) => c.text('ok'));
    const server = await listen(app, socketPath);
    return { at: socketPath ? { socketPath } : { port: server.address().port }, close: closing(server) };
  },
  () => redis.url,
  'hono',
);

test('hono: the route template is the route Hono matched, not the middleware\'s pattern', async () => {
  const limiter = Limiter.fromRules({
    prefix: prefix(),
    headers: 'none',
    policies: { api: { rate: '1/min', burst: 2 } },
    rules: [{ match: { path: '/api/*' }, key: ['route'], policy: 'api' }],
  });
  const app = new Hono();
  app.use('/api/*', rateLimit({ limiter }));
  app.get('/api/items/:id', (c) => c.text('ok'));
  const server = await listen(app);
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    const got = [];
    for (const p of ['/api/items/1', '/api/items/2', '/api/items/3', '/api/none', '/api/none2', '/api/none3']) {
      got.push((await request(`${url}${p}`)).status);
    }
    // /api/items/{} is one key; paths no route matches share `unmatched` (404 while let through).
    assert.deepStrictEqual(got, [200, 200, 429, 404, 404, 429]);
  } finally {
    await closing(server)();
    limiter.close();
  }
});

test('hono: getPeer gives the client address where there is no Node request (Bun, Deno)', async () => {
  const app = new Hono();
  app.use(rateLimit({ policy: { rate: '1/min', burst: 1 }, prefix: prefix(), getPeer: (c) => c.req.header('x-test-peer') }));
  app.get('/', (c) => c.text('ok'));
  // app.request: Hono's fetch without a server, as on Bun or Deno.
  const at = (peer) => app.request('/', { headers: { 'x-test-peer': peer } }).then((r) => r.status);
  assert.deepStrictEqual([await at('192.0.2.1'), await at('192.0.2.1'), await at('192.0.2.2')], [200, 429, 200]);
});

test('hono: count-after-response, and a concurrency slot given back on a handler error and on a hang-up', async () => {
  const limiter = Limiter.fromRules({
    store: redis.url,
    timeout: '10s',
    prefix: prefix(),
    headers: 'none',
    policies: { login: { algorithm: 'fixed_window', rate: '2/min' }, slots: { algorithm: 'concurrency', limit: 1 } },
    rules: [
      { match: { path: '/login' }, key: ['ip'], policy: 'login', count: 'failed' },
      { match: { path: '/work' }, key: ['ip'], policy: 'slots' },
    ],
  });
  let release;
  const app = new Hono();
  app.use(rateLimit({ limiter }));
  app.get('/login', (c) => c.text('login', c.req.query('ok') ? 200 : 401));
  app.get('/work', async (c) => {
    if (c.req.query('fail')) throw new Error('handler failed');
    await new Promise((resolve) => (release = resolve));
    return c.text('done');
  });
  app.onError((err, c) => c.text('error', 500));
  const server = await listen(app);
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    const logins = [];
    for (const q of ['?ok=1', '?ok=1', '?ok=1', '', '', '?ok=1']) logins.push((await request(`${url}/login${q}`)).status);
    assert.deepStrictEqual(logins, [200, 200, 200, 401, 401, 429]);
    assert.equal((await request(`${url}/work?fail=1`)).status, 500);
    const hung = http.get(`${url}/work`, { agent: false });
    hung.on('error', () => {});
    while (!release) await new Promise((r) => setTimeout(r, 5));
    assert.equal((await request(`${url}/work`)).status, 429);
    hung.destroy();
    release();
    let status;
    for (let i = 0; i < 100 && status !== 200; i++) {
      release = null;
      const next = request(`${url}/work`);
      while (!release) {
        const done = await Promise.race([next.then(() => true), new Promise((r) => setTimeout(() => r(false), 5))]);
        if (done) break;
      }
      if (release) release();
      status = (await next).status;
    }
    assert.equal(status, 200);
  } finally {
    await closing(server)();
    limiter.close();
  }
});
