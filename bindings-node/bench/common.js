'use strict';
// Shared by the Node benchmarks: peer versions, medians, and the result lines
// recorded for bench/report.py (JSON lines appended to $POLYLIMIT_BENCH_OUT).
const fs = require('node:fs');
const path = require('node:path');

/** The installed version of an npm package (read from node_modules, whatever its `exports`). */
function version(name) {
  const file = path.join(__dirname, '..', 'node_modules', ...name.split('/'), 'package.json');
  return JSON.parse(fs.readFileSync(file, 'utf8')).version;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Appends one result line for bench/report.py. */
function record(line) {
  const out = process.env.POLYLIMIT_BENCH_OUT;
  if (out) fs.appendFileSync(out, `${JSON.stringify({ suite: 'node', ...line })}\n`);
}

module.exports = { version, median, record };
