'use strict';
// One process of the sync measurement (tests/e2e/sync_run.py): checks one key
// at full speed through the Node binding and prints what it admitted.
// Usage: driver.js <store url> <policy JSON> <key> <seconds>. Prints "ready"
// once connected, waits for a line on stdin, runs, prints one JSON line.
const path = require('node:path');
const readline = require('node:readline');
const { Limiter } = require(path.resolve(__dirname, '../../../bindings-node'));

async function main() {
  const [url, policyText, key, secondsText] = process.argv.slice(2);
  // A timeout a loaded machine does not reach: a call that timed out would be
  // decided by the local fallback, outside the shared limit.
  const limiter = new Limiter({ policy: JSON.parse(policyText), store: url, timeout: 5000 });
  await limiter.check(`warm-up:${key}`);
  process.stdout.write('ready\n');
  const rl = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => rl.once('line', resolve));
  rl.close();
  let admitted = 0;
  let decisions = 0;
  const started = process.hrtime.bigint();
  const end = started + BigInt(Math.round(Number(secondsText) * 1e9));
  // A few checks in flight at once, as a server's concurrent requests are.
  const worker = async () => {
    while (process.hrtime.bigint() < end) {
      for (let i = 0; i < 64; i++) {
        decisions++;
        if ((await limiter.check(key)).allowed) admitted++;
      }
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  process.stdout.write(JSON.stringify({ lang: 'node', admitted, decisions, seconds }) + '\n');
  limiter.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
