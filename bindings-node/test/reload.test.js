'use strict';
// Reload through Node (issue 38): `reload()` reads the rules file again and
// swaps the rules at once, keeping the state of unchanged windows; a bad file
// rejects with a ConfigError naming the field and keeps serving; `watch`
// picks up a changed file; an Express app sees a reload without a restart.
// On the memory store and a real Redis.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
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

const NOW = 1_700_000_040_000;
let seq = 0;
const prefix = () => `node-reload-${process.pid}-${seq++}`;
const rules = (rate) =>
  `policies:\n  api: { algorithm: fixed_window, rate: ${rate} }\nrules:\n  - { key: [ip], policy: api }\n`;

function rulesFile(text) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-reload-'));
  const file = path.join(dir, 'rules.yaml');
  fs.writeFileSync(file, text);
  return file;
}

for (const store of ['memory', 'redis']) {
  test(`${store}: reload keeps the window; a bad file keeps serving`, async () => {
    const file = rulesFile(rules('3/min'));
    const storeUrl = store === 'memory' ? 'memory' : redis.url;
    const limiter = new Limiter({ rulesFile: file, store: storeUrl, prefix: prefix(), timeout: '10s' });
    for (let i = 0; i < 3; i++) assert.equal((await limiter.check('k', { nowMs: NOW })).allowed, true);
    fs.writeFileSync(file, rules('5/min'));
    await limiter.reload();
    let d = await limiter.check('k', { nowMs: NOW });
    assert.deepStrictEqual([d.allowed, d.limit, d.remaining], [true, 5, 1]);
    fs.writeFileSync(file, rules('often'));
    await assert.rejects(limiter.reload(), (e) => e instanceof ConfigError && e.field === 'policies.api.rate');
    d = await limiter.check('k', { nowMs: NOW });
    assert.deepStrictEqual([d.allowed, d.limit, d.remaining], [true, 5, 0]);
    const text = limiter.metricsText();
    assert.match(text, /polylimit_config_reloads_total\{result="ok"\} 1/);
    assert.match(text, /polylimit_config_reloads_total\{result="error"\} 1/);
    limiter.close();
  });

  test(`${store}: an Express app sees a reload without a restart`, async () => {
    const file = rulesFile(rules('2/min'));
    const storeUrl = store === 'memory' ? 'memory' : redis.url;
    const limiter = new Limiter({ rulesFile: file, store: storeUrl, prefix: prefix(), timeout: '10s' });
    const app = express();
    app.use(rateLimit({ limiter }));
    app.get('/api/hello', (req, res) => res.send('ok'));
    const server = await new Promise((resolve) => {
      const s = app.listen(0, '127.0.0.1', () => resolve(s));
    });
    const url = `http://127.0.0.1:${server.address().port}/api/hello`;
    try {
      const before = [];
      for (let i = 0; i < 3; i++) before.push((await request(url)).status);
      assert.deepStrictEqual(before, [200, 200, 429]);
      fs.writeFileSync(file, rules('4/min'));
      await limiter.reload();
      const after = [];
      for (let i = 0; i < 3; i++) after.push(await request(url));
      assert.deepStrictEqual(after.map((r) => r.status), [200, 200, 429]);
      assert.equal(after[0].header('x-ratelimit-limit'), '4');
    } finally {
      await new Promise((resolve) => server.close(resolve));
      limiter.close();
    }
  });
}

test('watch picks up a changed file; watch needs a rules file', async () => {
  const file = rulesFile(rules('3/min'));
  const limiter = new Limiter({ rulesFile: file, watch: 50 });
  fs.writeFileSync(file, rules('7/min'));
  const deadline = Date.now() + 10_000;
  while ((await limiter.peek('k', { nowMs: NOW })).limit !== 7 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.equal((await limiter.peek('k', { nowMs: NOW })).limit, 7);
  limiter.close();
  assert.throws(
    () => new Limiter({ policy: { rate: '1/s' }, watch: true }),
    (e) => e instanceof ConfigError && e.field === 'watch',
  );
});
