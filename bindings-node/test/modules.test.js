'use strict';
// The package's modules require each other without a circle (issue 33): each module's
// `require('./x')` calls, read from its source, form a graph with no cycle.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');

/** The package's own modules each top-level .js file requires (`./name`). */
function graph() {
  const edges = {};
  for (const file of fs.readdirSync(ROOT).filter((f) => f.endsWith('.js'))) {
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    edges[file] = [...text.matchAll(/require\('\.\/([\w.-]+?)(?:\.js)?'\)/g)].map((m) => `${m[1]}.js`);
  }
  return edges;
}

test('no module requires one that requires it back', () => {
  const edges = graph();
  const state = {};
  const visit = (file, trail) => {
    if (state[file] === 'done') return;
    assert.notEqual(state[file], 'open', `a circle: ${[...trail, file].join(' → ')}`);
    state[file] = 'open';
    for (const next of edges[file] || []) visit(next, [...trail, file]);
    state[file] = 'done';
  };
  for (const file of Object.keys(edges)) visit(file, []);
});
