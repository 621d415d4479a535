'use strict';
// Differential: express-rate-limit (the devDependency) and polylimit's Express
// middleware serve the same limit; for each standardHeaders draft, with and
// without the legacy headers, the same requests must get the same rate-limit
// header lines (names, values, order) and statuses.
//
// Timing: express-rate-limit's MemoryStore starts a window at a client's first
// hit; polylimit's fixed window is aligned to the epoch. express-rate-limit is
// given a store with epoch-aligned fixed windows (its store interface), so the
// two count the same windows. Both compute the reset seconds from their own
// clock reading: a run (a few ms) is compared when it stayed inside one
// wall-clock second, and run again (fresh state) in the rare case that it did
// not; nothing waits on the clock.
const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const erl = require('express-rate-limit');
const fs = require('node:fs');
const path = require('node:path');

// Its package.json is not exported: read it next to the resolved entry.
const erlVersion = JSON.parse(fs.readFileSync(
  path.join(path.dirname(require.resolve('express-rate-limit')), '..', 'package.json'), 'utf8')).version;
const { rateLimit } = require('../express');
const { request } = require('./http_support');

let seq = 0;
const prefix = () => `node-erl-${process.pid}-${seq++}`;

/** express-rate-limit's store interface, with windows aligned to the epoch like polylimit's fixed_window. */
class AlignedStore {
  constructor() {
    this.hits = new Map();
    this.localKeys = true;
  }
  init(options) {
    this.windowMs = options.windowMs;
  }
  async increment(key) {
    const now = Date.now();
    const start = now - (now % this.windowMs);
    const entry = this.hits.get(key);
    const hits = entry && entry.start === start ? entry.hits + 1 : 1;
    this.hits.set(key, { start, hits });
    return { totalHits: hits, resetTime: new Date(start + this.windowMs) };
  }
  async decrement(key) {
    const entry = this.hits.get(key);
    if (entry && entry.hits > 0) entry.hits -= 1;
  }
  async resetKey(key) {
    this.hits.delete(key);
  }
}

async function listen(app) {
  app.get('/api/x', (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return { url: `http://127.0.0.1:${server.address().port}/api/x`, close: () => new Promise((r) => server.close(r)) };
}

/**
 * Plays `n` requests (with `headers`) against both apps, alternating; resolves
 * to the pairs of answers, or null when the run crossed a second.
 */
async function play(erlApp, ourApp, n, headers = {}) {
  const started = Date.now();
  const pairs = [];
  for (let i = 0; i < n; i += 1) {
    const theirs = await request(erlApp.url, { headers });
    const ours = await request(ourApp.url, { headers });
    pairs.push([theirs, ours]);
  }
  return Math.floor(Date.now() / 1000) === Math.floor(started / 1000) ? pairs : null;
}

/** Builds both apps by `make()`, plays, and retries on a second boundary; returns the pairs. */
async function differential(make, n, headers) {
  for (let attempt = 0; attempt < 5; attempt += 1) {
    const [erlApp, ourApp] = await make();
    try {
      const pairs = await play(erlApp, ourApp, n, headers);
      if (pairs) return pairs;
    } finally {
      await erlApp.close();
      await ourApp.close();
    }
  }
  throw new Error('every run straddled a second boundary');
}

for (const mode of ['draft-6', 'draft-7', 'draft-8']) {
  for (const legacyHeaders of [false, true]) {
    for (const keyed of [false, true]) {
      const name = `express-rate-limit ${erlVersion} standardHeaders: '${mode}', legacyHeaders: ${legacyHeaders}` +
        `${keyed ? ', keyGenerator' : ''}: the same header lines`;
      test(name, async () => {
        const keyGenerator = keyed ? (req) => req.get('x-user') : undefined;
        const make = async () => [
          await listen(express().use(erl.rateLimit({
            windowMs: 60_000, limit: 3, standardHeaders: mode, legacyHeaders,
            store: new AlignedStore(), ...(keyed ? { keyGenerator } : {}), validate: false,
          }))),
          await listen(express().use(rateLimit({
            windowMs: 60_000, limit: 3, standardHeaders: mode, legacyHeaders, prefix: prefix(),
            ...(keyed ? { keyGenerator } : {}),
          }))),
        ];
        const pairs = await differential(make, 5, keyed ? { 'x-user': 'user-42' } : {});
        for (const [i, [theirs, ours]] of pairs.entries()) {
          assert.equal(ours.status, theirs.status, `request ${i}: status`);
          assert.deepStrictEqual(ours.rate, theirs.rate, `request ${i}: header lines`);
        }
        assert.deepStrictEqual(pairs.map(([t]) => t.status), [200, 200, 200, 429, 429]);
        // The lines really are the draft's (not both empty).
        const first = pairs[0][1].rate.map(([n]) => n);
        assert.ok(first.length >= (mode === 'draft-6' ? 4 : 2) + (legacyHeaders ? 3 : 0), first.join());
      });
    }
  }
}

test(`express-rate-limit ${erlVersion} draft-8, two stacked limiters: one field line per header, items in order`, async () => {
  const make = async () => [
    await listen(express().use(
      erl.rateLimit({ windowMs: 1000, limit: 5, standardHeaders: 'draft-8', legacyHeaders: false,
        identifier: 'per_second', store: new AlignedStore(), validate: false }),
      erl.rateLimit({ windowMs: 3_600_000, limit: 100, standardHeaders: 'draft-8', legacyHeaders: false,
        identifier: 'hourly', store: new AlignedStore(), validate: false }),
    )),
    await listen(express().use(rateLimit({
      policies: [
        { name: 'per_second', algorithm: 'fixed_window', rate: '5/s' },
        { name: 'hourly', algorithm: 'fixed_window', rate: '100/h' },
      ],
      headers: 'draft-8', prefix: prefix(),
    }))),
  ];
  const pairs = await differential(make, 3);
  for (const [i, [theirs, ours]] of pairs.entries()) {
    assert.equal(ours.status, 200);
    // express-rate-limit appends a line per limiter; polylimit writes one line
    // with the items comma-separated: the same field value (RFC 9110 §5.3).
    for (const field of ['ratelimit', 'ratelimit-policy']) {
      const lines = theirs.rate.filter(([n]) => n.toLowerCase() === field).map(([, v]) => v);
      assert.equal(lines.length, 2, `request ${i}: ${field}`);
      assert.equal(ours.header(field), lines.join(', '), `request ${i}: ${field}`);
    }
  }
  assert.match(pairs[0][1].header('ratelimit'), /^"per_second"; r=4; t=1, "hourly"; r=99; t=\d+$/);
});
