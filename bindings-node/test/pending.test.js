'use strict';
// The table of calls in flight (index.js `Pending`) must not keep finished requests alive
// through V8's scavenges: a churning Map did (its replaced hash tables, in the old generation,
// still held settled entries), and under load every scavenge then promoted ~1.3 MB of dead
// requests, which the GC helper threads paid for (3-4 µs per request in the Fastify app).
// The Fastify bench app (memory store) under autocannon, scavenges read from --trace-gc-nvp.
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { fork } = require('node:child_process');
const autocannon = require('autocannon');

test('under HTTP load the scavenges promote next to nothing (no Map of settled calls)', async () => {
  const child = fork(path.join(__dirname, '..', 'bench', 'apps.js'), ['fastify', 'polylimit', 'memory'], {
    execArgv: ['--trace-gc-nvp'],
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  let log = '';
  child.stdout.on('data', (chunk) => (log += chunk));
  try {
    const { port } = await new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`app exited with ${code}`)));
    });
    const url = `http://127.0.0.1:${port}/`;
    await autocannon({ url, connections: 50, amount: 20000 }); // warm-up: the table's Map grows old
    const from = log.length;
    const result = await autocannon({ url, connections: 50, amount: 60000 });
    assert.strictEqual(result.non2xx, 0);
    const promoted = [...log.slice(from).matchAll(/gc=s .*? promoted=(\d+)/g)].map((m) => Number(m[1]));
    assert.ok(promoted.length >= 5, `only ${promoted.length} scavenges`);
    promoted.sort((a, b) => a - b);
    const median = promoted[promoted.length >> 1];
    // ~1.3 MB per scavenge with the Map; a few KB without.
    assert.ok(median < 200000, `median promoted per scavenge ${median} bytes (${promoted.join(' ')})`);
  } finally {
    child.kill();
  }
});
