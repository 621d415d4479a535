'use strict';
// The Koa middleware on a real server: the HTTP vectors (memory, Redis), the scenarios every
// Node framework passes, the route template from @koa/router, count-after-response and
// concurrency slots given back on a handler error and on a hang-up.
const test = require('node:test');
const assert = require('node:assert/strict');
const Koa = require('koa');
const Router = require('@koa/router');
const { rateLimit } = require('../koa');
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
const prefix = () => `node-koa-${process.pid}-${seq++}`;

function listen(app, at) {
  return new Promise((resolve) => {
    const server = at ? app.listen(at, () => resolve(server)) : app.listen(0, '127.0.0.1', () => resolve(server));
  });
}

vectorTests(
  test,
  {
    skip: () => null,
    mount({ options, routes, flags, handler }) {
      const app = new Koa();
      const router = new Router({ sensitive: !flags.caseInsensitive, strict: !flags.ignoreTrailingSlash });
      const answer = async (ctx) => {
        ctx.status = await handler(ctx);
        ctx.body = 'ok';
      };
      for (const route of routes) router.all(route, answer);
      app.use(rateLimit({ ...options, router }));
      app.use(router.routes());
      app.use(answer); // paths no route matches: answered all the same, with no route template
      return { listener: app.callback() };
    },
  },
  () => redis.url,
  'koa',
);

async function serve(options) {
  const app = new Koa();
  const router = new Router();
  const mw = rateLimit(options);
  router.use('/api', mw);
  router.get('/api/items', (ctx) => (ctx.body = 'ok'));
  router.get('/api/slow', (ctx) => (ctx.body = 'ok'));
  router.get('/health', (ctx) => (ctx.body = 'healthy'));
  app.use(router.routes());
  const server = await listen(app);
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    limiter: mw.limiter,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

scenarios(test, serve, () => redis.url, 'koa');

trustScenarios(
  test,
  async (options, socketPath) => {
    const app = new Koa();
    app.use(rateLimit(options));
    app.use((ctx) => {
      if (ctx.path === '/api/items') ctx.body = 'ok';
    });
    const server = await listen(app, socketPath);
    return {
      at: socketPath ? { socketPath } : { port: server.address().port },
      close: () => new Promise((resolve) => server.close(resolve)),
    };
  },
  () => redis.url,
  'koa',
);

test('koa: the route template from @koa/router: before the router (router option), under router.use(), on a route', async () => {
  const seen = [];
  const limiter = Limiter.fromRules({
    prefix: prefix(),
    headers: 'none',
    policies: { api: { rate: '1/min', burst: 2 } },
    rules: [{ match: { route: '/items/{id}' }, key: ['route'], policy: 'api' }],
  });
  const record = (ctx) => seen.push(ctx.state.rateLimit.decisions.length);
  for (const mount of ['app', 'use', 'route']) {
    await limiter.reset('/items/{}').catch(() => {});
    const app = new Koa();
    const router = new Router({ prefix: '/v1' });
    if (mount === 'app') app.use(rateLimit({ limiter, router }));
    if (mount === 'use') router.use(rateLimit({ limiter }));
    const mw = mount === 'route' ? [rateLimit({ limiter })] : [];
    router.get('/items/:id', ...mw, (ctx) => {
      record(ctx);
      ctx.body = 'ok';
    });
    app.use(router.routes());
    const server = await listen(app);
    const url = `http://127.0.0.1:${server.address().port}`;
    try {
      // Rules match the route template of /v1/items/:id with its prefix: /v1/items/{} is not /items/{}.
      assert.equal((await request(`${url}/v1/items/1`)).status, 200, mount);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }
  assert.deepStrictEqual(seen, [0, 0, 0]);
  limiter.close();

  const byRoute = Limiter.fromRules({
    prefix: prefix(),
    headers: 'none',
    policies: { api: { rate: '1/min', burst: 2 } },
    rules: [{ match: { route: '/v1/items/{id}' }, key: ['route'], policy: 'api' }],
  });
  const app = new Koa();
  const router = new Router({ prefix: '/v1' });
  router.use(rateLimit({ limiter: byRoute }));
  router.get('/items/:id', (ctx) => (ctx.body = 'ok'));
  router.get('/other', (ctx) => (ctx.body = 'ok'));
  app.use(router.routes());
  const server = await listen(app);
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    const got = [];
    for (const p of ['/v1/items/1', '/v1/ITEMS/2/', '/v1/items/3', '/v1/other']) got.push((await request(`${url}${p}`)).status);
    // One template for every id, matched as the router matches (case-insensitive, trailing slash ignored).
    assert.deepStrictEqual(got, [200, 200, 429, 200]);
  } finally {
    await new Promise((resolve) => server.close(resolve));
    byRoute.close();
  }
});

test('koa: count-after-response, and a concurrency slot given back on a handler error and on a hang-up', async () => {
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
  const app = new Koa();
  app.silent = true;
  app.use(rateLimit({ limiter }));
  app.use(async (ctx) => {
    if (ctx.path === '/login') {
      ctx.status = ctx.query.ok ? 200 : 401;
      ctx.body = 'login';
    } else if (ctx.query.fail) {
      throw new Error('handler failed');
    } else {
      await new Promise((resolve) => (release = resolve));
      ctx.body = 'done';
    }
  });
  const server = await listen(app);
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    // Successful logins are given back; two failures fill the window.
    const logins = [];
    for (const q of ['?ok=1', '?ok=1', '?ok=1', '', '', '?ok=1']) logins.push((await request(`${url}/login${q}`)).status);
    assert.deepStrictEqual(logins, [200, 200, 200, 401, 401, 429]);
    // A handler error (500) gives the slot back.
    assert.equal((await request(`${url}/work?fail=1`)).status, 500);
    // A client hanging up: the slot comes back once the handler is done with it.
    const http = require('node:http');
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
    await new Promise((resolve) => server.close(resolve));
    limiter.close();
  }
});
