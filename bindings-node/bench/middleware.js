'use strict';
// The middlewares' call path alone, no HTTP: `_checkHttp` (what the Express middleware and the
// Fastify hook call) on the memory store, 50 requests in flight, each next one started from a
// new macrotask as requests arrive; prints the CPU per request of the event loop, polylimit's
// runtime thread and the other threads (V8's GC helpers), from /proc. Not part of `make bench`:
// `node bench/middleware.js [seconds]`. Not a test.
const { Limiter } = require('..');
const cpu = require('./cpu');

const SECONDS = Number(process.argv[2] || 3);
const limiter = new Limiter({ policy: { algorithm: 'fixed_window', rate: '1000000000/min' } });
const rawHeaders = ['host', '127.0.0.1:3000', 'user-agent', 'autocannon', 'accept', '*/*'];
let done = 0;
let stop = false;

function one() {
  if (stop) return;
  limiter._checkHttp(null, 'GET', '/', undefined, '127.0.0.1', rawHeaders, undefined, undefined, undefined, false, false).then((outcome) => {
    if (outcome.headers.length !== 5) throw new Error(`expected 5 headers, got ${outcome.headers.length}`);
    done++;
    setImmediate(one);
  });
}

for (let i = 0; i < 50; i++) one();
setTimeout(() => {
  const used = cpu.sample({ me: process.pid });
  const from = done;
  setTimeout(() => {
    const n = done - from;
    const r = used.stop(n);
    stop = true;
    if (r) {
      const u = r.perUnit.me;
      console.log(
        `middleware call path, memory, 50 in flight: ${Math.round(n / SECONDS)} req/s; CPU per request: ` +
          cpu.describe([['event loop', u.main], ['runtime', u.runtime], ['other threads', u.other]]),
      );
    }
    setTimeout(() => limiter.close(), 50);
  }, SECONDS * 1000);
}, 500);
