'use strict';
// The public API: Limiter, decisions, errors, reset, metrics, CircuitBreaker,
// ESM and the TypeScript declarations.
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const polylimit = require('..');
const { RedisServer } = require('./support');

const { Limiter, CircuitBreaker, ConfigError, ClosedError, PolylimitError, CircuitOpenError } = polylimit;

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

test('check returns the decision fields', async () => {
  const limiter = new Limiter({ policy: { algorithm: 'gcra', rate: '10/s', burst: 2 } });
  assert.deepStrictEqual(await limiter.check('k', { nowMs: 1000 }), {
    allowed: true,
    limit: 2,
    remaining: 1,
    resetAfterMs: 100,
    retryAfterMs: null,
    delayMs: 0,
    source: 'store',
  });
  await limiter.check('k', { nowMs: 1000 });
  const denied = await limiter.check('k', { nowMs: 1000 });
  assert.equal(denied.allowed, false);
  assert.equal(denied.retryAfterMs, 100);
  const never = await limiter.check('k', { cost: 3, nowMs: 1000 });
  assert.equal(never.allowed, false);
  assert.equal(never.retryAfterMs, null);
});

test('config errors are ConfigError with code, field and value', () => {
  assert.throws(
    () => new Limiter({ policy: { rate: 'ten/s' } }),
    (e) =>
      e instanceof ConfigError &&
      e instanceof PolylimitError &&
      e instanceof Error &&
      e.code === 'POLYLIMIT_CONFIG' &&
      e.field === 'policy.rate' &&
      e.value === '"ten/s"' &&
      e.message.startsWith('policy.rate: "ten/s" is not'),
  );
  assert.throws(() => new Limiter({ policy: { rate: '1/s' }, bogus: 1 }), (e) => e.field === 'bogus');
  assert.throws(() => new Limiter({ policy: { rate: '1/s' }, store: 'postgres://x' }), (e) => e.field === 'store');
  assert.throws(() => new Limiter(null), (e) => e instanceof ConfigError && e.field === 'options');
  assert.throws(
    () => new Limiter({ policy: { rate: '1/s' }, connectTimeout: 0 }),
    (e) => e.field === 'connectTimeout' && e.value === '"0ms"',
  );
  assert.ok(new Limiter({ policy: { rate: '1/s' }, connectTimeout: 250 }));
  assert.ok(new Limiter({ policy: { rate: '1/s' }, connectTimeout: '1s' }));
  assert.throws(() => Limiter.fromFile('/nonexistent/polylimit.yaml'), (e) => e.code === 'POLYLIMIT_CONFIG' && e.field === 'rulesFile');
});

test('the addon throws Errors with code, field and value as properties and a plain message', () => {
  const native = require('../native');
  assert.throws(
    () => new native.NativeLimiter({ policy: { rate: 'ten/s' } }),
    (e) =>
      e instanceof Error &&
      e.code === 'POLYLIMIT_CONFIG' &&
      e.field === 'policy.rate' &&
      e.value === '"ten/s"' &&
      !e.message.includes('{') &&
      e.message.startsWith('policy.rate: "ten/s" is not'),
  );
  for (const bad of [{ policy: { rate: '1/s' }, maxKeys: -1 }, { rulesFile: '/nonexistent/x.yaml' }, { rules: 'a: [' }]) {
    assert.throws(
      () => polylimit.effectiveConfig(bad),
      (e) => e instanceof ConfigError && e.code === 'POLYLIMIT_CONFIG' && typeof e.field === 'string' && typeof e.value === 'string' && !e.message.includes('{'),
    );
  }
});

test('one options list: rules text or object, rulesFile, and options that override the document', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-'));
  const file = path.join(dir, 'rules.yaml');
  const text = 'prefix: doc\npolicies:\n  api: { rate: 2/s }\nrules:\n  - { key: [global], policy: api }\n';
  fs.writeFileSync(file, text);
  try {
    assert.equal(polylimit.effectiveConfig({ rulesFile: file }).prefix, 'doc');
    assert.equal(polylimit.effectiveConfig({ rules: text, prefix: 'mine' }).prefix, 'mine');
    const object = { policies: { api: { rate: '2/s' } }, rules: [{ key: ['global'], policy: 'api' }] };
    assert.equal(polylimit.effectiveConfig({ rules: object, maxKeys: 7 }).max_keys, 7);
    for (const limiter of [Limiter.fromFile(file, { prefix: 'x' }), Limiter.fromRules(object), new Limiter({ rules: text })]) {
      const req = { path: '/', peer: '192.0.2.1', nowMs: 1700000000000 };
      await limiter.checkRequest(req);
      await limiter.checkRequest(req);
      assert.equal((await limiter.checkRequest(req)).status, 429);
    }
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
});

test('bad check arguments reject with ConfigError', async () => {
  const limiter = new Limiter({ policy: { rate: '1/s' } });
  await assert.rejects(limiter.check('k', { cost: 0 }), (e) => e instanceof ConfigError && e.field === 'cost');
  await assert.rejects(limiter.check('k', { cost: 1.5 }), (e) => e.field === 'cost');
  for (const cost of [-1, '2', true, NaN, Infinity, 2 ** 40, [1], { n: 1 }]) {
    await assert.rejects(limiter.check('k', { cost }), (e) => e instanceof ConfigError && e.field === 'cost', String(cost));
  }
  assert.equal((await limiter.check('whole', { cost: 1, nowMs: 1000 })).allowed, true);
  const rules = Limiter.fromRules('policies:\n  api: { rate: 1/s }\nrules:\n  - { policy: api }\n');
  for (const cost of [-1, 1.5, '2', true]) {
    await assert.rejects(
      rules.checkRequest({ path: '/', peer: '203.0.113.7', cost }),
      (e) => e instanceof ConfigError && e.field === 'cost',
      String(cost),
    );
  }
  await assert.rejects(limiter.check('k', { nowMs: 0.5 }), (e) => e.field === 'nowMs');
  await assert.rejects(limiter.check(42), (e) => e.field === 'key');
});

test('a key given twice in a rules file and control characters in names are ConfigErrors', () => {
  assert.throws(
    () => Limiter.fromRules('policies:\n  api: { rate: 1/s, burst: 5, burst: 50 }\n'),
    (e) => e instanceof ConfigError && e.field === 'policies.api.burst' && /twice/.test(e.message),
  );
  assert.throws(
    () => new Limiter({ policy: { rate: '1/s', name: 'api\r\nSet-Cookie: a=b' } }),
    (e) => e instanceof ConfigError && e.field === 'policy.name',
  );
});

test('rules variables expand one value at a time, in text and in objects', async () => {
  process.env.POLYLIMIT_TEST_BURST = '4';
  process.env.POLYLIMIT_TEST_PROXY = '10.0.0.1", "0.0.0.0/0';
  const flow = 'policies: { api: { rate: 1/s, burst: ${POLYLIMIT_TEST_BURST:-3} } }\nrules: [{ policy: api }]\n';
  const object = { policies: { api: { rate: '1/s', burst: '${POLYLIMIT_TEST_BURST:-3}' } }, rules: [{ policy: 'api' }] };
  for (const rules of [flow, object]) {
    assert.equal((await Limiter.fromRules(rules).check('k', { nowMs: 1000 })).limit, 4);
  }
  // A value from the environment is one string: it cannot add structure.
  assert.throws(
    () => Limiter.fromRules({ ...object, trusted_proxies: ['${POLYLIMIT_TEST_PROXY}'] }),
    (e) => e instanceof ConfigError && e.field === 'trusted_proxies[0]',
  );
});

test('a closed limiter rejects with ClosedError', async () => {
  const limiter = new Limiter({ policy: { rate: '1/s' } });
  assert.equal(limiter.closed, false);
  limiter.close();
  assert.equal(limiter.closed, true);
  await assert.rejects(limiter.check('k'), (e) => e instanceof ClosedError && e.code === 'POLYLIMIT_CLOSED');
});

test('a reset that fails on the runtime rejects with the typed error and a plain message', async () => {
  const limiter = new Limiter({ policy: { rate: '1/s' } });
  limiter.close();
  await assert.rejects(
    limiter.reset('k'),
    (e) => e instanceof ClosedError && e.code === 'POLYLIMIT_CLOSED' && !e.message.includes('{'),
  );
});

for (const store of ['memory', 'redis']) {
  test(`reset forgets a key (${store})`, async () => {
    const limiter = new Limiter({
      policy: { rate: '1/min' },
      store: store === 'memory' ? 'memory' : redis.url,
      timeout: '10s', // decisions, not latency
      prefix: `node-reset-${process.pid}`,
    });
    assert.equal((await limiter.check('user:1')).allowed, true);
    assert.equal((await limiter.check('user:1')).allowed, false);
    await limiter.reset('user:1');
    assert.equal((await limiter.check('user:1')).allowed, true);
    limiter.close();
  });
}

// The breaker's clock is the wall clock and its cooldown ending is part of what
// is tested: the cooldown is the shortest that is safe (50 ms), slept just past.
test('redis down: local fallback, then back to the store', async () => {
  const down = await RedisServer.start();
  const limiter = new Limiter({
    policy: { rate: '100/s' },
    store: down.url,
    prefix: `node-fallback-${process.pid}`,
    timeout: '10s', // the first check is the store's; a killed Redis refuses at once
    failureThreshold: 2,
    cooldown: 50,
    halfOpenProbes: 1,
  });
  assert.equal((await limiter.check('k')).source, 'store');
  await down.kill();
  const d = await limiter.check('k');
  assert.deepStrictEqual([d.allowed, d.source], [true, 'local']);
  await limiter.check('k');
  assert.equal(limiter.breakerState, 'open');
  await down.spawn();
  await new Promise((r) => setTimeout(r, 60));
  let source;
  for (let i = 0; i < 100 && source !== 'store'; i++) {
    source = (await limiter.check('k')).source;
    if (source !== 'store') await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(source, 'store');
  await down.kill();
});

test('metricsText is Prometheus text with the request counter', async () => {
  const limiter = new Limiter({ policy: { rate: '1/min', name: 'api' } });
  await limiter.check('a');
  await limiter.check('a');
  const text = limiter.metricsText();
  assert.match(text, /# TYPE polylimit_requests_total counter/);
  assert.match(text, /polylimit_requests_total\{[^}]*policy="api"[^}]*\} 1/);
});

test('fromFile and fromRules build a rules limiter for checkRequest', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-'));
  const file = path.join(dir, 'rules.yaml');
  fs.writeFileSync(file, 'policies:\n  api: { rate: 1/s, burst: 1 }\nrules:\n  - key: [ip]\n    policy: api\n');
  try {
    for (const limiter of [Limiter.fromFile(file), Limiter.fromRules(fs.readFileSync(file, 'utf8'))]) {
      const req = { path: '/x', peer: '192.0.2.1', nowMs: 1700000000000 };
      assert.equal((await limiter.checkRequest(req)).status, null);
      const denied = await limiter.checkRequest(req);
      assert.equal(denied.status, 429);
      assert.equal(denied.decisions[0].policy, 'api');
      assert.equal(denied.decisions[0].source, 'store');
    }
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
});

test('CircuitBreaker opens, falls back and closes after probes', async () => {
  const breaker = new CircuitBreaker(2, 50, 1);
  assert.equal(breaker.state, 'closed');
  assert.equal(await breaker.call(() => 'value'), 'value');
  const boom = () => {
    throw new Error('down');
  };
  assert.equal(await breaker.call(boom, (e) => `fallback: ${e.message}`), 'fallback: down');
  await assert.rejects(breaker.call(async () => boom()), /down/);
  assert.equal(breaker.state, 'open');
  let called = false;
  const fb = await breaker.call(
    () => (called = true),
    (e) => e,
  );
  assert.equal(called, false);
  assert.ok(fb instanceof CircuitOpenError && fb.code === 'POLYLIMIT_CIRCUIT_OPEN');
  await assert.rejects(breaker.call(() => 1), CircuitOpenError);
  // The cooldown ending is what is tested: 50 ms of wall clock, slept just past.
  await new Promise((r) => setTimeout(r, 70));
  assert.equal(breaker.state, 'half_open');
  assert.equal(await breaker.call(async () => 'probe'), 'probe');
  assert.equal(breaker.state, 'closed');
  assert.equal(new CircuitBreaker({ threshold: 1, cooldown: '30s' }).state, 'closed');
  assert.throws(() => new CircuitBreaker(0), (e) => e instanceof ConfigError && e.field === 'threshold');
  assert.throws(() => new CircuitBreaker(1, 'soon'), (e) => e.field === 'cooldown');
});

test('CircuitBreaker counts a throw of any value as a failure', async () => {
  for (const thrown of [undefined, null, 'down', 0, { code: 'E' }]) {
    const breaker = new CircuitBreaker(1, '30s', 1);
    const seen = await breaker.call(
      () => {
        throw thrown;
      },
      (e) => ({ e }),
    );
    assert.deepEqual(seen, { e: thrown });
    assert.equal(breaker.state, 'open', `after throwing ${String(thrown)}`);
    const rejected = new CircuitBreaker(1, '30s', 1);
    await assert.rejects(rejected.call(() => Promise.reject(thrown)), (e) => e === thrown);
    assert.equal(rejected.state, 'open', `after rejecting with ${String(thrown)}`);
  }
});

test('an unreachable limiter is garbage-collected, and close() releases it at once', () => {
  const out = execFileSync(
    process.execPath,
    [
      '--expose-gc',
      '-e',
      `const { Limiter } = require(${JSON.stringify(path.resolve(__dirname, '..'))});
       let collected = 0;
       const registry = new FinalizationRegistry(() => collected++);
       async function one(i) {
         const limiter = new Limiter({ policy: { rate: '1/s' } });
         registry.register(limiter, i);
         await limiter.check('k');
         if (i % 2) limiter.close();
       }
       (async () => {
         for (let i = 0; i < 50; i++) await one(i);
         await new Promise((r) => setTimeout(r, 10));
         for (let i = 0; i < 20 && collected < 50; i++) {
           await new Promise((r) => setTimeout(r, 10));
           global.gc();
         }
         console.log(collected);
       })();`,
    ],
    { encoding: 'utf8', timeout: 20000 },
  );
  assert.equal(out.trim(), '50');
});

test('ESM import gives the same objects', () => {
  const out = execFileSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import def, { Limiter, rateLimit, polylimitFastify, ConfigError } from ${JSON.stringify(path.resolve(__dirname, '..', 'index.mjs'))};
       import { createRequire } from 'node:module';
       const cjs = createRequire(import.meta.url)(${JSON.stringify(path.resolve(__dirname, '..'))});
       const d = await new Limiter({ policy: { rate: '1/s' } }).check('k');
       console.log(JSON.stringify([Limiter === cjs.Limiter, def === cjs, rateLimit === cjs.rateLimit,
         polylimitFastify === cjs.polylimitFastify, ConfigError === cjs.ConfigError, d.allowed]));`,
    ],
    // A limiter must let the process exit once its checks are done.
    { encoding: 'utf8', timeout: 10000 },
  );
  assert.equal(out.trim(), '[true,true,true,true,true,true]');
});

test('the package name resolves from CommonJS and ESM (exports map)', () => {
  const root = path.resolve(__dirname, '..');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'polylimit-pkg-'));
  try {
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(root, path.join(dir, 'node_modules', 'polylimit'));
    const cjs = execFileSync(process.execPath, ['-e', "console.log(typeof require('polylimit').Limiter, typeof require('polylimit/express').rateLimit)"], { cwd: dir, encoding: 'utf8', timeout: 10000 });
    assert.equal(cjs.trim(), 'function function');
    const esm = execFileSync(process.execPath, ['--input-type=module', '-e', "import { Limiter } from 'polylimit'; import f from 'polylimit/fastify'; console.log(typeof Limiter, typeof f)"], { cwd: dir, encoding: 'utf8', timeout: 10000 });
    assert.equal(esm.trim(), 'function function');
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
});

test('index.d.ts covers every public name and type-checks', () => {
  const root = path.resolve(__dirname, '..');
  const cjsNames = Object.keys(polylimit).sort();
  const dts = fs.readFileSync(path.join(root, 'index.d.ts'), 'utf8');
  for (const name of cjsNames) {
    assert.match(dts, new RegExp(`export (declare )?(class|function|const) ${name}\\b`), `index.d.ts lacks ${name}`);
  }
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  execFileSync(process.execPath, [tsc, '-p', path.join(root, 'test', 'types')], { encoding: 'utf8', stdio: 'pipe' });
});
