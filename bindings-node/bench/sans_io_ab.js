'use strict';
// A/B of the sans-I/O modes (sansio.js) in one run, rounds alternating: Fastify and Express under
// autocannon -c 50 (apps.js: the peer, polylimit with the socket for check() only at one in flight
// ('single', the previous prototype), polylimit with pipelined checks and requests ('pipeline'; for
// the middlewares the same as the default 'requests')),
// and check() at 1 and 64 in flight against rate-limiter-flexible. Prints every round, the medians
// and the CPU per request of each process. Not part of `make bench`.
const { fork } = require('node:child_process');
const path = require('node:path');
const autocannon = require('autocannon');
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { RedisServer } = require('../test/support');
const { Limiter } = require('..');
const { setMode } = require('../sansio');
const cpu = require('./cpu');

const SECONDS = Number(process.env.BENCH_SECONDS || 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const WHAT = (process.env.BENCH_WHAT || 'fastify,express,check').split(',');
// The sans-I/O modes the HTTP lines compare with the peer (sansio.setMode), e.g. BENCH_MODES=single,requests.
const MODES = (process.env.BENCH_MODES || 'single,pipeline').split(',');
const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const us = (x) => (x === null || x === undefined ? '-' : x.toFixed(1));

async function app(framework, which, mode, redis) {
  // A mode `requests/both`: that mode, the app sending both header sets (apps.js BENCH_HEADERS).
  const [sansIo, headers] = (mode || '').split('/');
  const env = { ...process.env, BENCH_SANS_IO: sansIo, BENCH_HEADERS: headers || '', BENCH_TIMEOUT: '2s' };
  const child = fork(path.join(__dirname, 'apps.js'), [framework, which, redis.url], { stdio: 'inherit', env });
  const { port } = await new Promise((resolve, reject) => {
    child.once('message', resolve);
    child.once('exit', (code) => reject(new Error(`${framework} ${which} exited with ${code}`)));
  });
  const url = `http://127.0.0.1:${port}/`;
  await autocannon({ url, connections: 50, duration: 1 });
  return {
    async run() {
      const used = cpu.sample({ app: child.pid, redis: redis.child.pid });
      const result = await autocannon({ url, connections: 50, duration: SECONDS });
      if (result.non2xx || result.errors) throw new Error(`${framework} ${which}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      const c = used.stop(result.requests.total);
      const per = (p) => (c === null ? null : c.perUnit[p].main + c.perUnit[p].runtime + c.perUnit[p].other);
      return { rate: result.requests.average, app: per('app'), redis: per('redis') };
    },
    stop() {
      child.disconnect();
      child.kill();
    },
  };
}

async function http(framework, redis) {
  const sides = [['peer', 'peer', null], ...MODES.map((m) => [m, 'polylimit', m])];
  const apps = [];
  for (const [, which, mode] of sides) apps.push(await app(framework, which, mode, redis));
  const got = sides.map(() => []);
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const order = sides.map((_, i) => i);
      if (round % 2) order.reverse();
      for (const i of order) got[i].push(await apps[i].run());
      const r = (i) => got[i][round];
      console.log(
        `${framework} round ${round + 1}: peer ${Math.round(r(0).rate)} req/s; ` +
          sides.slice(1).map((s, j) => `${s[0]} ${Math.round(r(j + 1).rate)} (${(r(j + 1).rate / r(0).rate).toFixed(2)}x)`).join('; ') +
          `; CPU us/req app ${sides.map((s, i) => `${s[0]} ${us(r(i).app)}`).join(', ')}; redis ${sides.map((s, i) => `${s[0]} ${us(r(i).redis)}`).join(', ')}`,
      );
    }
  } finally {
    for (const a of apps) a.stop();
  }
  const m = got.map((runs) => ({ rate: median(runs.map((x) => x.rate)), app: median(runs.map((x) => x.app)), redis: median(runs.map((x) => x.redis)) }));
  console.log(
    `${framework} medians: peer ${Math.round(m[0].rate)}; ` +
      sides.slice(1).map((s, j) => `${s[0]} ${Math.round(m[j + 1].rate)} (${(m[j + 1].rate / m[0].rate).toFixed(2)}x)`).join('; ') +
      `; CPU us/req app ${sides.map((s, i) => `${s[0]} ${us(m[i].app)}`).join(', ')}; redis ${sides.map((s, i) => `${s[0]} ${us(m[i].redis)}`).join(', ')}`,
  );
}

// A stalled run says where it stalled (the side, and the limiter's socket's queue).
let progress = 0;
let stalledSide = null;
let watched = null;
function watchdog() {
  let last = -1;
  const timer = setInterval(() => {
    if (progress === last && stalledSide !== null) {
      const s = watched && watched._sansIo;
      console.log(`STALLED in ${stalledSide}: socket ${s && s.socket ? (s.socket.destroyed ? 'destroyed' : 'open') : 'none'}, waiting ${s ? s.waiting.length - s.head : '-'}, outbox ${s ? s.outbox.length : '-'}`);
    }
    last = progress;
  }, 10000);
  timer.unref();
}

async function measure(inFlight, once, pids) {
  await Promise.all(Array.from({ length: inFlight }, (_, i) => once(i)));
  let done = 0;
  const deadline = Date.now() + SECONDS * 1000;
  const started = process.hrtime.bigint();
  const used = cpu.sample(pids);
  const samples = [];
  async function worker(w) {
    let i = w;
    while (Date.now() < deadline) {
      const t = process.hrtime.bigint();
      await once(i);
      progress++;
      if (inFlight === 1) samples.push(Number(process.hrtime.bigint() - t) / 1e6);
      i += inFlight;
      done++;
    }
  }
  await Promise.all(Array.from({ length: inFlight }, (_, w) => worker(w)));
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  const c = used.stop(done);
  const per = (p) => (c === null ? null : c.perUnit[p].main + c.perUnit[p].runtime + c.perUnit[p].other);
  samples.sort((a, b) => a - b);
  const q = (x) => samples[Math.min(samples.length - 1, Math.floor(x * samples.length))];
  return { rate: done / secs, node: per('node'), redis: per('redis'), p50: q(0.5), p99: q(0.99) };
}

async function checks(redis) {
  const ioredis = new Redis(redis.url, { enableAutoPipelining: false });
  const flexible = new RateLimiterRedis({ storeClient: ioredis, points: 999999, duration: 60, keyPrefix: 'ab-rlflx' });
  const pids = { node: process.pid, redis: redis.child.pid };
  let notStore = 0;
  for (const algorithm of ['fixed_window', 'token_bucket']) {
    const limiter = new Limiter({ policy: { algorithm, rate: '999999/min' }, store: redis.url, prefix: `ab-${algorithm}`, timeout: '2s' });
    const ours = (i) => limiter.check(`user:${i % 10000}`).then((d) => d.source === 'store' || notStore++);
    const peer = (i) => flexible.consume(`user:${i % 10000}`).catch((e) => e);
    for (const inFlight of [1, 64]) {
      const got = { peer: [], single: [], pipeline: [] };
      for (let round = 0; round < ROUNDS; round++) {
        const order = round % 2 ? ['pipeline', 'single', 'peer'] : ['peer', 'single', 'pipeline'];
        for (const side of order) {
          if (side !== 'peer') setMode(side);
          stalledSide = side;
          watched = limiter;
          got[side].push(await measure(inFlight, side === 'peer' ? peer : ours, pids));
        }
        const r = (s) => got[s][round];
        const line = (s) => `${s} ${Math.round(r(s).rate)}/s node ${us(r(s).node)} redis ${us(r(s).redis)} us` + (inFlight === 1 ? ` p50 ${r(s).p50.toFixed(3)} p99 ${r(s).p99.toFixed(3)} ms` : '');
        console.log(`check ${algorithm} ${inFlight} in flight round ${round + 1}: ${['peer', 'single', 'pipeline'].map(line).join('; ')}; ratios single ${(r('single').rate / r('peer').rate).toFixed(2)}x pipeline ${(r('pipeline').rate / r('peer').rate).toFixed(2)}x`);
      }
      const m = (s, f) => median(got[s].map((x) => x[f]));
      console.log(
        `check ${algorithm} ${inFlight} in flight medians: peer ${Math.round(m('peer', 'rate'))}; single ${Math.round(m('single', 'rate'))} (${(m('single', 'rate') / m('peer', 'rate')).toFixed(2)}x); pipeline ${Math.round(m('pipeline', 'rate'))} (${(m('pipeline', 'rate') / m('peer', 'rate')).toFixed(2)}x)` +
          (inFlight === 1 ? `; p50/p99 ms peer ${m('peer', 'p50').toFixed(3)}/${m('peer', 'p99').toFixed(3)} single ${m('single', 'p50').toFixed(3)}/${m('single', 'p99').toFixed(3)} pipeline ${m('pipeline', 'p50').toFixed(3)}/${m('pipeline', 'p99').toFixed(3)}` : ''),
      );
    }
    limiter.close();
  }
  setMode('pipeline');
  ioredis.disconnect();
  if (notStore) console.log(`WARNING: ${notStore} decisions from the fallback`);
}

(async () => {
  const redis = await RedisServer.start();
  watchdog();
  try {
    for (const what of WHAT) {
      if (what === 'check') await checks(redis);
      else await http(what, redis);
    }
  } finally {
    await redis.kill();
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
