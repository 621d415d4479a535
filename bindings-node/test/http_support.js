'use strict';
// HTTP helpers shared by the Express and Fastify suites: a raw client that
// keeps header names and order, and the scenarios both frameworks must pass.
const http = require('node:http');
const assert = require('node:assert/strict');

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
 * The classic scenarios against `start(options) → { url, close }`, where the
 * server limits `/api/*` by client IP with burst 10 and rate 1/s.
 */
function scenarios(t, start, redisUrl, label) {
  const policy = { algorithm: 'token_bucket', rate: '1/s', burst: 10 };
  let n = 0;
  const prefix = () => `node-${process.pid}-${Date.now()}-${n++}`;

  t(`${label}: 15 sequential requests: 10 x 200 then 5 x 429, exact headers and body`, async () => {
    const app = await start({ policy, store: redisUrl(), prefix: prefix() });
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
      assert.deepStrictEqual(first.res.rate, [
        ['X-RateLimit-Limit', '10'],
        ['X-RateLimit-Remaining', '9'],
        ['X-RateLimit-Reset', resetWithin(first.res, first.before, first.after, 1000)],
        ['RateLimit-Policy', '"default";q=10;w=10'],
        ['RateLimit', '"default";r=9;t=1'],
      ]);
      const denied = results[10];
      assert.equal(denied.res.body, TOO_MANY);
      assert.equal(denied.res.header('content-type').split(';')[0], 'application/json');
      assert.deepStrictEqual(denied.res.rate, [
        ['X-RateLimit-Limit', '10'],
        ['X-RateLimit-Remaining', '0'],
        ['X-RateLimit-Reset', resetWithin(denied.res, results[0].before, denied.after, 10000)],
        ['RateLimit-Policy', '"default";q=10;w=10'],
        ['RateLimit', '"default";r=0;t=10'],
        ['Retry-After', '1'],
      ]);
    } finally {
      await app.close();
    }
  });

  t(`${label}: 50 concurrent requests: exactly 10 x 200`, async () => {
    const app = await start({ policy, store: redisUrl(), prefix: prefix() });
    try {
      const results = await Promise.all(Array.from({ length: 50 }, () => request(`${app.url}/api/items`)));
      const statuses = results.map((r) => r.status);
      assert.equal(statuses.filter((s) => s === 200).length, 10);
      assert.equal(statuses.filter((s) => s === 429).length, 40);
    } finally {
      await app.close();
    }
  });

  t(`${label}: drain, wait 2 s: 200 200 429`, async () => {
    const app = await start({ policy, store: redisUrl(), prefix: prefix() });
    try {
      for (let i = 0; i < 10; i++) assert.equal((await request(`${app.url}/api/items`)).status, 200);
      assert.equal((await request(`${app.url}/api/items`)).status, 429);
      await sleep(2000);
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await request(`${app.url}/api/items`)).status);
      assert.deepStrictEqual(statuses, [200, 200, 429]);
    } finally {
      await app.close();
    }
  });
}

module.exports = { request, sleep, scenarios, TOO_MANY, UNAVAILABLE, resetWithin };
