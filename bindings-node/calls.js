'use strict';
// The calls in flight and the one way their results come back: every async call of every
// Limiter (of this thread) is submitted to the addon's one bridge (src/bridge.rs, over the
// core's polylimit::bridge) with a ctx, the id its promise waits under here. The bridge wakes
// this thread when records are ready; `drain` takes them into a reused buffer and settles each
// promise with packed.js's decoding of its record. One bridge for the thread, not one per
// limiter: the promises of every limiter settle in one pass per wake-up, and a limiter owns no
// threadsafe function, so an unreachable one is collected like any object.
const native = require('./native');
const { Reader } = require('./packed');
const { fromNative, fromRecord } = require('./errors');

/**
 * The settle functions of the calls in flight, by id: `get`, `set`, `delete`, `size`, as a Map.
 * Not a Map: a Map that churns (one entry per request, deleted when settled) leaves its
 * replaced hash tables in the old generation with the entries they held, and those keep each
 * request's promise chain, outcome and response alive through the scavenges: under load every
 * scavenge promoted ~1.3 MB, and the GC helper threads took 3-4 us per request (1-1.6 with
 * this; the test `pending.test.js` watches the promotion).
 */
class Pending {
  constructor() {
    this.slots = Object.create(null);
    this.size = 0;
  }
  get(id) {
    return this.slots[id];
  }
  set(id, settle) {
    if (this.slots[id] === undefined) this.size++;
    this.slots[id] = settle;
  }
  delete(id) {
    if (this.slots[id] !== undefined) {
      this.size--;
      delete this.slots[id];
    }
  }
}

function noop() {}

const pending = new Pending();
let next = 0;
// The bridge's wake-up does not hold the process open; a timer does, while calls are in flight.
let keepAlive;
function idle() {
  if (pending.size === 0 && keepAlive !== undefined) {
    clearInterval(keepAlive);
    keepAlive = undefined;
  }
}

// Records under an id from 2^32 up go to a long-lived listener (a limiter's `onAnomaly`), not
// to a promise; a listener does not keep the process alive.
const listeners = new Map();
let nextListener = 2 ** 32;

/** The id whose records `handler(value)` receives until `unlisten(id)`. */
function listen(handler) {
  const id = nextListener++;
  listeners.set(id, handler);
  return id;
}

function unlisten(id) {
  listeners.delete(id);
}

function resolve(id, value) {
  const settle = pending.get(id);
  if (settle === undefined) {
    const listener = listeners.get(id);
    if (listener !== undefined) listener(value);
    return;
  }
  pending.delete(id);
  settle.resolve(value);
}

function reject(id, record) {
  const settle = pending.get(id);
  pending.delete(id);
  settle.reject(fromRecord(record));
}

// The buffer the addon copies each batch of records into when it fits (else it hands a new one).
const scratch = Buffer.allocUnsafeSlow(1 << 18);
const reader = new Reader();
let bridge = null;
// How many calls the last wake-up settled: more than one, and their callers' next calls are a
// load the bridge batches (`quiet`).
let lastDrained = 0;

/** Settles every finished call: takes batches until none is left (which re-arms the wake-up). */
function drain() {
  let settled = 0;
  for (;;) {
    const got = bridge.take();
    if (got === 0) break;
    if (typeof got === 'number') reader.reset(scratch, got);
    else reader.reset(got, got.length);
    while (!reader.done()) {
      reader.record(resolve, reject);
      settled++;
    }
  }
  lastDrained = settled;
  idle();
}

/** The thread's bridge (opened by the first limiter): `limiter.useBridge(bridge())`. */
function nativeBridge() {
  if (bridge === null) bridge = new native.NativeBridge(drain, scratch);
  return bridge;
}

/** A promise settled by the call's record; `send(id)` submits the call (a throw rejects it). */
function start(send) {
  return new Promise((resolve, reject) => {
    next = (next + 1) >>> 0;
    const id = next;
    pending.set(id, { resolve, reject });
    if (keepAlive === undefined) keepAlive = setInterval(noop, 1 << 30);
    try {
      send(id);
    } catch (e) {
      pending.delete(id);
      idle();
      reject(fromNative(e));
    }
  });
}

/** Rejects the calls `ids` with `error` (they could not be submitted). */
function failAll(ids, error) {
  for (const id of ids) {
    const settle = pending.get(id);
    pending.delete(id);
    if (settle) settle.reject(error);
  }
  idle();
}

/**
 * Whether no call of this thread is in flight and the last wake-up settled at most one
 * (`sansio.js` carries a check only then: one call at a time, not the first of a batch's callers).
 */
const quiet = () => pending.size === 0 && lastDrained <= 1;

/** Settles call `id` with `value` (a record `sansio.js` decoded). */
function settle(id, value) {
  resolve(id, value);
  idle();
}

/** Rejects call `id` with the error in `record` (`sansio.js`'s). */
function fail(id, record) {
  reject(id, record);
  idle();
}

/** How many listeners are registered (for the tests). */
const listening = () => listeners.size;

module.exports = { nativeBridge, start, failAll, listen, unlisten, listening, quiet, settle, fail };
