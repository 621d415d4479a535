'use strict';
// The status a request ends with (the core's `ended_status`, SPEC §6): a client that hangs up
// after the handler wrote its status is charged as that status, never as "no response". Real
// Express and Fastify servers on loopback, on memory and a real Redis, `count: successful` on a
// 2/h window: a hang-up after a 200 must not make the request free.
const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const { once, EventEmitter } = require('node:events');
const express = require('express');
const Fastify = require('fastify');
const { rateLimit } = require('../express');
const polylimitFastify = require('../fastify');
const { Limiter } = require('..');
const { RedisServer } = require('./support');

let redis;
test.before(async () => {
  redis = await RedisServer.start();
});
test.after(async () => {
  await redis.kill();
});

let seq = 0;
const WINDOW = { algorithm: 'fixed_window', rate: '2/h' };

/** A limiter whose `complete` emits 'settled' once the core has settled the request. */
function watchedLimiter(store) {
  const limiter = new Limiter({ policy: WINDOW, store, timeout: '10s', prefix: `node-hangup-${process.pid}-${seq++}` });
  const settled = new EventEmitter();
  const complete = limiter.complete.bind(limiter);
  limiter.complete = (token, status) =>
    complete(token, status).finally(() => settled.emit('settled', status));
  return { limiter, settled };
}

/** Writes status 200 and its headers at once, then ends the response only once the client left. */
function writeThenWaitForHangUp(res) {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.flushHeaders();
  res.once('close', () => res.end('too late'));
}

async function expressApp(limiter) {
  const app = express();
  app.get('/slow', rateLimit({ limiter, key: ['ip'], count: 'successful' }), (req, res) => writeThenWaitForHangUp(res));
  const server = http.createServer(app);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}

async function fastifyApp(limiter) {
  const app = Fastify();
  await app.register(polylimitFastify, { limiter, global: false });
  const config = { rateLimit: { key: ['ip'], count: 'successful' } };
  app.get('/slow', { config }, (req, reply) => {
    reply.hijack();
    writeThenWaitForHangUp(reply.raw);
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
}

/** Sends GET /slow and destroys the socket as soon as the response's status arrives. */
function hangUpAfterStatus(url) {
  return new Promise((resolve, reject) => {
    const req = http.get(`${url}/slow`, { agent: false }, (res) => {
      resolve(res.statusCode);
      req.destroy();
    });
    req.on('error', (e) => (e.code === 'ECONNRESET' ? undefined : reject(e)));
  });
}

for (const framework of ['express', 'fastify']) {
  for (const store of ['memory', 'redis']) {
    test(`${framework}: a client that hangs up after a 200 is charged as 200 on ${store}`, async () => {
      const { limiter, settled } = watchedLimiter(store === 'redis' ? redis.url : 'memory');
      const s = framework === 'express' ? await expressApp(limiter) : await fastifyApp(limiter);
      try {
        const statuses = [];
        for (let i = 0; i < 2; i++) {
          const done = once(settled, 'settled');
          statuses.push(await hangUpAfterStatus(s.url));
          assert.deepEqual(await done, [200], 'settled as the status the handler wrote');
        }
        // Both hang-ups were charged: the window of 2 is spent.
        statuses.push(await hangUpAfterStatus(s.url));
        assert.deepEqual(statuses, [200, 200, 429]);
      } finally {
        await s.close();
        limiter.close();
      }
    });
  }
}

// Issue 32 item 5: a client that hangs up while its check waits for Redis (paused) must not
// keep its concurrency slot until the lease ends. Node runs the handler once the check answers
// (its response ends on a socket nobody reads) and settles it then: the slot comes back.
async function slotApp(framework, limiter) {
  if (framework === 'express') {
    const app = express();
    app.get('/', rateLimit({ limiter, key: ['ip'] }), (req, res) => res.send('ok'));
    const server = http.createServer(app);
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { server, url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
  }
  const app = Fastify();
  await app.register(polylimitFastify, { limiter, global: false });
  app.get('/', { config: { rateLimit: { key: ['ip'] } } }, async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { server: app.server, url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() };
}

function getStatus(url) {
  return new Promise((resolve, reject) => {
    http.get(url, { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    }).on('error', reject);
  });
}

for (const framework of ['express', 'fastify']) {
  test(`${framework}: a client that hangs up while its check waits for Redis frees its slot`, async () => {
    const limiter = new Limiter({
      policy: { algorithm: 'concurrency', limit: 1, lease: '30s' },
      store: redis.url,
      timeout: '10s',
      prefix: `node-hangup-slot-${process.pid}-${seq++}`,
    });
    const settled = new EventEmitter();
    const complete = limiter.complete.bind(limiter);
    limiter.complete = (token, status) => complete(token, status).finally(() => settled.emit('settled'));
    // Told when the middleware has handed its check to the core (then waiting on the paused Redis).
    const checkHttp = limiter._checkHttp.bind(limiter);
    limiter._checkHttp = (...args) => {
      const pending = checkHttp(...args);
      settled.emit('sent');
      return pending;
    };
    const s = await slotApp(framework, limiter);
    const pid = redis.child.pid;
    try {
      assert.equal(await getStatus(s.url), 200);
      process.kill(pid, 'SIGSTOP');
      const sent = once(settled, 'sent');
      const done = once(settled, 'settled');
      const req = http.get(s.url, { agent: false });
      req.on('error', () => {}); // the hang-up below
      await sent;
      req.destroy();
      process.kill(pid, 'SIGCONT');
      await done;
      assert.deepEqual([await getStatus(s.url), await getStatus(s.url)], [200, 200]);
    } finally {
      process.kill(pid, 'SIGCONT');
      await s.close();
      limiter.close();
    }
  });
}
