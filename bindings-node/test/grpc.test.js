'use strict';
// The @grpc/grpc-js interceptor on a real gRPC server on loopback: the gRPC vectors
// (tests/conformance/grpc) on memory and Redis, compared on the status code and message, the
// header metadata and the trailers; the demo Greeter (examples/grpc/greeter.proto) with a
// stream, a concurrency slot given back when a stream ends, on a client cancel and on a handler
// error, and count-after-response by the call's code.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const { polylimitInterceptor } = require('../grpc');
const { Limiter } = require('..');
const { RedisServer, vectorFiles } = require('./support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const prefix = () => `node-grpc-${process.pid}-${seq++}`;

// Metadata the transport adds; every other key must be the core's.
const TRANSPORT = new Set(['content-type', 'date', 'grpc-accept-encoding', 'grpc-encoding', 'user-agent']);
const text = { serialize: (s) => Buffer.from(String(s)), deserialize: (b) => b.toString() };

/** A service of `paths` (full method names) with raw text messages; a path ending in `Stream` streams its replies. */
function serviceOf(paths) {
  const service = {};
  for (const p of paths) {
    const streaming = /Stream$/.test(p);
    service[p] = {
      path: p,
      requestStream: false,
      responseStream: streaming,
      requestSerialize: text.serialize,
      requestDeserialize: text.deserialize,
      responseSerialize: text.serialize,
      responseDeserialize: text.deserialize,
    };
  }
  return service;
}

async function startServer(interceptors, service, handlers) {
  const server = new grpc.Server({ interceptors });
  server.addService(service, handlers);
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { server, port, close: () => new Promise((resolve) => server.tryShutdown(() => resolve())) };
}

/**
 * One call: resolves to `{ code, details, headers: [[k, v]], trailers: [[k, v]] }`. `call` is
 * given to `started(call)` (to cancel it later).
 */
function callOnce(client, method, metadataPairs, started = () => {}) {
  const md = new grpc.Metadata();
  for (const [k, v] of metadataPairs || []) md.add(k.toLowerCase(), v);
  return new Promise((resolve) => {
    let headers = [];
    const done = (status) =>
      resolve({ code: status.code, details: status.details, headers, trailers: pairsOf(status.metadata) });
    let call;
    if (method.responseStream) {
      call = client.makeServerStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, 'x', md);
      call.on('data', () => {});
      call.on('error', () => {});
      call.on('status', done);
    } else {
      call = client.makeUnaryRequest(method.path, method.requestSerialize, method.responseDeserialize, 'x', md, () => {});
      call.on('status', done);
    }
    call.on('metadata', (m) => (headers = pairsOf(m)));
    started(call);
  });
}

function pairsOf(md) {
  const out = [];
  if (!md) return out;
  for (const [k, values] of Object.entries(md.toJSON())) {
    if (TRANSPORT.has(k)) continue;
    for (const v of values) out.push([k, String(v)]);
  }
  return out;
}

/** Plays every gRPC vector case on `store` through the interceptor; resolves to `{ played, skipped, failures }`. */
async function playGrpc(store) {
  const failures = [];
  const skipped = [];
  let played = 0;
  for (const [fi, [file, doc]] of vectorFiles('grpc').entries()) {
    for (const [ci, c] of doc.cases.entries()) {
      const at = `${store}: ${file}: ${c.name}`;
      played++;
      const limiter = Limiter.fromRules({ timeout: '10s', ...c.rules, store, prefix: `node-grpc-vec-${process.pid}-${fi}-${ci}` });
      let cur = null;
      const completions = new Set(); // the interceptor's limiter.complete() calls not yet answered
      const complete = limiter.complete.bind(limiter);
      limiter.complete = (...args) => {
        const p = complete(...args);
        completions.add(p);
        return p.finally(() => completions.delete(p));
      };
      const check = limiter._checkHttp.bind(limiter);
      limiter._checkHttp = (...args) => {
        args[11] = cur.request.now_ms; // the vector's clock; every other argument is the interceptor's
        return check(...args);
      };
      // The vector's peer, as the gRPC library would give it.
      const peer = (methodDescriptor, call) => {
        const wrapped = new grpc.ServerInterceptingCall(call);
        const p = cur.request.peer;
        wrapped.getPeer = () => p;
        return wrapped;
      };
      const paths = [...new Set(c.requests.filter((s) => s.request).map((s) => (s.request.path.startsWith('/') ? s.request.path : `/${s.request.path}`)))];
      const service = serviceOf(paths);
      const held = new Map(); // request index → (code) => void
      const answer = (respond, call) => {
        const s = cur;
        s.serverCall = call;
        s.entered();
        const end = (code) => respond(code);
        if (s.hold) held.set(s.index, end);
        else end(s.complete ?? 0);
      };
      const handlers = {};
      for (const p of paths) {
        handlers[p] = service[p].responseStream
          ? (call) => {
              call.sendMetadata(new grpc.Metadata()); // a stream's headers go out as it opens
              answer((code) => {
                if (call.cancelled) return;
                if (code === 0) {
                  call.write('hello');
                  call.end();
                } else call.emit('error', { code, details: 'ended' });
              }, call);
            }
          : (call, callback) =>
              answer((code) => (code === 0 ? callback(null, 'hello') : callback({ code, details: 'ended' })), call);
      }
      const interceptor = polylimitInterceptor({
        limiter,
        user: () => cur.request.user,
        apiKey: () => cur.request.api_key,
        keyGenerator: () => cur.request.key,
        cost: () => cur.request.cost, // the interceptor's cost function
      });
      const srv = await startServer([peer, interceptor], service, handlers);
      const client = new grpc.Client(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
      const holds = new Set(c.requests.filter((s) => 'of' in s).map((s) => s.of));
      const pending = new Map();
      try {
        for (const [i, s] of c.requests.entries()) {
          if ('of' in s) {
            const p = pending.get(s.of);
            if (s.complete === 1) {
              // CANCELLED: the client goes away; on once the server saw it and the interceptor settled.
              const gone = new Promise((resolve) => p.step.serverCall.on('cancelled', resolve));
              p.call.cancel();
              await gone;
              await Promise.all([...completions]);
            } else held.get(s.of)(s.complete);
            compare(at, s.of, p.step, await p.response, s.complete, failures, s.complete === 1);
            pending.delete(s.of);
            continue;
          }
          const st = { ...s, index: i, hold: holds.has(i) || !('complete' in s) };
          cur = st;
          const entered = new Promise((resolve) => (st.entered = resolve));
          let call;
          const method = service[s.request.path.startsWith('/') ? s.request.path : `/${s.request.path}`];
          const response = callOnce(client, method, s.request.headers, (x) => (call = x));
          if (st.hold) {
            await Promise.race([entered, response]);
            pending.set(i, { step: st, response, call });
            continue;
          }
          compare(at, i, st, await response, s.complete, failures);
        }
        for (const [i, p] of pending) {
          if (held.has(i) && !holds.has(i)) held.get(i)(0);
          if (!holds.has(i)) compare(at, i, p.step, await p.response, 0, failures);
        }
      } catch (err) {
        failures.push(`${at}: ${err.stack}`);
      } finally {
        for (const end of held.values()) end(0);
        client.close();
        srv.server.forceShutdown();
        limiter.close();
      }
    }
  }
  return { played, skipped, failures };
}

function compare(at, i, step, got, completeCode, failures, cancelled = false) {
  const e = step.expect;
  const want = {
    code: e.status ?? completeCode ?? 0,
    // A call refused: the core's message; ended by the handler or the client: theirs.
    details: e.status !== null ? e.body : cancelled ? 'Cancelled on client' : (completeCode ?? 0) === 0 ? 'OK' : 'ended',
    headers: e.headers,
    trailers: e.status !== null ? e.trailers : [],
  };
  const seen = { code: got.code, details: got.details, headers: got.headers, trailers: got.trailers };
  if (cancelled) {
    // Cancelled here: the headers had been sent before; no trailers come.
    want.trailers = seen.trailers;
  }
  try {
    assert.deepStrictEqual(seen, want);
  } catch {
    failures.push(`${at}: request ${i}: expected ${JSON.stringify(want)}, got ${JSON.stringify(seen)}`);
  }
}

for (const store of ['memory', 'redis']) {
  test(`grpc: vectors on ${store}`, async (t) => {
    const { played, skipped, failures } = await playGrpc(store === 'memory' ? 'memory' : redis.url);
    t.diagnostic(`${played} cases played; not playable: ${skipped.join('; ')}`);
    assert.ok(played >= 8, `only ${played} cases played`);
    assert.deepStrictEqual(failures, [], `${failures.length} mismatches:\n${failures.join('\n')}`);
  });
}

/** The demo Greeter from examples/grpc/greeter.proto. */
function greeter() {
  const def = protoLoader.loadSync(path.join(__dirname, '..', '..', 'examples', 'grpc', 'greeter.proto'));
  return grpc.loadPackageDefinition(def).polylimit.demo.Greeter;
}

test('grpc: the Greeter demo: unary and stream calls share the limit; metadata on every call, trailers on a refusal', async () => {
  const Greeter = greeter();
  const limiter = Limiter.fromRules({
    store: redis.url,
    timeout: '10s',
    prefix: prefix(),
    headers: 'ietf',
    policies: { greeter: { algorithm: 'token_bucket', rate: '5/min', burst: 2 } },
    rules: [{ match: { path: '/polylimit.demo.Greeter/*' }, key: ['ip'], policy: 'greeter' }],
  });
  const srv = await startServer([polylimitInterceptor(limiter)], Greeter.service, {
    Hello: (call, cb) => cb(null, { value: `hello, ${call.request.value}` }),
    HelloStream: (call) => {
      for (let i = 0; i < 3; i++) call.write({ value: `hello, ${call.request.value} ${i}` });
      call.end();
    },
  });
  const client = new Greeter(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
  try {
    const unary = await new Promise((resolve) => {
      let headers;
      const call = client.Hello({ value: 'ann' }, (err, reply) => resolve({ err, reply, headers }));
      call.on('metadata', (m) => (headers = m.getMap()));
    });
    assert.equal(unary.reply.value, 'hello, ann');
    assert.equal(unary.headers['ratelimit-policy'], '"greeter";q=2;w=24');
    const replies = [];
    await new Promise((resolve, reject) => {
      const s = client.HelloStream({ value: 'bob' });
      s.on('data', (r) => replies.push(r.value));
      s.on('end', resolve);
      s.on('error', reject);
    });
    assert.deepStrictEqual(replies, ['hello, bob 0', 'hello, bob 1', 'hello, bob 2']);
    const refused = await new Promise((resolve) => {
      const call = client.Hello({ value: 'cy' }, (err) => resolve(err));
      call.on('status', () => {});
    });
    assert.equal(refused.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.match(refused.details, /Too Many Requests|rate/i);
    assert.match(refused.metadata.get('retry-after')[0], /^\d+$/);
  } finally {
    client.close();
    await srv.close();
    limiter.close();
  }
});

test('grpc: a concurrency slot comes back when a stream ends, when the client cancels it, and on a handler error', async () => {
  const Greeter = greeter();
  const limiter = Limiter.fromRules({
    store: redis.url,
    timeout: '10s',
    prefix: prefix(),
    headers: 'none',
    policies: { slots: { algorithm: 'concurrency', limit: 1 }, logins: { algorithm: 'fixed_window', rate: '2/min' } },
    rules: [
      { match: { path: '/polylimit.demo.Greeter/HelloStream' }, key: ['ip'], policy: 'slots' },
      { match: { path: '/polylimit.demo.Greeter/Hello' }, key: ['ip'], policy: 'logins', count: 'failed' },
    ],
  });
  let hold = null;
  const srv = await startServer([polylimitInterceptor(limiter)], Greeter.service, {
    Hello: (call, cb) => (call.request.value === 'ok' ? cb(null, { value: 'ok' }) : cb({ code: grpc.status.UNAUTHENTICATED, details: 'no' })),
    HelloStream: (call) => {
      if (call.request.value === 'fail') throw new Error('handler failed');
      if (call.request.value === 'hold') {
        hold = call;
        return;
      }
      call.write({ value: 'one' });
      call.end();
    },
  });
  const client = new Greeter(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
  const stream = (value) =>
    new Promise((resolve) => {
      const s = client.HelloStream({ value });
      s.on('data', () => {});
      s.on('error', (e) => resolve(e.code));
      s.on('end', () => resolve(0));
    });
  const unary = (value) => new Promise((resolve) => client.Hello({ value }, (err) => resolve(err ? err.code : 0)));
  try {
    assert.equal(await stream('a'), 0);
    assert.equal(await stream('b'), 0); // the first stream's slot came back as it ended
    assert.equal(await stream('fail'), grpc.status.UNKNOWN);
    assert.equal(await stream('c'), 0); // and the failed one's
    const held = client.HelloStream({ value: 'hold' });
    held.on('error', () => {});
    held.on('data', () => {});
    while (!hold) await new Promise((r) => setTimeout(r, 5));
    assert.equal(await stream('d'), grpc.status.RESOURCE_EXHAUSTED);
    const cancelled = new Promise((resolve) => hold.on('cancelled', resolve));
    held.cancel();
    await cancelled;
    let code;
    for (let i = 0; i < 100 && code !== 0; i++) {
      code = await stream('e');
      if (code !== 0) await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(code, 0); // the cancelled stream's slot came back
    // count: failed — OK calls are given back, UNAUTHENTICATED ones charged.
    const codes = [];
    for (const v of ['ok', 'ok', 'ok', 'bad', 'bad', 'ok']) codes.push(await unary(v));
    assert.deepStrictEqual(codes, [0, 0, 0, 16, 16, 8]);
  } finally {
    client.close();
    await srv.close();
    limiter.close();
  }
});
