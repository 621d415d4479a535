'use strict';
// polylimit/client: the Retry-After arithmetic with an injected clock and
// sleep (no waiting), then for real against polylimit's Express middleware on
// loopback (a 1 s window).
const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const fs = require('node:fs');
const path = require('node:path');
const { retryFetch, retryWait, parseRetryAfter } = require('../client');
const { rateLimit } = require('../express');

const T0 = 1_700_000_000_000;

/** A wall clock only the injected sleep moves. */
function clock() {
  const c = { now: T0, slept: [] };
  c.options = {
    now: () => c.now,
    sleep: async (ms) => {
      c.slept.push(ms);
      c.now += ms;
    },
    random: () => 0.5,
    jitter: 0,
  };
  return c;
}

/** A fetch answering each call with the next [status, headers] (the last one again at the end). */
function scripted(...answers) {
  const seen = [];
  const fetchFn = async (input, init) => {
    seen.push({ input, body: init?.body });
    const [status, headers] = answers[Math.min(seen.length - 1, answers.length - 1)];
    return new Response('{}', { status, headers });
  };
  return { fetchFn, seen };
}

const httpDate = (ms) => new Date(ms).toUTCString();

test('client: parseRetryAfter reads seconds and every HTTP-date form, nothing else', () => {
  assert.equal(parseRetryAfter('0', T0), 0);
  assert.equal(parseRetryAfter(' 7 ', T0), 7000);
  assert.equal(parseRetryAfter(httpDate(T0 + 30_000), T0), 30_000); // IMF-fixdate
  const rfc850 = Date.UTC(1994, 10, 6, 8, 49, 37);
  assert.equal(parseRetryAfter('Sunday, 06-Nov-94 08:49:37 GMT', rfc850 - 5000), 5000);
  assert.equal(parseRetryAfter('Sun Nov  6 08:49:37 1994', rfc850 - 5000), 5000); // asctime is GMT
  assert.equal(parseRetryAfter(httpDate(T0 - 30_000), T0), 0);
  for (const garbage of [null, undefined, '', '-1', '1.5', 'soon', '+3', '2024-01-01', 'Sun, 06 Nov 1994']) {
    assert.equal(parseRetryAfter(garbage, T0), null, String(garbage));
  }
});

test('client: the shared vectors (tests/conformance/client/retry_after.json)', () => {
  const file = path.join(__dirname, '..', '..', 'tests', 'conformance', 'client', 'retry_after.json');
  const v = JSON.parse(fs.readFileSync(file, 'utf8'));
  for (const c of v.parse) assert.equal(parseRetryAfter(c.value, v.now_ms), c.wait_ms, JSON.stringify(c.value));
  for (const c of v.decide) {
    const o = c.options;
    const options = { maxRetries: o.max_retries, maxWaitMs: o.max_wait_ms, budgetMs: o.budget_ms, jitter: o.jitter,
      statuses: o.statuses, retryNonIdempotent: o.retry_non_idempotent, now: () => v.now_ms, random: () => c.random };
    const got = retryWait(options, { method: c.method ?? 'GET', status: c.status, retryAfter: c.retry_after, retries: c.retries,
      startedMs: v.now_ms - c.elapsed_ms });
    if (c.wait_ms === null) assert.equal(got, null, c.name);
    else assert.ok(got !== null && Math.abs(got - c.wait_ms) < 1e-6, `${c.name}: ${got}`);
  }
});

test('client: bad options throw the core\'s error (tests/conformance/client/retry_options.json)', () => {
  const file = path.join(__dirname, '..', '..', 'tests', 'conformance', 'client', 'retry_options.json');
  const cases = JSON.parse(fs.readFileSync(file, 'utf8')).invalid.filter((c) => c.naming === 'camel');
  assert.ok(cases.length > 0);
  for (const c of cases) {
    assert.throws(() => retryFetch(async () => {}, c.options), (e) => e instanceof RangeError && e.message === c.error,
      c.error);
    assert.throws(() => retryWait(c.options, { status: 429, retryAfter: '1' }), { message: c.error });
  }
  assert.throws(() => retryFetch({ budgetMs: 'x' }), { name: 'RangeError', message: 'budgetMs: "x" is not a number' });
});

test('client: waits Retry-After plus jitter, then returns the success', async () => {
  const c = clock();
  const { fetchFn, seen } = scripted([429, { 'Retry-After': '2' }], [200, {}]);
  const res = await retryFetch(fetchFn, { ...c.options, jitter: 0.2 })('http://api/x');
  assert.equal(res.status, 200);
  assert.equal(seen.length, 2);
  assert.deepStrictEqual(c.slept, [2000 * (1 + 0.2 * 0.5)]);
});

test('client: an HTTP-date, and 503', async () => {
  const c = clock();
  const { fetchFn } = scripted([503, { 'Retry-After': httpDate(T0 + 3000) }], [200, {}]);
  assert.equal((await retryFetch(fetchFn, c.options)('http://api/x')).status, 200);
  assert.deepStrictEqual(c.slept, [3000]);
});

test('client: gives up at once without a readable Retry-After, on other statuses, over maxWaitMs', async () => {
  for (const answer of [[429, {}], [429, { 'Retry-After': 'later' }], [500, { 'Retry-After': '1' }],
    [429, { 'Retry-After': '61' }]]) {
    const c = clock();
    const { fetchFn, seen } = scripted(answer, [200, {}]);
    assert.equal((await retryFetch(fetchFn, c.options)('http://api/x')).status, answer[0]);
    assert.deepStrictEqual([seen.length, c.slept], [1, []], JSON.stringify(answer));
  }
});

test('client: jitter never goes past maxWaitMs', async () => {
  const c = clock();
  const { fetchFn } = scripted([429, { 'Retry-After': '10' }], [200, {}]);
  await retryFetch(fetchFn, { ...c.options, jitter: 1, random: () => 0.9, maxWaitMs: 12_000 })('http://api/x');
  assert.deepStrictEqual(c.slept, [12_000]);
});

test('client: maxRetries, then the budget from the first attempt', async () => {
  let c = clock();
  let s = scripted([429, { 'Retry-After': '1' }]);
  assert.equal((await retryFetch(s.fetchFn, { ...c.options, maxRetries: 2 })('http://api/x')).status, 429);
  assert.deepStrictEqual([s.seen.length, c.slept], [3, [1000, 1000]]);

  c = clock();
  s = scripted([429, { 'Retry-After': '4' }]);
  const res = await retryFetch(s.fetchFn, { ...c.options, maxRetries: 10, budgetMs: 10_000 })('http://api/x');
  assert.equal(res.status, 429);
  assert.deepStrictEqual([s.seen.length, c.slept], [3, [4000, 4000]]); // a third wait would end at 12 s
});

test('client: string bodies and Requests are sent again, streams are not', async () => {
  const c = clock();
  let s = scripted([429, { 'Retry-After': '1' }], [200, {}]);
  assert.equal((await retryFetch(s.fetchFn, c.options)('http://api/x', { method: 'POST', body: 'payload' })).status, 200);
  assert.deepStrictEqual(s.seen.map((x) => x.body), ['payload', 'payload']);

  s = scripted([429, { 'Retry-After': '1' }], [200, {}]);
  const req = new Request('http://api/x', { method: 'POST', body: 'payload' });
  assert.equal((await retryFetch(s.fetchFn, c.options)(req)).status, 200);
  assert.deepStrictEqual(await Promise.all(s.seen.map((x) => x.input.text())), ['payload', 'payload']);

  s = scripted([429, { 'Retry-After': '1' }], [200, {}]);
  const stream = new ReadableStream({ start: (ctl) => { ctl.enqueue(new TextEncoder().encode('once')); ctl.close(); } });
  const res = await retryFetch(s.fetchFn, c.options)('http://api/x', { method: 'POST', body: stream, duplex: 'half' });
  assert.equal(res.status, 429);
  assert.equal(s.seen.length, 1);
});

test('client: bad options name the option', () => {
  assert.throws(() => retryFetch({ jitter: 2 }), /jitter/);
  assert.throws(() => retryFetch(async () => {}, { maxRetries: -1 }), /maxRetries/);
  assert.throws(() => retryFetch({ budgetMs: 'x' }), /budgetMs/);
});

test('client: the AbortSignal ends the wait', async () => {
  const { fetchFn, seen } = scripted([429, { 'Retry-After': '50' }], [200, {}]);
  const controller = new AbortController();
  const started = Date.now();
  const pending = retryFetch(fetchFn)('http://api/x', { signal: controller.signal }); // the real timer
  while (seen.length === 0) await new Promise((r) => setImmediate(r));
  controller.abort(new Error('gave up'));
  await assert.rejects(pending, /gave up/);
  assert.ok(Date.now() - started < 1000);
  assert.equal(seen.length, 1);
});

test('client: ESM entry and package export', async () => {
  const esm = await import('polylimit/client');
  assert.equal(esm.retryFetch, retryFetch);
  assert.equal(esm.default, retryFetch);
  assert.equal(require('polylimit/client').retryFetch, retryFetch);
});

test('client: a real 429 from polylimit (1 per 1 s window) is waited out; a budget under the wait returns it', async () => {
  // The wall clock is what is tested here.
  const app = express();
  app.use(rateLimit({ policy: { algorithm: 'fixed_window', rate: '1/s' }, prefix: `node-client-${process.pid}` }));
  app.get('/api/x', (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${server.address().port}/api/x`;
  try {
    const retrying = retryFetch({ jitter: 0, maxRetries: 2 });
    assert.equal((await retrying(url)).status, 200);
    let started = Date.now();
    const res = await retrying(url);
    const elapsed = Date.now() - started;
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'ok');
    assert.ok(elapsed > 300 && elapsed < 2500, `${elapsed} ms`);

    // Budget 0.5 s < Retry-After 1 s. Drain the window first; try again in the
    // rare case that the window turned between the drain and the request.
    const budgeted = retryFetch({ jitter: 0, budgetMs: 500 });
    let answer;
    for (let attempt = 0; attempt < 3; attempt += 1) {
      while ((await fetch(url)).status !== 429);
      started = Date.now();
      answer = await budgeted(url);
      if (answer.status === 429) break;
    }
    assert.equal(answer.status, 429);
    assert.equal(answer.headers.get('retry-after'), '1');
    assert.ok(Date.now() - started < 1000); // at once: short of the 1 s Retry-After it would wait out
  } finally {
    await new Promise((r) => server.close(r));
  }
});
