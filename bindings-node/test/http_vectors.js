'use strict';
// Plays the HTTP vectors (tests/conformance/http) through a framework adapter on a real server:
// each request is sent over loopback with the vector's method, target and headers; the server
// gives the request the vector's peer (its socket's remoteAddress) and the limiter the vector's
// now_ms (the only thing injected: the clock); user, api_key, key and cost come through the
// adapter's `user`, `apiKey`, `keyGenerator` and `cost` options. The handler answers the status a
// step completes with (count-after-response through the adapter), and holds a request another
// step completes later. Compared: the status, the rate-limit headers (exact list, in order) and
// the body.
const http = require('node:http');
const assert = require('node:assert/strict');
const { Limiter } = require('..');
const { vectorFiles } = require('./support');

// Headers the frameworks and Node add; every other one must be the core's.
const FRAMEWORK_HEADERS = new Set(['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding', 'x-powered-by', 'etag', 'vary']);

/** A route template in the `:name` spelling Koa, Hono and Express route by (the core reads all spellings alike). */
function colonRoute(route) {
  const path = route.replace(/^[A-Z]+ /, '');
  return path.replace(/\{([A-Za-z_][A-Za-z0-9_]*)(:[^}]*)?\}/g, ':$1');
}

/** Why a case cannot be played through a middleware, or null. */
function unplayable(c) {
  const reqs = c.requests.filter((s) => s.request);
  if (c.requests.some((s) => 'complete' in s && s.complete === null)) return 'no response at all (a middleware always sees one)';
  const later = c.requests.filter((s) => 'of' in s).map((s) => s.of);
  if (new Set(later).size !== later.length) return 'a request completed twice';
  if (later.some((i) => 'complete' in c.requests[i])) return 'a request completed twice';
  if (reqs.some((s) => (s.expect.delay_ms ?? 0) > 1000)) return 'a delay over 1 s (waited for real)';
  return null;
}

/** The path matching of a case: `{ caseInsensitive, ignoreTrailingSlash }` (the same in every request). */
function flagsOf(c) {
  const reqs = c.requests.filter((s) => s.request);
  const f = (s) => `${Boolean(s.request.case_insensitive)}/${Boolean(s.request.ignore_trailing_slash)}`;
  assert.equal(new Set(reqs.map(f)).size, 1, `${c.name}: path matching differs between requests`);
  return { caseInsensitive: Boolean(reqs[0].request.case_insensitive), ignoreTrailingSlash: Boolean(reqs[0].request.ignore_trailing_slash) };
}

function send(port, { method = 'GET', path = '/', headers }) {
  const raw = [];
  if (Array.isArray(headers)) for (const [n, v] of headers) raw.push(n, v);
  else for (const [n, v] of Object.entries(headers || {})) raw.push(n, v);
  // Raw headers get no Host of Node's, which HTTP/1.1 requires.
  if (!raw.some((n, i) => i % 2 === 0 && n.toLowerCase() === 'host')) raw.unshift('Host', `127.0.0.1:${port}`);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers: raw, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (body += d));
      res.on('end', () => {
        const pairs = [];
        for (let i = 0; i < res.rawHeaders.length; i += 2) pairs.push([res.rawHeaders[i], res.rawHeaders[i + 1]]);
        resolve({ status: res.statusCode, headers: pairs, body });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Plays every case of every HTTP vector file through `framework` on `store`:
 * `framework.mount({ limiter, options, routes, flags, handler })` → `{ listener, close? }` (a Node
 * request listener; `handler(ctx)` answers a request: resolves to the status to answer with),
 * `framework.skip(case, flags)` → a reason or null, `framework.lowercase`: names compared in
 * any case and `framework.sorted` in any order (Fetch's Headers are lowercase and sorted). Resolves to `{ played, skipped, failures }`.
 */
async function playThrough(framework, store, label) {
  const failures = [];
  const skipped = [];
  let played = 0;
  for (const [fi, [file, doc]] of vectorFiles('http').entries()) {
    for (const [ci, c] of doc.cases.entries()) {
      const flags = flagsOf(c);
      const why = unplayable(c) || framework.skip(c, flags);
      if (why) {
        skipped.push(`${file}: ${c.name}: ${why}`);
        continue;
      }
      played++;
      const at = `${label} ${store}: ${file}: ${c.name}`;
      const limiter = Limiter.fromRules({ timeout: '10s', ...c.rules, store, prefix: `node-${label}-vec-${process.pid}-${fi}-${ci}` });
      let cur = null; // the step being played
      const check = limiter._checkHttp.bind(limiter);
      // The vector's clock; every other argument is the adapter's.
      limiter._checkHttp = (...args) => {
        const step = cur;
        args[11] = step.request.now_ms;
        return check(...args).then((o) => {
          step.outcome = o;
          return o;
        });
      };
      const step = () => cur;
      const options = {
        limiter,
        user: () => step().request.user,
        apiKey: () => step().request.api_key,
        keyGenerator: () => step().request.key,
        cost: () => step().request.cost, // the middleware's cost function
      };
      const held = new Map(); // request index → resolve(status)
      const handler = () => {
        const s = cur;
        if (s.entered) s.entered();
        if (s.hold) return new Promise((resolve) => held.set(s.index, resolve));
        return Promise.resolve(s.complete ?? 200);
      };
      const routes = [...new Set(c.requests.filter((s) => s.request && s.request.route).map((s) => colonRoute(s.request.route)))];
      const app = await framework.mount({ limiter, options, routes, flags, handler });
      const server = http.createServer((req, res) => {
        // The vector's peer as the socket's (absent: a socket without an address, as a Unix one).
        const peer = cur.request.peer;
        Object.defineProperty(req.socket, 'remoteAddress', { value: peer === undefined ? undefined : peer, configurable: true });
        app.listener(req, res);
      });
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      const { port } = server.address();
      const holds = new Set(c.requests.filter((s) => 'of' in s).map((s) => s.of));
      const pending = new Map(); // held request index → { step, response }
      try {
        for (const [i, s] of c.requests.entries()) {
          if ('of' in s) {
            const p = pending.get(s.of);
            if (!held.has(s.of)) {
              failures.push(`${at}: step ${i}: request ${s.of} was not let through to be completed`);
              continue;
            }
            held.get(s.of)(s.complete);
            compare(at, s.of, p.step, await p.response, s.complete, framework, failures);
            pending.delete(s.of);
            continue;
          }
          // A request the vector does not complete stays in flight (its handler waits) to the end of the case.
          const st = { ...s, index: i, hold: holds.has(i) || !('complete' in s) };
          cur = st;
          if (s.peek) {
            const o = await limiter.peekRequest(s.request);
            const got = { status: o.status, headers: o.headers, body: o.body };
            const want = { status: s.expect.status, headers: s.expect.headers, body: s.expect.body };
            try {
              assert.deepStrictEqual(got, want);
            } catch {
              failures.push(`${at}: peek ${i}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
            }
            continue;
          }
          const entered = new Promise((resolve) => (st.entered = resolve));
          const response = send(port, s.request);
          if (st.hold) {
            // Checked once the handler runs (let through) or the answer comes (refused).
            await Promise.race([entered, response]);
            pending.set(i, { step: st, response });
            continue;
          }
          compare(at, i, st, await response, s.complete, framework, failures);
        }
        for (const [i, p] of pending) {
          if (!held.has(i)) {
            compare(at, i, p.step, await p.response, undefined, framework, failures);
          } else if (!holds.has(i)) {
            held.get(i)(200);
            compare(at, i, p.step, await p.response, 200, framework, failures);
          }
        }
      } catch (err) {
        failures.push(`${at}: ${err.stack}`);
      } finally {
        for (const resolve of held.values()) resolve(200);
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
        if (app.close) await app.close();
        limiter.close();
      }
    }
  }
  return { played, skipped, failures };
}

function compare(at, i, step, res, completeStatus, framework, failures) {
  const e = step.expect;
  const head = String(step.request.method || 'GET').toUpperCase() === 'HEAD';
  const want = {
    status: e.status ?? completeStatus ?? 200,
    headers: e.headers,
    body: head ? '' : e.status === null ? 'ok' : e.body,
    delayMs: e.delay_ms ?? 0,
  };
  let headers = res.headers.filter(([n]) => !FRAMEWORK_HEADERS.has(n.toLowerCase()));
  if (framework.lowercase) {
    headers = headers.map(([n, v]) => [n.toLowerCase(), v]);
    want.headers = want.headers.map(([n, v]) => [n.toLowerCase(), v]);
  }
  if (framework.sorted) {
    const byName = (a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    headers = [...headers].sort(byName);
    want.headers = [...want.headers].sort(byName);
  }
  const got = { status: res.status, headers, body: res.body, delayMs: step.outcome ? step.outcome.delayMs : null };
  if (e.status !== null && !head) {
    const type = res.headers.find(([n]) => n.toLowerCase() === 'content-type');
    if (!type || type[1] !== 'application/json') failures.push(`${at}: request ${i}: refused with Content-Type ${type && type[1]}`);
  }
  try {
    assert.deepStrictEqual(got, want);
  } catch {
    failures.push(`${at}: request ${i}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  }
}

/** The vector tests of one framework on memory and on `redisUrl()`. */
function vectorTests(test, framework, redisUrl, label) {
  for (const store of ['memory', 'redis']) {
    test(`${label}: http vectors on ${store}`, async (t) => {
      const { played, skipped, failures } = await playThrough(framework, store === 'memory' ? 'memory' : redisUrl(), label);
      t.diagnostic(`${played} cases played, ${skipped.length} not playable through a middleware:\n${skipped.join('\n')}`);
      assert.ok(played >= 40, `only ${played} cases played`);
      assert.deepStrictEqual(failures, [], `${failures.length} mismatches:\n${failures.join('\n')}`);
    });
  }
}

module.exports = { vectorTests, colonRoute };
