'use strict';
// Cost in every Node adapter, on memory and a real Redis: the handler reports its request's actual
// cost where its framework keeps per-request values (Express `res.locals.polylimitCost`, Fastify
// `reply.polylimitCost`, Koa `ctx.state.polylimitCost`, Hono `c.set('polylimitCost', n)`, NestJS
// `req.polylimitCost` on both platforms, gRPC `reportCost(call, n)`) and the next request sees it
// charged; a `cost` option (a function, or a number on the per-route form) gives the request's
// cost, checked by the core against the rules' `max_cost`. The exact numbers per algorithm are the
// vectors (tests/conformance/cost, and the HTTP and gRPC vectors each adapter plays with its `cost`
// option).
require('reflect-metadata');
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const express = require('express');
const Fastify = require('fastify');
const Koa = require('koa');
const { Hono } = require('hono');
const { getRequestListener } = require('@hono/node-server');
const grpc = require('@grpc/grpc-js');
const { Limiter, ConfigError } = require('..');
const expressLimit = require('../express').rateLimit;
const polylimitFastify = require('../fastify');
const koaLimit = require('../koa').rateLimit;
const honoLimit = require('../hono').rateLimit;
const { PolylimitModule, PolylimitGuard, RateLimit } = require('../nestjs');
const { polylimitInterceptor, reportCost } = require('../grpc');
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

/**
 * 10 tokens an hour per API key (a refill every 6 minutes: nothing refills during a test, so the
 * numbers are exact); a request reserves its x-reserve header (1 without it), at most 10.
 */
function llmRules(store) {
  return {
    store,
    timeout: '10s',
    prefix: `node-cost-adapters-${process.pid}-${seq++}`,
    headers: 'legacy',
    policies: { llm: { algorithm: 'token_bucket', rate: '10/h', burst: 10 } },
    rules: [
      {
        match: { path: '/v1/*' },
        key: ['header:x-api-key'],
        policy: 'llm',
        cost: 'header:x-reserve',
        max_cost: 10,
      },
    ],
  };
}

const listening = (server) => new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
const closing = (server) => () => new Promise((resolve) => server.close(resolve));
const urlOf = (server) => `http://127.0.0.1:${server.address().port}`;

/** Nest's modules, imported once (Nest 12 is ESM). */
let nestModules;
async function nest() {
  if (!nestModules) {
    const [core, common, platformExpress, platformFastify] = await Promise.all([
      import('@nestjs/core'),
      import('@nestjs/common'),
      import('@nestjs/platform-express'),
      import('@nestjs/platform-fastify'),
    ]);
    nestModules = { core, common, platformExpress, platformFastify };
  }
  return nestModules;
}

/** A Nest app on `platform` ('express' | 'fastify') with the module's `options` and one `POST /v1/chat` handler `chat(req)`. */
async function nestServe(platform, options, chat, decorators = []) {
  const { core, common, platformExpress, platformFastify } = await nest();
  class Chat {
    chat(req) {
      return chat(req);
    }
  }
  const descriptor = Object.getOwnPropertyDescriptor(Chat.prototype, 'chat');
  common.Req()(Chat.prototype, 'chat', 0);
  for (const d of [common.Post('v1/chat'), common.HttpCode(200), ...decorators]) d(Chat.prototype, 'chat', descriptor);
  common.Controller()(Chat);
  class AppModule {}
  common.Module({
    imports: [PolylimitModule.forRoot(options)],
    controllers: [Chat],
    providers: [{ provide: core.APP_GUARD, useClass: PolylimitGuard }],
  })(AppModule);
  const adapter = platform === 'fastify' ? new platformFastify.FastifyAdapter() : new platformExpress.ExpressAdapter();
  const app = await core.NestFactory.create(AppModule, adapter, { logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  return { url: (await app.getUrl()).replace('[::1]', '127.0.0.1'), close: () => app.close() };
}

const used = (query) => (query && query.used !== undefined ? Number(query.used) : undefined);

/**
 * Each adapter: `serve(options)` → `{ url, close }`, a server whose `POST /v1/chat` is limited by
 * the adapter built from `options` and whose handler reports `?used=n` as its actual cost, the way
 * that framework's handlers do; `header(arg, name)` reads a request header from the first
 * argument the adapter gives its functions (for the `cost` function).
 */
const ADAPTERS = {
  express: {
    header: (req, name) => req.get(name),
    async serve(options) {
      const app = express();
      app.post('/v1/chat', expressLimit(options), (req, res) => {
        if (used(req.query) !== undefined) res.locals.polylimitCost = used(req.query);
        res.json({ ok: true });
      });
      const server = await listening(http.createServer(app));
      return { url: urlOf(server), close: closing(server) };
    },
  },
  fastify: {
    header: (request, name) => request.headers[name],
    async serve(options) {
      const app = Fastify();
      await app.register(polylimitFastify, options);
      app.post('/v1/chat', async (request, reply) => {
        if (used(request.query) !== undefined) reply.polylimitCost = used(request.query);
        return { ok: true };
      });
      await app.listen({ port: 0, host: '127.0.0.1' });
      return { url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
    },
  },
  koa: {
    header: (ctx, name) => ctx.get(name) || undefined,
    async serve(options) {
      const app = new Koa();
      app.use(koaLimit(options));
      app.use((ctx) => {
        if (used(ctx.query) !== undefined) ctx.state.polylimitCost = used(ctx.query);
        ctx.body = { ok: true };
      });
      const server = await listening(http.createServer(app.callback()));
      return { url: urlOf(server), close: closing(server) };
    },
  },
  hono: {
    header: (c, name) => c.req.header(name),
    async serve(options) {
      const app = new Hono();
      app.use(honoLimit(options));
      app.post('/v1/chat', (c) => {
        const n = c.req.query('used');
        if (n !== undefined) c.set('polylimitCost', Number(n));
        return c.json({ ok: true });
      });
      const server = await listening(http.createServer(getRequestListener(app.fetch)));
      return { url: urlOf(server), close: closing(server) };
    },
  },
  'nestjs-express': {
    header: (req, name) => req.get(name),
    serve: (options) =>
      nestServe('express', options, (req) => {
        if (used(req.query) !== undefined) req.polylimitCost = used(req.query);
        return { ok: true };
      }),
  },
  'nestjs-fastify': {
    header: (req, name) => req.headers[name],
    serve: (options) =>
      nestServe('fastify', options, (req) => {
        if (used(req.query) !== undefined) req.polylimitCost = used(req.query);
        return { ok: true };
      }),
  },
};

const post = (url, query = '', headers = {}) =>
  request(`${url}/v1/chat${query}`, { method: 'POST', headers: { 'x-api-key': 'k1', ...headers } });
const remaining = (res) => res.header('x-ratelimit-remaining');

for (const [name, adapter] of Object.entries(ADAPTERS)) {
  for (const store of ['memory', 'redis']) {
    const storeOf = () => (store === 'memory' ? 'memory' : redis.url);

    test(`${name}: the handler's reported cost is charged before the next request on ${store}`, async () => {
      const srv = await adapter.serve({ rules: llmRules(storeOf()) });
      try {
        const first = await post(srv.url, '?used=8'); // reserves 1, reports 8: 7 more charged
        assert.equal(first.status, 200, first.body);
        assert.equal(remaining(first), '9');
        const second = await post(srv.url, '?used=1');
        assert.equal(second.status, 200, second.body);
        assert.equal(remaining(second), '1', 'the 8 reported for the first request were charged');
        const third = await post(srv.url, '?used=1', { 'x-reserve': '2' });
        assert.equal(third.status, 429, 'the reported cost is real');
        // A smaller actual cost gives the difference back (a fresh key).
        const big = await post(srv.url, '?used=2', { 'x-api-key': 'k2', 'x-reserve': '9' });
        assert.equal(remaining(big), '1');
        assert.equal(remaining(await post(srv.url, '', { 'x-api-key': 'k2' })), '7', '7 of the 9 reserved came back');
      } finally {
        await srv.close();
      }
    });

    test(`${name}: a cost function gives the request's cost, checked against max_cost, on ${store}`, async () => {
      const cost = (arg) => {
        const units = adapter.header(arg, 'x-units');
        return units === undefined ? undefined : Number(units);
      };
      const srv = await adapter.serve({ rules: llmRules(storeOf()), cost });
      try {
        const four = await post(srv.url, '', { 'x-units': '4' });
        assert.equal(four.status, 200, four.body);
        assert.equal(remaining(four), '6', "the function's 4, not the rule's 1");
        const over = await post(srv.url, '', { 'x-units': '11' });
        assert.equal(over.status, 400);
        assert.deepStrictEqual(
          [JSON.parse(over.body).error, JSON.parse(over.body).field, JSON.parse(over.body).max_cost],
          ['invalid_cost', 'cost', 10],
        );
        const none = await post(srv.url); // undefined: the rule's cost (x-reserve, 1 without it)
        assert.equal(remaining(none), '5', 'nothing was charged for the refused request');
      } finally {
        await srv.close();
      }
    });
  }

  test(`${name}: a cost on the per-route form (a rule of a limiter, by policy name)`, async () => {
    const limiter = new Limiter({
      prefix: `node-cost-adapters-${process.pid}-${seq++}`,
      headers: 'legacy',
      policies: { llm: { algorithm: 'token_bucket', rate: '10/h', burst: 10 } },
    });
    const srv = await adapter.serve({ limiter, policy: 'llm', key: ['header:x-api-key'], cost: 3 });
    try {
      assert.equal(remaining(await post(srv.url)), '7');
      assert.equal(remaining(await post(srv.url)), '4');
    } finally {
      await srv.close();
      limiter.close();
    }
  });
}

test("fastify: a route's config gives its cost; nestjs: @RateLimit gives a handler's", async () => {
  const app = Fastify();
  await app.register(polylimitFastify, { rules: llmRules('memory') });
  app.post('/v1/chat', { config: { rateLimit: { cost: 4 } } }, async () => ({ ok: true }));
  app.post('/v1/other', async () => ({ ok: true }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${app.server.address().port}`;
  try {
    assert.equal(remaining(await post(url)), '6', "the route's 4");
    const other = await request(`${url}/v1/other`, { method: 'POST', headers: { 'x-api-key': 'k1' } });
    assert.equal(remaining(other), '5', "the rule's 1 elsewhere");
  } finally {
    await app.close();
  }
  const srv = await nestServe('express', { rules: llmRules('memory') }, () => ({ ok: true }), [RateLimit({ cost: 3 })]);
  try {
    assert.equal(remaining(await post(srv.url)), '7');
  } finally {
    await srv.close();
  }
});

test('hono without a Node server (Bun, Deno: the fetch handler alone): the reported cost is charged too', async () => {
  const app = new Hono();
  const limit = honoLimit({ rules: llmRules('memory') });
  app.use(limit);
  app.post('/v1/chat', (c) => {
    c.set('polylimitCost', Number(c.req.query('used') ?? 1));
    return c.json({ ok: true });
  });
  const chat = (query) => app.request(`http://localhost/v1/chat${query}`, { method: 'POST', headers: { 'x-api-key': 'k1' } });
  try {
    assert.equal((await chat('?used=8')).headers.get('x-ratelimit-remaining'), '9');
    assert.equal((await chat('')).headers.get('x-ratelimit-remaining'), '1');
  } finally {
    limit.limiter.close();
  }
});

test('a cost given as a value is checked when the middleware is built: a ConfigError naming cost', async () => {
  for (const bad of [0, -1, 2.5, 'lots', true]) {
    assert.throws(
      () => expressLimit({ rules: llmRules('memory'), cost: bad }),
      (e) => e instanceof ConfigError && e.field === 'cost',
      String(bad),
    );
    assert.throws(() => koaLimit({ rules: llmRules('memory'), cost: bad }), (e) => e instanceof ConfigError && e.field === 'cost');
  }
  const app = Fastify();
  await assert.rejects(
    app.register(polylimitFastify, { rules: llmRules('memory'), cost: 0 }).ready(),
    (e) => e instanceof ConfigError && e.field === 'cost',
  );
});

test('a cost function giving a bad cost: the request fails with a ConfigError naming cost, nothing charged', async () => {
  const limiter = Limiter.fromRules(llmRules('memory'));
  const app = express();
  app.post('/v1/chat', expressLimit({ limiter, cost: (req) => req.get('x-units') }), (req, res) => res.json({ ok: true }));
  let seen;
  app.use((err, req, res, next) => {
    seen = err;
    res.status(500).end();
  });
  const server = await listening(http.createServer(app));
  try {
    assert.equal((await post(urlOf(server), '', { 'x-units': 'many' })).status, 500);
    assert.ok(seen instanceof ConfigError && seen.field === 'cost', String(seen));
    assert.equal(remaining(await post(urlOf(server))), '9');
  } finally {
    await closing(server)();
    limiter.close();
  }
});

test('a reported cost the core refuses is a process warning; the request is completed without it', async () => {
  const srv = await ADAPTERS.express.serve({ rules: llmRules('memory') });
  let listener;
  const warned = new Promise((resolve) => {
    listener = (w) => w.code === 'POLYLIMIT_COST' && resolve(w);
    process.on('warning', listener);
  });
  try {
    assert.equal((await post(srv.url, '?used=-5', { 'x-reserve': '3' })).status, 200);
    const warning = await warned;
    assert.equal(warning.code, 'POLYLIMIT_COST');
    assert.match(warning.message, /cost/);
    assert.equal(remaining(await post(srv.url)), '6', 'the reservation of 3 stands');
  } finally {
    process.off('warning', listener);
    await srv.close();
  }
});

/** One unary call with text messages; resolves to `{ code, headers }` (headers: the response metadata's map). */
function unary(client, path, message, pairs) {
  const md = new grpc.Metadata();
  for (const [k, v] of pairs) md.add(k, v);
  const ser = (s) => Buffer.from(String(s));
  const de = (b) => b.toString();
  return new Promise((resolve) => {
    let headers = {};
    const call = client.makeUnaryRequest(path, ser, de, message, md, (err) => resolve({ code: err ? err.code : 0, headers }));
    call.on('metadata', (m) => (headers = m.getMap()));
  });
}

for (const store of ['memory', 'redis']) {
  test(`grpc: the handler reports its call's actual cost with reportCost(call, n); a cost function, on ${store}`, async () => {
    const rules = llmRules(store === 'memory' ? 'memory' : redis.url);
    rules.rules[0].match = { path: '/test.Llm/*' };
    const limiter = Limiter.fromRules(rules);
    const text = { serialize: (s) => Buffer.from(String(s)), deserialize: (b) => b.toString() };
    const method = (path) => ({
      path,
      requestStream: false,
      responseStream: false,
      requestSerialize: text.serialize,
      requestDeserialize: text.deserialize,
      responseSerialize: text.serialize,
      responseDeserialize: text.deserialize,
    });
    const reports = [];
    const server = new grpc.Server({
      interceptors: [
        polylimitInterceptor({
          limiter,
          cost: (metadata) => (metadata.get('x-units').length ? Number(metadata.get('x-units')[0]) : undefined),
        }),
      ],
    });
    server.addService(
      { Chat: method('/test.Llm/Chat') },
      {
        Chat: (call, callback) => {
          if (call.request !== '') reports.push(reportCost(call, Number(call.request))); // the tokens used
          callback(null, 'answer');
        },
      },
    );
    const port = await new Promise((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    try {
      const key = ['x-api-key', 'k1'];
      const first = await unary(client, '/test.Llm/Chat', '8', [key]); // reserves 1, reports 8
      assert.deepStrictEqual([first.code, first.headers['x-ratelimit-remaining']], [0, '9']);
      const second = await unary(client, '/test.Llm/Chat', '', [key]);
      assert.equal(second.headers['x-ratelimit-remaining'], '1', 'the 8 reported were charged');
      assert.deepStrictEqual(reports, [true]);
      const byFunction = await unary(client, '/test.Llm/Chat', '', [['x-api-key', 'k2'], ['x-units', '4']]);
      assert.equal(byFunction.headers['x-ratelimit-remaining'], '6');
      const over = await unary(client, '/test.Llm/Chat', '', [['x-api-key', 'k2'], ['x-units', '11']]);
      assert.equal(over.code, grpc.status.INVALID_ARGUMENT);
      assert.equal(reportCost({ metadata: new grpc.Metadata() }, 5), false, 'no interceptor settles that call');
    } finally {
      client.close();
      await new Promise((resolve) => server.tryShutdown(resolve));
      limiter.close();
    }
  });
}
