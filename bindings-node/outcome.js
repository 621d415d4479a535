'use strict';
// A request's outcome (checkRequest, peekRequest, the middlewares) or a call's error, read
// from the addon's batch (src/outcome.rs), the one way they cross from the addon: numbers
// (in a scratch Float64Array this module lends the addon, reused by every batch) and one
// string holding the batch's texts one after another, each text's length among the numbers.
// Every value is the core's (status, header names and values, body, completion token,
// decisions); nothing is computed here. The outcome has the shape `checkRequest` resolves
// with: `{ status, headers, body, delayMs, completion?, decisions }` (index.d.ts `Outcome`).

/** Numbers in a decision record (polylimit::wire::DECISION_RECORD_LEN). */
const DECISION_RECORD_LEN = 8;

/**
 * Sets the fields of the core's decision record (polylimit::wire::decision_record) at
 * `nums[r]` on `target` (after the fields it has): `allowed, limit, remaining, resetAfterMs,
 * retryAfterMs, delayMs, source` (`sources`: the core's source names by index). The one reader
 * of a decision record: `check`'s decisions (index.js) and each decision of an outcome.
 */
function decisionInto(target, nums, r, sources) {
  const retry = nums[r + 5];
  target.allowed = nums[r + 1] === 1;
  target.limit = nums[r + 2];
  target.remaining = nums[r + 3];
  target.resetAfterMs = nums[r + 4];
  target.retryAfterMs = retry < 0 ? null : retry;
  target.delayMs = nums[r + 6];
  target.source = sources[nums[r + 7]];
  return target;
}

/** The Float64Array the addon copies each batch's numbers into (src/outcome.rs), when they fit. */
function scratchArray() {
  return new Float64Array(16384);
}

/**
 * Reads one batch: calls `settle(id, outcome)` for each outcome and `fail(id, text)` for
 * each error (`text`: the error record as JSON). `given`: how many numbers are in `scratch`,
 * or a Float64Array of them. `sources`: the core's source names by index.
 */
function readBatch(given, scratch, text, sources, settle, fail) {
  const nums = typeof given === 'number' ? scratch : given;
  const length = typeof given === 'number' ? given : given.length;
  let i = 0;
  let pos = 0;
  while (i < length) {
    const id = nums[i];
    if (nums[i + 1] === 1) {
      const end = pos + nums[i + 2];
      fail(id, text.slice(pos, end));
      pos = end;
      i += 3;
      continue;
    }
    const status = nums[i + 2];
    const delayMs = nums[i + 3];
    const count = nums[i + 4];
    const bodyLength = nums[i + 5];
    const completionLength = nums[i + 6];
    const decisionCount = nums[i + 7];
    i += 8;
    const headers = new Array(count);
    for (let h = 0; h < count; h++) {
      const name = text.slice(pos, (pos += nums[i]));
      headers[h] = [name, text.slice(pos, (pos += nums[i + 1]))];
      i += 2;
    }
    const body = bodyLength < 0 ? null : text.slice(pos, (pos += bodyLength));
    const outcome =
      completionLength < 0
        ? { status: status < 0 ? null : status, headers, body, delayMs, decisions: null }
        : {
            status: status < 0 ? null : status,
            headers,
            body,
            delayMs,
            completion: text.slice(pos, (pos += completionLength)),
            decisions: null,
          };
    const decisions = new Array(decisionCount);
    for (let d = 0; d < decisionCount; d++) {
      const rule = text.slice(pos, (pos += nums[i]));
      const policy = text.slice(pos, (pos += nums[i + 1]));
      const shadow = nums[i + 2] === 1;
      // The core's decision record, its first number unused: `{ rule, policy, allowed, …, source, shadow }`.
      const decision = decisionInto({ rule, policy }, nums, i + 3, sources);
      decision.shadow = shadow;
      decisions[d] = decision;
      i += 3 + DECISION_RECORD_LEN;
    }
    outcome.decisions = decisions;
    settle(id, outcome);
  }
}

/** Sets an outcome's headers on a Node response, names as the core spells them. */
function setHeaders(outcome, res) {
  const headers = outcome.headers;
  for (let i = 0; i < headers.length; i++) res.setHeader(headers[i][0], headers[i][1]);
}

module.exports = { DECISION_RECORD_LEN, decisionInto, readBatch, scratchArray, setHeaders };
