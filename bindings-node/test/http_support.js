'use strict';
// HTTP helpers shared by the Express and Fastify suites: a raw client that
// keeps header names and order, and the scenarios both frameworks must pass.
const http = require('node:http');
const assert = require('node:assert/strict');
const { RedisServer } = require('./support');

const RATE_HEADERS = /^(x-ratelimit-|ratelimit|retry-after$)/i;

/** GET (or `method`) `url` with `headers`; resolves to `{ status, headers: [[name, value]], rate: [...], body, ms }`. */
function request(url, { method = 'GET', headers = {} } = {}) {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => {
        const pairs = [];
        for (let i = 0; i < res.rawHeaders.length; i += 2) pairs.push([res.rawHeaders[i], res.rawHeaders[i + 1]]);
        resolve({
          status: res.statusCode,
          headers: pairs,
          rate: pairs.filter(([n]) => RATE_HEADERS.test(n)),
          header: (name) => res.headers[name.toLowerCase()],
          body,
          ms: Date.now() - started,
        });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * `method` `target` sent as is (absolute-form included) to `at`, `{ socketPath }` or
 * `{ port }` on 127.0.0.1; resolves to `{ status, body }`.
 */
function requestAt(at, target, { method = 'GET', headers = {} } = {}) {
  return new Promise((resolve, reject) => {
    const where = at.socketPath ? { socketPath: at.socketPath } : { host: '127.0.0.1', port: at.port };
    const req = http.request({ ...where, path: target, method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Asserts `X-RateLimit-Reset` lies in the window the request was made in, and returns it. */
function resetWithin(res, before, after, resetMs) {
  const reset = Number(res.header('x-ratelimit-reset'));
  const lo = Math.ceil((before + resetMs - 1000) / 1000);
  const hi = Math.ceil((after + resetMs) / 1000);
  assert.ok(reset >= lo && reset <= hi, `X-RateLimit-Reset ${reset} not in [${lo}, ${hi}]`);
  return String(reset);
}

const TOO_MANY = '{"error":"rate_limit_exceeded","message":"Too Many Requests","retry_after":1}';
const UNAVAILABLE = '{"error":"rate_limiter_unavailable","message":"Service Unavailable","retry_after":1}';

/**
 * The scenarios every framework must pass, against `start(options) → { url, limiter, close }`,
 * a server that limits `/api/*` (`/health` is not limited): the three classic ones
 * (by client IP, burst 10, rate 1/s), shape-mode delays, and fail_closed.
 */
function scenarios(t, start, redisUrl, label, { lowercase = false } = {}) {
  // Fetch's Headers (Hono) hold names in lower case and list them sorted.
  const norm = (pairs) => (lowercase ? pairs.map(([n, v]) => [n.toLowerCase(), v]).sort((a, b) => (a[0] < b[0] ? -1 : 1)) : pairs);
  const policy = { algorithm: 'token_bucket', rate: '1/s', burst: 10 };
  let n = 0;
  const prefix = () => `node-${process.pid}-${Date.now()}-${n++}`;

  t(`${label}: 15 sequential requests: 10 x 200 then 5 x 429, exact headers and body`, async () => {
    const app = await start({ policy, store: redisUrl(), timeout: '10s', prefix: prefix() });
    try {
      const results = [];
      for (let i = 0; i < 15; i++) {
        const before = Date.now();
        const res = await request(`${app.url}/api/items`);
        results.push({ res, before, after: Date.now() });
      }
      assert.deepStrictEqual(
        results.map((r) => r.res.status),
        [...Array(10).fill(200), ...Array(5).fill(429)],
      );
      const first = results[0];
      assert.equal(first.res.body, 'ok');
      assert.deepStrictEqual(norm(first.res.rate), norm([
        ['X-RateLimit-Limit', '10'],
        ['X-RateLimit-Remaining', '9'],
        ['X-RateLimit-Reset', resetWithin(first.res, first.before, first.after, 1000)],
        ['RateLimit-Policy', '"default";q=10;w=10'],
        ['RateLimit', '"default";r=9;t=1'],
      ]));
      const denied = results[10];
      assert.equal(denied.res.body, TOO_MANY);
      assert.equal(denied.res.header('content-type').split(';')[0], 'application/json');
      assert.deepStrictEqual(norm(denied.res.rate), norm([
        ['X-RateLimit-Limit', '10'],
        ['X-RateLimit-Remaining', '0'],
        ['X-RateLimit-Reset', resetWithin(denied.res, results[0].before, denied.after, 10000)],
        ['RateLimit-Policy', '"default";q=10;w=10'],
        ['RateLimit', '"default";r=0;t=10'],
        ['Retry-After', '1'],
      ]));
    } finally {
      await app.close();
    }
  });

  t(`${label}: 50 concurrent requests: exactly 10 x 200`, async () => {
    const app = await start({ policy, store: redisUrl(), timeout: '10s', prefix: prefix() });
    try {
      const results = await Promise.all(Array.from({ length: 50 }, () => request(`${app.url}/api/items`)));
      const statuses = results.map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 200).length, 10);
      assert.equal(statuses.filter((s) => s === 429).length, 40);
    } finally {
      await app.close();
    }
  });

  // No sleep: the bucket is drained through the middleware's own limiter with
  // `nowMs` 2 s in the past (the same rule and key as a request from this
  // client); the requests that follow are decided on the store's clock, now.
  t(`${label}: drained 2 s ago: 200 200 429`, async () => {
    const app = await start({ policy, store: redisUrl(), timeout: '10s', prefix: prefix() });
    try {
      const drain = { method: 'GET', path: '/api/items', peer: '127.0.0.1', nowMs: Date.now() - 2000 };
      for (let i = 0; i < 10; i++) assert.equal((await app.limiter.checkRequest(drain)).status, null);
      assert.equal((await app.limiter.checkRequest(drain)).status, 429);
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await request(`${app.url}/api/items`)).status);
      assert.deepStrictEqual(statuses, [200, 200, 429]);
    } finally {
      await app.close();
    }
  });

  t(`${label}: shape-mode delays hold the request without blocking the event loop`, async () => {
    const app = await start({
      // Steps of 1 s (0, 1 and 2 s): room for a loaded CI host between /health and the delays.
      policy: { algorithm: 'leaky_bucket', mode: 'shape', rate: '1/s', burst: 4 },
      prefix: prefix(),
      key: ['global'],
    });
    try {
      const started = Date.now();
      const slow = Promise.all([1, 2, 3].map(() => request(`${app.url}/api/slow`).then((r) => ({ ...r, done: Date.now() }))));
      await sleep(20);
      const health = await request(`${app.url}/health`);
      const healthDone = Date.now();
      assert.equal(health.status, 200);
      const results = await slow;
      assert.deepStrictEqual(results.map((r) => r.status), [200, 200, 200]);
      const slowest = Math.max(...results.map((r) => r.done)) - started;
      assert.ok(slowest >= 1950, `the third request waited ${slowest} ms, expected >= 2000`);
      // A blocked event loop would answer /health only after the delays.
      assert.ok(healthDone - started <= slowest - 1000, `health answered after ${healthDone - started} ms, the delayed ones after ${slowest} ms`);
    } finally {
      await app.close();
    }
  });

  t(`${label}: fail_closed answers 503 when Redis is down`, async () => {
    const down = await RedisServer.start();
    const app = await start({
      policy: { rate: '10/s', on_store_error: 'fail_closed' },
      store: down.url,
      prefix: prefix(),
      timeout: '10s', // the first request is the store's; a killed Redis refuses at once
      failureThreshold: 100,
    });
    try {
      assert.equal((await request(`${app.url}/api/items`)).status, 200);
      await down.kill();
      const res = await request(`${app.url}/api/items`);
      assert.equal(res.status, 503);
      assert.equal(res.body, UNAVAILABLE);
      assert.equal(res.header('retry-after'), '1');
      assert.equal(res.header('content-type').split(';')[0], 'application/json');
      assert.equal(res.header('x-ratelimit-remaining'), '0');
    } finally {
      await app.close();
      await down.kill();
    }
  });
}

/**
 * Trust boundaries every framework must keep, against `listen(options, socketPath) →
 * { at, close }`, a server with `GET /api/items` limited by the middleware options,
 * on a Unix socket when `socketPath` is given, else on loopback TCP (`at` is for `requestAt`).
 */
function trustScenarios(t, listen, redisUrl, label) {
  const policy = { rate: '1/min', burst: 1 };
  let n = 0;
  const prefix = () => `node-trust-${label}-${process.pid}-${n++}`;
  const socketPath = () => require('node:path').join(require('node:os').tmpdir(), `polylimit-${label}-${process.pid}-${n++}.sock`);
  const statuses = async (at, requests) => {
    const out = [];
    for (const [target, options] of requests) out.push((await requestAt(at, target, options)).status);
    return out;
  };
  const xff = (v) => ({ headers: { 'X-Forwarded-For': v } });

  t(`${label}: on a Unix socket without unix trusted, every request is the one client unknown (limited, never skipped)`, async () => {
    const srv = await listen({ policy, store: redisUrl(), timeout: '10s', prefix: prefix(), trustedProxies: ['10.0.0.0/8'] }, socketPath());
    try {
      const got = await statuses(srv.at, [['/api/items', xff('198.51.100.1')], ['/api/items', xff('198.51.100.2')], ['/api/items', {}]]);
      assert.deepStrictEqual(got, [200, 429, 429]);
    } finally {
      await srv.close();
    }
  });

  t(`${label}: on a Unix socket with trustedProxies [unix], the forwarded header names the client`, async () => {
    const srv = await listen({ policy, store: redisUrl(), timeout: '10s', prefix: prefix(), trustedProxies: ['unix'] }, socketPath());
    try {
      const got = await statuses(srv.at, [
        ['/api/items', xff('198.51.100.1')],
        ['/api/items', xff('198.51.100.1')],
        ['/api/items', xff('198.51.100.2')],
      ]);
      assert.deepStrictEqual(got, [200, 429, 200]);
    } finally {
      await srv.close();
    }
  });

  t(`${label}: forwardedHeader 'forwarded': an X-Forwarded-For added by the client is ignored`, async () => {
    const srv = await listen({
      policy,
      store: redisUrl(),
      timeout: '10s', // decisions, not latency
      prefix: prefix(),
      trustedProxies: ['127.0.0.0/8'],
      forwardedHeader: 'forwarded',
    });
    try {
      const fwd = (xff) => ({ headers: { Forwarded: 'for=198.51.100.7', 'X-Forwarded-For': xff } });
      const got = await statuses(srv.at, [
        ['/api/items', fwd('203.0.113.1')],
        ['/api/items', fwd('203.0.113.2')],
        ['/api/items', { headers: { Forwarded: 'for=198.51.100.8' } }],
      ]);
      assert.deepStrictEqual(got, [200, 429, 200]);
    } finally {
      await srv.close();
    }
  });

  t(`${label}: a GET rule limits HEAD, and an absolute-form target matches its path`, async () => {
    const rules = (pattern) => ({
      store: redisUrl(),
      timeout: '10s', // decisions, not latency
      prefix: prefix(),
      headers: 'none',
      policies: { api: policy },
      rules: [{ match: { method: 'GET', path: pattern }, key: ['global'], policy: 'api' }],
    });
    let srv = await listen({ rules: rules('/api/*') });
    try {
      assert.deepStrictEqual(await statuses(srv.at, [['/api/items', { method: 'HEAD' }], ['/api/items', {}]]), [200, 429]);
    } finally {
      await srv.close();
    }
    srv = await listen({ rules: rules('/api/items') });
    try {
      const got = await statuses(srv.at, [['http://evil.example/api/items?x=1', {}], ['/api/items', {}]]);
      assert.deepStrictEqual(got, [200, 429]);
    } finally {
      await srv.close();
    }
  });
}

module.exports = { request, requestAt, sleep, scenarios, trustScenarios, TOO_MANY, UNAVAILABLE, resetWithin };
