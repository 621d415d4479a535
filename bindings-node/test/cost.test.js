'use strict';
// Cost from the request and reconciled after the response: `limiter.complete(token, status,
// { cost })` through the API, and Express with a handler that reports its actual cost on
// `res.locals.polylimitCost`, on memory and a real Redis. The exact numbers per algorithm are
// the vectors in tests/conformance/cost (played by conformance.test.js).
const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const { rateLimit } = require('../express');
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
const T0 = 1_700_000_000_000;

/** 10 000 tokens a minute per API key; a request reserves x-reserve tokens (1000 without it). */
function llmRules(store) {
  return {
    store,
    timeout: '10s',
    prefix: `node-cost-${process.pid}-${seq++}`,
    headers: 'legacy',
    policies: { llm: { algorithm: 'token_bucket', rate: '10000/min' } },
    rules: [
      {
        match: { path: '/v1/*' },
        key: ['header:x-api-key'],
        policy: 'llm',
        cost: 'header:x-reserve',
        cost_default: 1000,
        max_cost: 4000,
      },
    ],
  };
}

const chat = (headers = {}) => ({
  method: 'POST',
  path: '/v1/chat',
  peer: '203.0.113.7',
  headers: { 'x-api-key': 'k1', ...headers },
  now_ms: T0,
});

for (const store of ['memory', 'redis']) {
  const storeOf = () => (store === 'memory' ? 'memory' : redis.url);

  test(`complete with the actual cost on ${store}`, async () => {
    const limiter = Limiter.fromRules(llmRules(storeOf()));
    try {
      const first = await limiter.checkRequest(chat());
      assert.equal(first.status, null);
      await limiter.complete(first.completion, 200, { cost: 3400, nowMs: T0 }); // 2400 more charged
      const second = await limiter.checkRequest(chat());
      assert.equal(second.decisions[0].remaining, 5600);
      await limiter.complete(second.completion, 200, { cost: 200 }); // 800 given back
      assert.equal((await limiter.checkRequest(chat())).decisions[0].remaining, 5400);
      const bad = await limiter.checkRequest(chat({ 'x-reserve': 'lots' }));
      assert.equal(bad.status, 400);
      assert.equal(JSON.parse(bad.body).error, 'invalid_cost');
      const third = await limiter.checkRequest(chat());
      await assert.rejects(limiter.complete(third.completion, 200, { cost: -1 }), (e) => e instanceof ConfigError && e.field === 'cost');
    } finally {
      limiter.close();
    }
  });

  test(`express: the handler reports its actual cost on res.locals on ${store}`, async () => {
    const app = express();
    app.post('/v1/chat', rateLimit({ rules: llmRules(storeOf()) }), (req, res) => {
      res.locals.polylimitCost = Number(req.query.used ?? 0); // the tokens the model used
      res.json({ used: res.locals.polylimitCost });
    });
    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    const url = `http://127.0.0.1:${server.address().port}/v1/chat`;
    try {
      const post = (query, headers = {}) =>
        request(`${url}${query}`, { method: 'POST', headers: { 'x-api-key': 'k1', ...headers } });
      const first = await post('?used=3400');
      assert.equal(first.status, 200);
      assert.equal(first.header('x-ratelimit-remaining'), '9000');
      const second = await post('?used=1000');
      const remaining = Number(second.header('x-ratelimit-remaining'));
      assert.ok(remaining >= 5600 && remaining <= 5610, `3400 charged for the first: ${remaining}`);
      const bad = await post('', { 'x-reserve': '0' });
      assert.equal(bad.status, 400);
      assert.equal(JSON.parse(bad.body).field, 'header:x-reserve');
      assert.equal((await post('?used=4000', { 'x-reserve': '4000' })).status, 200);
      assert.equal((await post('', { 'x-reserve': '4000' })).status, 429, 'the debt is real');
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
}
