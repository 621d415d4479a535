'use strict';
// The middleware plan vectors (tests/conformance/middleware/), played through the addon: how a
// middleware reads its options object is the core's rule (polylimit::options::middleware),
// the same as core/tests/middleware_plan.rs checks.
const test = require('node:test');
const assert = require('node:assert/strict');
const native = require('../native');
const { Limiter } = require('..');
const { vectorFiles } = require('./support');

/** A vector's options as a middleware gets them: `"<function>"` is a function, `limiter` a Limiter. */
function optionsOf(vector, limiter) {
  const options = {};
  for (const [name, value] of Object.entries(vector)) {
    if (value === '<function>') options[name] = () => {};
    else if (name === 'limiter') options[name] = limiter;
    else options[name] = value;
  }
  return options;
}

test('the middleware plan vectors', () => {
  const limiter = new Limiter({ policy: { rate: '1/s' } });
  let played = 0;
  for (const [file, doc] of vectorFiles('middleware')) {
    for (const c of doc.cases) {
      const plan = native.middlewarePlan(optionsOf(c.options, limiter), c.enclosing);
      const where = `${file}: ${c.name}`;
      assert.equal(plan.check, c.expect.check, `${where}: check`);
      assert.deepEqual([...plan.limiterFields].sort(), [...c.expect.limiter_fields].sort(), `${where}: limiter_fields`);
      assert.equal(plan.keyFunction, c.expect.key_function, `${where}: key_function`);
      assert.deepEqual(plan.replaces, c.expect.replaces, `${where}: replaces`);
      played++;
    }
  }
  assert.ok(played > 0);
  limiter.close();
});

test('a field holding undefined is not given', () => {
  const plan = native.middlewarePlan({ limiter: undefined, key: undefined, windowMs: 1000, limit: 2 }, false);
  assert.deepEqual(plan, {
    check: 'build',
    limiterFields: ['windowMs', 'limit'],
    keyFunction: false,
    replaces: ['policy', 'policies', 'key', 'count', 'windowMs', 'limit', 'max'],
  });
});
