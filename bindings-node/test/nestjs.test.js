'use strict';
// The NestJS module, guard and decorators on Nest's Express platform: the HTTP vectors (memory,
// Redis), the scenarios every Node framework passes, @RateLimit / @SkipRateLimit,
// count-after-response and concurrency slots given back on a handler error and on a hang-up.
// Nest 12 is ESM: imported, not required; controllers are decorated by calling the decorators.
require('reflect-metadata');
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { PolylimitModule, PolylimitGuard, RateLimit, SkipRateLimit } = require('../nestjs');
const { Limiter } = require('..');
const { RedisServer } = require('./support');
const { request, scenarios, trustScenarios } = require('./http_support');
const { vectorTests } = require('./http_vectors');

let redis;
let nest;
test.before(async () => {
  redis = await RedisServer.start();
  const [core, platform, common] = await Promise.all([
    import('@nestjs/core'),
    import('@nestjs/platform-express'),
    import('@nestjs/common'),
  ]);
  // The Express Nest's platform depends on.
  const express = require(require.resolve('express', { paths: [require.resolve('@nestjs/platform-express')] }));
  nest = { core, platform, common, express };
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-nest-${process.pid}-${seq++}`;

/**
 * A Nest application with the module's options, the guard as APP_GUARD, and one controller whose
 * `routes` are `{ method: 'Get' | 'All', path, handler(req, res), decorators }`; `configure(app)`
 * sets the Express app before Nest routes on it. Resolves to `{ app, express }` (initialised).
 */
async function nestApp(moduleOptions, routes, configure = () => {}) {
  const { core, platform, common, express } = nest;
  class Routes {}
  routes.forEach((route, i) => {
    const name = `route${i}`;
    Routes.prototype[name] = function handle(req, res) {
      return route.handler(req, res);
    };
    const descriptor = Object.getOwnPropertyDescriptor(Routes.prototype, name);
    common.Req()(Routes.prototype, name, 0);
    common.Res({ passthrough: true })(Routes.prototype, name, 1);
    for (const decorate of [common[route.method || 'Get'](route.path), ...(route.decorators || [])]) {
      decorate(Routes.prototype, name, descriptor);
    }
  });
  common.Controller()(Routes);
  class AppModule {}
  common.Module({
    imports: [PolylimitModule.forRoot(moduleOptions)],
    controllers: [Routes],
    providers: [{ provide: core.APP_GUARD, useClass: PolylimitGuard }],
  })(AppModule);
  const instance = express();
  configure(instance);
  const app = await core.NestFactory.create(AppModule, new platform.ExpressAdapter(instance), { logger: false, abortOnError: false });
  await app.init();
  return { app, express: instance };
}

async function listenNest(built, at) {
  const server = http.createServer(built.express);
  await new Promise((resolve) => (at ? server.listen(at, resolve) : server.listen(0, '127.0.0.1', resolve)));
  return {
    server,
    close: async () => {
      await new Promise((resolve) => server.close(resolve));
      await built.app.close();
    },
  };
}

/** Whether a case's rules look at the route (a path no controller route matches is never guarded by Nest). */
const usesRoute = (c) => JSON.stringify(c.rules.rules || []).includes('route');

vectorTests(
  test,
  {
    skip: (c) =>
      usesRoute(c) && c.requests.some((s) => s.request && !s.request.route)
        ? 'a request no Nest route matches (Nest guards routes only)'
        : null,
    async mount({ options, routes, flags, handler }) {
      const answer = async (req, res) => {
        res.status(await handler(req));
        return 'ok';
      };
      const all = [...routes, '/{*rest}', '/'].map((path) => ({ method: 'All', path, handler: answer }));
      const built = await nestApp(options, all, (app) => {
        app.set('case sensitive routing', !flags.caseInsensitive);
        app.set('strict routing', !flags.ignoreTrailingSlash);
      });
      return { listener: built.express, close: () => built.app.close() };
    },
  },
  () => redis.url,
  'nestjs',
);

async function serve(options) {
  const ok = () => 'ok';
  const built = await nestApp(options, [
    { path: '/api/items', handler: ok },
    { path: '/api/slow', handler: ok },
    { path: '/health', handler: () => 'healthy', decorators: [SkipRateLimit()] },
  ]);
  const { server, close } = await listenNest(built);
  const limiter = built.app.get('POLYLIMIT').limiter;
  return { url: `http://127.0.0.1:${server.address().port}`, limiter, close };
}

scenarios(test, serve, () => redis.url, 'nestjs');

trustScenarios(
  test,
  async (options, socketPath) => {
    const built = await nestApp(options, [{ path: '/api/items', handler: () => 'ok' }]);
    const { server, close } = await listenNest(built, socketPath);
    return { at: socketPath ? { socketPath } : { port: server.address().port }, close };
  },
  () => redis.url,
  'nestjs',
);

test('nestjs: @RateLimit gives a handler its own rule of the module limiter, keyed per route; @SkipRateLimit exempts', async () => {
  const built = await nestApp(
    { prefix: prefix(), headers: 'none', policies: { strict: { rate: '1/min', burst: 1 }, loose: { rate: '1/min', burst: 3 } } },
    [
      { path: '/a/:id', handler: () => 'a', decorators: [RateLimit({ policy: 'strict' })] },
      { path: '/b', handler: () => 'b', decorators: [RateLimit({ policy: 'strict' })] },
      { path: '/c', handler: () => 'c', decorators: [RateLimit({ policy: { rate: '1/min', burst: 2 } })] },
      { path: '/free', handler: () => 'free', decorators: [SkipRateLimit()] },
    ],
  );
  const { server, close } = await listenNest(built);
  const url = `http://127.0.0.1:${server.address().port}`;
  try {
    const got = async (paths) => {
      const out = [];
      for (const p of paths) out.push((await request(`${url}${p}`)).status);
      return out;
    };
    // One budget per route template (/a/{} for every id), another for /b; /c has a limit of its own.
    assert.deepStrictEqual(await got(['/a/1', '/a/2', '/b', '/b', '/c', '/c', '/c']), [200, 429, 200, 429, 200, 200, 429]);
    assert.deepStrictEqual(await got(['/free', '/free', '/free', '/free']), [200, 200, 200, 200]);
  } finally {
    await close();
  }
});

test('nestjs: count-after-response, and a concurrency slot given back on a handler error and on a hang-up', async () => {
  let release;
  const built = await nestApp(
    {
      rules: {
        store: redis.url,
        timeout: '10s',
        prefix: prefix(),
        headers: 'none',
        policies: { login: { algorithm: 'fixed_window', rate: '2/min' }, slots: { algorithm: 'concurrency', limit: 1 } },
        rules: [
          { match: { path: '/login' }, key: ['ip'], policy: 'login', count: 'failed' },
          { match: { path: '/work' }, key: ['ip'], policy: 'slots' },
        ],
      },
    },
    [
      {
        path: '/login',
        handler: (req, res) => {
          res.status(req.query.ok ? 200 : 401);
          return 'login';
        },
      },
      {
        path: '/work',
        handler: async (req) => {
          if (req.query.fail) throw new Error('handler failed');
          await new Promise((resolve) => (release = resolve));
          return 'done';
        },
      },
    ],
  );
  const { server, close } = await listenNest(built);
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
    await close();
  }
});

test('nestjs: a limiter given to the module stays the caller\'s; the ones it built close with the app', async () => {
  const limiter = new Limiter({ policy: { rate: '1/min' }, prefix: prefix() });
  const built = await nestApp({ limiter }, [{ path: '/', handler: () => 'ok' }]);
  await built.app.close();
  assert.equal((await limiter.check('k')).allowed, true);
  limiter.close();
});

test('nestjs: on the Fastify platform: route template, exact refusal, headers as the core spells them', async () => {
  const { core, common } = nest;
  const { FastifyAdapter } = await import('@nestjs/platform-fastify');
  class Items {
    item() {
      return 'item';
    }
  }
  const descriptor = Object.getOwnPropertyDescriptor(Items.prototype, 'item');
  common.Get('items/:id')(Items.prototype, 'item', descriptor);
  common.Controller()(Items);
  class AppModule {}
  common.Module({
    imports: [
      PolylimitModule.forRoot({
        rules: {
          prefix: prefix(),
          policies: { api: { rate: '1/min', burst: 2 } },
          rules: [{ match: { route: '/items/{id}' }, key: ['route'], policy: 'api' }],
        },
      }),
    ],
    controllers: [Items],
    providers: [{ provide: core.APP_GUARD, useClass: PolylimitGuard }],
  })(AppModule);
  const app = await core.NestFactory.create(AppModule, new FastifyAdapter(), { logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  const url = await app.getUrl();
  try {
    const got = [];
    for (const id of [1, 2, 3]) got.push(await request(`${url}/items/${id}`));
    assert.deepStrictEqual(got.map((r) => r.status), [200, 200, 429]);
    assert.equal(got[2].body, '{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":60}');
    assert.deepStrictEqual(got[2].rate.map(([n]) => n), [
      'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit', 'Retry-After',
    ]);
  } finally {
    await app.close();
  }
});
