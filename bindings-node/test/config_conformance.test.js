'use strict';
// The configuration vectors of tests/conformance/config/ under JavaScript's names: each case
// resolves through effectiveConfig to the expected configuration or error. The semantics are
// core/tests/config_conformance.rs's: a case runs here iff it has no `options` or has
// `options.camel`; `rules` goes into the `rules` option; a `rulesFile` is relative to the vector
// directory; the expected configuration is a subset of the effective one.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { effectiveConfig, ConfigError } = require('..');

const DIR = path.resolve(__dirname, '../../tests/conformance/config');

function cases() {
  const out = [];
  for (const file of fs.readdirSync(DIR).filter((f) => f.endsWith('.json')).sort()) {
    const doc = JSON.parse(fs.readFileSync(path.join(DIR, file), 'utf8'));
    for (const c of doc.cases) out.push([`${path.basename(file, '.json')}: ${c.name}`, c]);
  }
  return out;
}

/** The options this runner passes for `c`, or null when the case is not written for JavaScript. */
function optionsFor(c) {
  let options = {};
  if (c.options !== undefined) {
    if (c.options.camel === undefined) return null;
    options = structuredClone(c.options.camel);
  }
  if (c.rules !== undefined) options.rules = c.rules;
  if (typeof options.rulesFile === 'string') options.rulesFile = path.join(DIR, options.rulesFile);
  return options;
}

/** `expected` is found in `actual`: objects by the keys `expected` lists, lists item by item. */
function contains(actual, expected, at) {
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
    if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) {
      throw new Error(`${at}: got ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
    }
    for (const [k, v] of Object.entries(expected)) {
      if (!(k in actual)) throw new Error(`${at}.${k} is missing in ${JSON.stringify(actual)}`);
      contains(actual[k], v, `${at}.${k}`);
    }
  } else if (Array.isArray(expected) && Array.isArray(actual) && actual.length === expected.length) {
    expected.forEach((v, i) => contains(actual[i], v, `${at}[${i}]`));
  } else if (!sameValue(actual, expected)) {
    throw new Error(`${at}: got ${JSON.stringify(actual)}, expected ${JSON.stringify(expected)}`);
  }
}

function sameValue(a, b) {
  try {
    assert.deepStrictEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

/** Runs `fn` with the case's environment variables set, restoring the previous ones after. */
function withEnv(env, fn) {
  const saved = {};
  for (const [k, v] of Object.entries(env || {})) {
    saved[k] = process.env[k];
    process.env[k] = v;
  }
  try {
    return fn();
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

function run(c, options) {
  let got;
  let error;
  withEnv(c.env, () => {
    try {
      got = effectiveConfig(options);
    } catch (e) {
      error = e;
    }
  });
  const { config, error: want } = c.expect;
  if (config !== undefined && want === undefined) {
    if (error) throw new Error(`error ${error.message}`);
    contains(got, config, 'config');
  } else if (want !== undefined && config === undefined) {
    if (!error) throw new Error(`built ${JSON.stringify(got)}, expected an error for ${JSON.stringify(want.field)}`);
    const field = typeof want.field === 'string' ? want.field : want.field.camel;
    if (!(error instanceof ConfigError) || error.field !== field) {
      throw new Error(`error ${error.name} ${JSON.stringify(error.field)}: ${error.message}, expected one for field ${field}`);
    }
  } else {
    throw new Error('a case expects a config or an error');
  }
}

test('configuration vectors resolve under JavaScript names as in the core', () => {
  const all = cases();
  const failures = [];
  let runs = 0;
  for (const [name, c] of all) {
    const options = optionsFor(c);
    if (options === null) continue;
    runs += 1;
    try {
      run(c, options);
    } catch (e) {
      failures.push(`${name}: ${e.message}`);
    }
  }
  assert.ok(runs >= 30, `${runs} configuration vectors ran`);
  assert.deepEqual(failures, [], `${failures.length} of ${runs} cases failed:\n${failures.join('\n')}`);
});
