'use strict';
// Plays every vector in $POLYLIMIT_VECTORS (default tests/conformance) and
// $POLYLIMIT_VECTORS/http, cost and limits through the public API, on memory, a real Redis and a real Redis Cluster.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Limiter } = require('..');
const { RedisServer, Topology, vectorFiles, strictFields } = require('./support');

const CASE = ['name', 'description', 'policy', 'steps'];
const STEP = ['now_ms', 'key', 'cost', 'peek', 'expect'];
const EXPECT = ['allowed', 'remaining', 'reset_after_ms', 'retry_after_ms', 'limit', 'delay_ms', 'source'];
const HTTP_CASE = ['name', 'description', 'rules', 'requests'];
const HTTP_STEP = ['request', 'peek', 'expect', 'complete', 'actual_cost', 'at_ms'];
// A step that completes an earlier request (`of`: its index) with a status.
const HTTP_LATER = ['complete', 'of', 'actual_cost', 'at_ms'];
const HTTP_EXPECT = ['status', 'headers', 'body', 'delay_ms'];
// limits/: steps with no request that set, read or remove a policy-wide limit or
// set a per-key override, with what each returns (tests/conformance/limits/README.md).
const LIMIT_STEPS = {
  set_limit: [['policy', 'rate', 'burst', 'ttl_ms', 'now_ms'], 'expect_limit'],
  get_limit: [['policy'], 'expect_limit'],
  remove_limit: [['policy'], 'expect_removed'],
  set_override: [['key', 'policy', 'rate', 'burst', 'ttl_ms', 'now_ms'], 'expect_override'],
};

// A limit or an override as the vectors write it (snake_case, expires_at_ms null: none).
const asVector = (v) => {
  if (v === null || typeof v !== 'object') return v;
  const { expiresAtMs, ...rest } = v;
  return { ...rest, expires_at_ms: expiresAtMs ?? null };
};

/** Plays a limits/ step: a failure text, or undefined when it returned what it expects. */
async function playLimitStep(limiter, where, step) {
  const kinds = Object.keys(LIMIT_STEPS).filter((k) => k in step);
  assert.equal(kinds.length, 1, `${where}: more than one step kind ${kinds}`);
  const [kind] = kinds;
  const [fields, expectField] = LIMIT_STEPS[kind];
  strictFields(step, [kind, expectField], [kind, expectField], where);
  const args = step[kind];
  strictFields(args, fields, fields.filter((f) => f === 'key' || f === 'rate'), `${where} ${kind}`);
  const spec = { policy: args.policy, rate: args.rate, burst: args.burst, ttl: args.ttl_ms, nowMs: args.now_ms };
  let got;
  if (kind === 'set_limit') got = await limiter.setLimit(spec);
  else if (kind === 'get_limit') got = await limiter.getLimit({ policy: args.policy }); // at the store's clock
  else if (kind === 'remove_limit') got = await limiter.removeLimit({ policy: args.policy });
  else got = await limiter.setOverride(args.key, spec);
  try {
    assert.deepStrictEqual(asVector(got), step[expectField]);
  } catch {
    return `${where}: ${kind}: expected ${JSON.stringify(step[expectField])}, got ${JSON.stringify(got)}`;
  }
  return undefined;
}

async function playDecisions(store, files) {
  const failures = [];
  let steps = 0;
  for (const [fi, [file, doc]] of files.entries()) {
    strictFields(doc, ['cases'], ['cases'], file);
    assert.ok(doc.cases.length > 0, `${file}: no cases`);
    const names = new Set();
    for (const [ci, c] of doc.cases.entries()) {
      strictFields(c, CASE, ['name', 'policy', 'steps'], `${file}: case ${ci}`);
      assert.ok(!names.has(c.name), `${file}: duplicate case name ${c.name}`);
      names.add(c.name);
      assert.ok(c.steps.length > 0, `${file}: ${c.name}: no steps`);
      // A generous timeout: the vectors pin decisions, not latency.
      const limiter = new Limiter({ policy: c.policy, store, prefix: `node-conformance-${fi}-${ci}`, timeout: '10s' });
      for (const [i, step] of c.steps.entries()) {
        strictFields(step, STEP, ['now_ms', 'expect'], `${file}: ${c.name}: step ${i}`);
        strictFields(step.expect, EXPECT, ['allowed', 'remaining', 'reset_after_ms', 'retry_after_ms'], `${file}: ${c.name}: step ${i} expect`);
        steps++;
        const e = step.expect;
        const want = {
          allowed: e.allowed,
          remaining: e.remaining,
          resetAfterMs: e.reset_after_ms,
          retryAfterMs: e.retry_after_ms,
          delayMs: e.delay_ms ?? 0,
        };
        let got;
        try {
          // A peek step: the decision a check would get, with nothing charged.
          const decide = step.peek ? limiter.peek : limiter.check;
          got = await decide.call(limiter, step.key ?? 'k', { cost: step.cost ?? 1, nowMs: step.now_ms });
        } catch (err) {
          failures.push(`${store}: ${file}: ${c.name} step ${i}: error ${err.message}`);
          continue;
        }
        const seen = {
          allowed: got.allowed,
          remaining: got.remaining,
          resetAfterMs: got.resetAfterMs,
          retryAfterMs: got.retryAfterMs,
          delayMs: got.delayMs,
        };
        if (e.limit !== undefined) {
          want.limit = e.limit;
          seen.limit = got.limit;
        }
        if (e.source !== undefined) {
          want.source = e.source;
          seen.source = got.source;
        }
        // A fallback decides alike and would hide a store failure.
        if (got.source !== 'store' && got.source !== 'penalty') {
          failures.push(`${store}: ${file}: ${c.name} step ${i}: decided by ${got.source}, not the store`);
        }
        try {
          assert.deepStrictEqual(seen, want);
        } catch {
          failures.push(`${store}: ${file}: ${c.name} step ${i} (now_ms ${step.now_ms}): expected ${JSON.stringify(want)}, got ${JSON.stringify(seen)}`);
        }
      }
      limiter.close();
    }
  }
  return { steps, failures };
}

async function playHttp(store, files) {
  const failures = [];
  let steps = 0;
  for (const [fi, [file, doc]] of files.entries()) {
    strictFields(doc, ['cases'], ['cases'], file);
    assert.ok(doc.cases.length > 0, `${file}: no cases`);
    for (const [ci, c] of doc.cases.entries()) {
      strictFields(c, HTTP_CASE, ['name', 'rules', 'requests'], `${file}: case ${ci}`);
      assert.ok(c.requests.length > 0, `${file}: ${c.name}: no requests`);
      // A generous timeout: the vectors pin decisions, not latency.
      const limiter = Limiter.fromRules({ timeout: '10s', ...c.rules, store, prefix: `node-http-${fi}-${ci}` });
      const tokens = [];
      for (const [i, step] of c.requests.entries()) {
        if (Object.keys(LIMIT_STEPS).some((k) => k in step)) {
          tokens.push(undefined);
          steps++;
          try {
            const failure = await playLimitStep(limiter, `${store}: ${file}: ${c.name} step ${i}`, step);
            if (failure) failures.push(failure);
          } catch (err) {
            if (err instanceof assert.AssertionError) throw err;
            failures.push(`${store}: ${file}: ${c.name} step ${i}: error ${err.message}`);
          }
          continue;
        }
        if ('of' in step) {
          // The completion of an earlier request, now (what a middleware does after the response).
          strictFields(step, HTTP_LATER, ['complete', 'of'], `${file}: ${c.name}: step ${i}`);
          const token = tokens[step.of];
          tokens.push(undefined);
          if (!token) failures.push(`${store}: ${file}: ${c.name} step ${i}: request ${step.of} has no completion token`);
          else await limiter.complete(token, step.complete, { cost: step.actual_cost, nowMs: step.at_ms });
          continue;
        }
        strictFields(step, HTTP_STEP, ['request', 'expect'], `${file}: ${c.name}: request ${i}`);
        strictFields(step.expect, HTTP_EXPECT, ['status', 'headers', 'body'], `${file}: ${c.name}: request ${i} expect`);
        steps++;
        const want = {
          status: step.expect.status,
          headers: step.expect.headers,
          body: step.expect.body,
          delayMs: step.expect.delay_ms ?? 0,
        };
        let got;
        try {
          const o = await (step.peek ? limiter.peekRequest(step.request) : limiter.checkRequest(step.request));
          tokens.push(o.completion);
          if ('complete' in step) {
            if (!o.completion) failures.push(`${store}: ${file}: ${c.name} request ${i}: no completion token`);
            else {
              // cost/: the actual cost, at the completion's clock (default: the request's).
              const nowMs = step.at_ms ?? step.request.now_ms;
              await limiter.complete(o.completion, step.complete, { cost: step.actual_cost, nowMs });
            }
          }
          got = { status: o.status, headers: o.headers, body: o.body, delayMs: o.delayMs };
          const fallback = o.decisions.filter((d) => ['local', 'fail_open', 'fail_closed'].includes(d.source));
          if (fallback.length > 0) failures.push(`${store}: ${file}: ${c.name} request ${i}: decided by a fallback`);
        } catch (err) {
          if (tokens.length === i) tokens.push(undefined);
          failures.push(`${store}: ${file}: ${c.name} request ${i}: error ${err.message}`);
          continue;
        }
        try {
          assert.deepStrictEqual(got, want);
        } catch {
          failures.push(`${store}: ${file}: ${c.name} request ${i}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
        }
      }
      limiter.close();
    }
  }
  return { steps, failures };
}

let redis;
let cluster;
test.before(async () => {
  redis = await RedisServer.start();
  cluster = await Topology.cluster();
});
test.after(async () => {
  await redis.kill();
  await cluster.stop();
});

const urlOf = (store) => ({ memory: 'memory', redis: redis.url, cluster: cluster.url })[store];

for (const store of ['memory', 'redis', 'cluster']) {
  test(`decision vectors on ${store}`, async () => {
    const files = vectorFiles('');
    const { steps, failures } = await playDecisions(urlOf(store), files);
    assert.ok(steps > 0);
    assert.deepStrictEqual(failures, [], `${failures.length} mismatches:\n${failures.join('\n')}`);
  });

  test(`http vectors on ${store}`, async () => {
    const files = vectorFiles('http').concat(
      vectorFiles('cost').map(([name, doc]) => [`cost/${name}`, doc]),
      vectorFiles('limits').map(([name, doc]) => [`limits/${name}`, doc]),
    );
    const { steps, failures } = await playHttp(urlOf(store), files);
    assert.ok(steps > 0);
    assert.deepStrictEqual(failures, [], `${failures.length} mismatches:\n${failures.join('\n')}`);
  });
}
