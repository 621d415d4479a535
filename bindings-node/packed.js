'use strict';
// The reader of the core's packed records (polylimit::wire::packed, layout in the module doc
// of core/src/wire/packed.rs): every finished call crosses from the addon as one record, `u64`
// ctx, `u8` kind, payload, back to back in a batch. Each record becomes the value the binding
// resolves with (a decision `{ allowed, limit, … }`, an outcome `{ status, headers, … }`, …) or
// an error record `{ code, message, field, value, key }` (errors.js builds its class). Little-endian
// integers; a string is a `u32` byte length (0xFFFFFFFF: absent) and its UTF-8 bytes.
const native = require('./native');

/** The core's source names and error codes, by the index a record carries. */
const SOURCES = native.sourceNames();
const CODES = native.errorCodes();

const ABSENT = 0xffffffff;
const TWO_32 = 4294967296;

/** Reads records from a Buffer: `reset(buf, length)`, then `record()` until `done()`. */
class Reader {
  constructor() {
    this.buf = null;
    this.view = null;
    this.pos = 0;
    this.end = 0;
    // The batch's bytes as one Latin-1 string, made when its first string is read.
    this.text = null;
  }

  /** Reads `buf[0, length)` next; its DataView is kept while the same Buffer is read again. */
  reset(buf, length) {
    if (this.buf !== buf) {
      this.buf = buf;
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    }
    this.pos = 0;
    this.end = length;
    this.text = null;
  }

  done() {
    return this.pos >= this.end;
  }

  u8() {
    return this.buf[this.pos++];
  }

  u32() {
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }

  /** A `u64` as a Number (exact below 2^53, as every JavaScript number). */
  u64() {
    const p = this.pos;
    this.pos = p + 8;
    return this.view.getUint32(p, true) + this.view.getUint32(p + 4, true) * TWO_32;
  }

  /**
   * A string, or null when absent. An ASCII one (headers, names: nearly all) is a slice of the
   * batch's one Latin-1 string: a call into Buffer per string cost more than the rest of a
   * request's outcome.
   */
  string() {
    const n = this.u32();
    if (n === ABSENT) return null;
    const start = this.pos;
    const end = start + n;
    this.pos = end;
    const buf = this.buf;
    for (let i = start; i < end; i++) {
      if (buf[i] > 0x7f) return buf.utf8Slice(start, end);
    }
    if (this.text === null) this.text = buf.latin1Slice(0, this.end);
    return this.text.slice(start, end);
  }

  /** A decision: `{ allowed, limit, remaining, resetAfterMs, retryAfterMs, delayMs, source }`. */
  decision() {
    const bits = this.u8();
    const limit = this.u64();
    const remaining = this.u64();
    const resetAfterMs = this.u64();
    const retry = this.u64();
    const delayMs = this.u64();
    return {
      allowed: (bits & 1) !== 0,
      limit,
      remaining,
      resetAfterMs,
      retryAfterMs: bits & 4 ? retry : null,
      delayMs,
      source: SOURCES[this.u8()],
    };
  }

  /** An outcome's decision: `{ rule, policy, allowed, …, source, shadow }`. */
  ruleDecision() {
    const rule = this.string();
    const policy = this.string();
    const bits = this.buf[this.pos];
    const d = this.decision();
    return {
      rule,
      policy,
      allowed: d.allowed,
      limit: d.limit,
      remaining: d.remaining,
      resetAfterMs: d.resetAfterMs,
      retryAfterMs: d.retryAfterMs,
      delayMs: d.delayMs,
      source: d.source,
      shadow: (bits & 2) !== 0,
    };
  }

  /** A request's outcome: `{ status, headers, body, delayMs, decisions, trailers?, completion? }` (index.d.ts `Outcome`). */
  outcome() {
    const status = this.view.getUint16(this.pos, true);
    this.pos += 2;
    const hasBody = this.u8() === 1;
    const delayMs = this.u64();
    const headers = this.pairs();
    const trailers = this.pairs();
    const body = hasBody ? this.string() : null;
    const n = this.u32();
    const decisions = new Array(n);
    for (let d = 0; d < n; d++) decisions[d] = this.ruleDecision();
    const completion = this.string();
    const s = status === 0 ? null : status;
    // `trailers` and `completion` only when there are some: the object's keys are the core's
    // outcome's, in its order (polylimit::wire::OutcomeWire); one literal per shape.
    if (trailers.length === 0) {
      return completion === null
        ? { status: s, headers, body, delayMs, decisions }
        : { status: s, headers, body, delayMs, completion, decisions };
    }
    return completion === null
      ? { status: s, headers, body, trailers, delayMs, decisions }
      : { status: s, headers, body, trailers, delayMs, completion, decisions };
  }

  /** A count of `[name, value]` pairs and the pairs. */
  pairs() {
    const count = this.u32();
    const pairs = new Array(count);
    for (let h = 0; h < count; h++) {
      const name = this.string();
      pairs[h] = [name, this.string()];
    }
    return pairs;
  }

  /**
   * An error's record: `{ code, message, field, value, key }` (field and value null but for a
   * config error, key null but for a store error).
   */
  error() {
    const code = CODES[this.u8()];
    const message = this.string();
    const field = this.string();
    const value = this.string();
    return { code, message, field, value, key: this.string() };
  }

  /**
   * The next record: calls `ok(ctx, value)` or `fail(ctx, errorRecord)`. Values by kind:
   * unit undefined (a `Promise<void>` resolves with it), bool, count a number, a decision, decisions a list, acquired
   * `{ decision, leases: [{ policy, key, id }] }`, an outcome, json the parsed value.
   */
  record(ok, fail) {
    const ctx = this.u64();
    const kind = this.u8();
    switch (kind) {
      case 4:
        return ok(ctx, this.decision());
      case 7:
        return ok(ctx, this.outcome());
      case 0:
        return fail(ctx, this.error());
      case 1:
        return ok(ctx, undefined);
      case 2:
        return ok(ctx, this.u8() === 1);
      case 3:
        return ok(ctx, this.u64());
      case 5: {
        const list = new Array(this.u32());
        for (let i = 0; i < list.length; i++) list[i] = this.decision();
        return ok(ctx, list);
      }
      case 6: {
        const decision = this.decision();
        const leases = new Array(this.u32());
        for (let i = 0; i < leases.length; i++) {
          const policy = this.u32();
          const key = this.string();
          leases[i] = { policy, key, id: this.string() };
        }
        return ok(ctx, { decision, leases });
      }
      case 8:
        return ok(ctx, JSON.parse(this.string()));
      default:
        throw new Error(`polylimit: packed record of unknown kind ${kind} at byte ${this.pos - 1}`);
    }
  }
}

module.exports = { Reader, SOURCES, CODES };
