'use strict';
// A sans-I/O path for `check(key)` (no options) and for the middlewares' requests (`_checkHttp`):
// the limiter's own net.Socket, on this event loop, carries the exact call the core encodes
// (`sansIoStart`, or `checkHttpBatched` with `sansIo`), and the core decodes each reply
// (`sansIoFeed`) into the decision or the outcome the bridge would give, with no hop to the
// core's runtime thread and back. Calls are pipelined: up to MAX_IN_FLIGHT wait on the socket,
// their replies come back in the order sent; a call sent while others wait, and a middleware's
// request always, goes with the rest of its event-loop turn in one write (a write per call cost the
// event loop more than the hop it saved); only a lone check(key) is written at once. The core decides which calls it covers (one common
// policy on standalone plain-TCP Redis without AUTH/SELECT, breaker closed, a live connection and
// a fresh clock estimate) and answers `null` / a unit record for the rest, which go through the
// bridge as usual (script loading, clock samples, reconnects, the breaker and fallback). A socket
// that fails or stays silent past the limiter's timeout is dropped, and the core decides the checks
// it carried by their policy's on_store_error, as it decides a call of its own that timed out
// (they may have been charged: none is sent again). Nothing here encodes or decodes Redis.
const net = require('node:net');
const { Reader } = require('./packed');
const { fromRecord } = require('./errors');
const calls = require('./calls');

// The buffer the addon copies each reply batch's records into (else it hands a new one).
const scratch = Buffer.allocUnsafeSlow(1 << 16);
const reader = new Reader();
// The socket of a SansIo that was collected (its limiter dropped unclosed) goes with it: the
// socket's listeners hold their SansIo only weakly, so an open socket keeps no limiter alive.
const orphans = new FinalizationRegistry((socket) => socket.destroy());

// At most this many calls wait on the socket; more go through the bridge.
const MAX_IN_FLIGHT = 256;
// 'requests' (the default): a check only while no other call of this thread is in flight, the
// middlewares' requests pipelined, each turn's in one write (`sent`); 'single': requests through
// the bridge (the default until the requests of a turn went in one write: a request written at
// once when the socket was idle cost Express a write of its own per turn); 'pipeline': checks
// pipelined too (a lower CPU per decision, no steady gain in throughput at 64 in flight); 'off':
// every call through the bridge. Measured in two runs of 5 alternating rounds of
// bench/sans_io_ab.js (docs/performance.md): app CPU per request 'requests' against 'single'
// Fastify 36.9 / 46.8 and 39.8 / 47.4 us, Express 133.1 / 151.2 and 141.7 / 149.4 us; lower in
// 28 of 30 rounds over three runs of both frameworks (one tie, one higher); redis-server 6.5 / 9.2
// and 8.1 / 11.9 us (first run). setMode is for A/B benches and tests.
const DEFAULT_MODE = 'requests';
let mode = DEFAULT_MODE;
function setMode(m) {
  if (!['requests', 'pipeline', 'single', 'off'].includes(m)) throw new Error(`sans-I/O mode: ${m}`);
  mode = m;
}

/**
 * The socket's and the timer's listeners, holding `sansIo` only weakly. (Closures made in its
 * constructor would hold it through the scope they share with those that use `this`.)
 */
function weakListeners(sansIo) {
  const self = new WeakRef(sansIo);
  return {
    data: (chunk) => self.deref()?.received(chunk),
    gone: () => self.deref()?.drop(),
    late: () => self.deref()?.silent(),
  };
}

class SansIo {
  /**
   * @param native the NativeLimiter
   * @param address `{ host, port, timeoutMs }` from `native.sansIoAddress()`
   * @param usual `(key) => Promise`: the check through the bridge
   */
  constructor(native, address, usual) {
    this.native = native;
    this.address = address;
    this.usual = usual;
    this.socket = null;
    // The calls sent, in order: a check's `{ key, resolve, reject }`, or a request's call id.
    this.waiting = [];
    this.head = 0;
    // Calls ever sent and answered, and who waits for the answers of those sent so far (`answered`).
    this.sentCount = 0;
    this.answeredCount = 0;
    this.answerWaiters = [];
    this.closed = false;
    // The bytes of the calls not written yet: written together once per event-loop turn.
    this.outbox = [];
    this.flush = () => {
      const out = this.outbox;
      this.outbox = [];
      if (this.socket !== null && out.length > 0) this.socket.write(out.length === 1 ? out[0] : Buffer.concat(out));
    };
    // Re-armed by a send to an idle socket and by each reply that leaves calls waiting (`refresh`),
    // never cleared (a cleared timer cannot be refreshed): when it fires with a call waiting, the
    // server has been silent for the timeout while the oldest waited (replies come in order).
    const weak = weakListeners(this);
    this.timer = setTimeout(weak.late, address.timeoutMs);
    this.timer.unref();
    this.onData = weak.data;
    this.onGone = weak.gone;
    this.settleOne = (ctx, value) => this.settle(value);
    this.failOne = (ctx, record) => this.fail(record);
  }

  /** `check(key)` through the socket, or null: decide it through the bridge. */
  check(key) {
    if (mode === 'off') return null;
    if (mode !== 'pipeline' && (this.head < this.waiting.length || !calls.quiet())) return null;
    if (!this.ready()) return null;
    const bytes = this.native.sansIoStart(key);
    if (bytes === null) return null;
    return new Promise((resolve, reject) => this.sent({ key, resolve, reject }, bytes));
  }

  /** Whether a call may go on the socket now (opening it if need be). */
  ready() {
    if (this.closed || this.waiting.length - this.head >= MAX_IN_FLIGHT) return false;
    const socket = this.socket || this.open();
    return !socket.connecting;
  }

  /** Whether a middleware's request may go on the socket now (`_checkHttp`). */
  readyForRequest() {
    return (mode === 'requests' || mode === 'pipeline') && this.ready();
  }

  /** Writes a call's `bytes` (the calls of one turn in one write); `entry` awaits its reply. */
  sent(entry, bytes) {
    const socket = this.socket;
    const idle = this.head >= this.waiting.length;
    this.waiting.push(entry);
    this.sentCount++;
    if (idle) {
      socket.ref();
      this.timer.refresh();
      // A lone check (the latency case): written at once. A middleware's request waits for the
      // rest of its turn: under load the requests that arrive in one event-loop turn go in one write
      // (written at once, the first of each turn paid a write of its own: Express then lost to
      // express-rate-limit); alone, it is written after this turn's other callbacks.
      if (typeof entry !== 'number') {
        socket.write(bytes);
        return;
      }
    }
    if (this.outbox.length === 0) setImmediate(this.flush);
    this.outbox.push(bytes);
  }

  open() {
    const socket = net.connect({ host: this.address.host, port: this.address.port, noDelay: true });
    socket.unref();
    socket.on('data', this.onData);
    socket.on('error', this.onGone);
    socket.on('close', this.onGone);
    orphans.register(this, socket, socket);
    this.socket = socket;
    return socket;
  }

  /**
   * `null` when no call waits on the socket, else a promise (never rejected) resolved once every
   * call sent so far is answered: a call through the bridge started after it reaches the store after them.
   */
  answered() {
    if (this.answeredCount >= this.sentCount) return null;
    return new Promise((resolve) => this.answerWaiters.push({ target: this.sentCount, resolve }));
  }

  /** Resolves the `answered` promises whose calls are all answered. */
  wakeAnswerWaiters() {
    if (this.answerWaiters.length === 0) return;
    const still = [];
    for (const w of this.answerWaiters) {
      if (this.answeredCount >= w.target) w.resolve();
      else still.push(w);
    }
    this.answerWaiters = still;
  }

  received(chunk) {
    this.settleAll(this.native.sansIoFeed(chunk, scratch));
    this.wakeAnswerWaiters();
    if (this.head >= this.waiting.length) {
      this.waiting.length = 0;
      this.head = 0;
      if (this.closed) this.drop();
      else if (this.socket) this.socket.unref();
    } else {
      this.timer.refresh();
      // Under a steady load the socket is never idle: drop the answered entries now and then.
      if (this.head >= 1024) {
        this.waiting = this.waiting.slice(this.head);
        this.head = 0;
      }
    }
  }

  /** Settles a check per record the addon gave (`got`: bytes in `scratch`, or a Buffer), in the order sent. */
  settleAll(got) {
    if (got === 0) return;
    if (typeof got === 'number') reader.reset(scratch, got);
    else reader.reset(got, got.length);
    while (!reader.done()) reader.record(this.settleOne, this.failOne);
  }

  settle(value) {
    const w = this.waiting[this.head++];
    this.answeredCount++;
    if (typeof w === 'number') {
      // A request: unit means the core submitted it the usual way, under its id.
      if (value !== undefined) calls.settle(w, value);
    } else if (value === undefined) this.usual(w.key).then(w.resolve, w.reject);
    else w.resolve(value);
  }

  fail(record) {
    const w = this.waiting[this.head++];
    this.answeredCount++;
    if (typeof w === 'number') calls.fail(w, record);
    else w.reject(fromRecord(record));
  }

  /** No reply within the timeout: the socket is dropped. */
  silent() {
    if (this.head < this.waiting.length) this.drop();
  }

  /** Drops the socket (the next check reconnects); the core decides its waiting checks by the fallback. */
  drop() {
    const socket = this.socket;
    if (socket === null) return;
    this.socket = null;
    socket.off('data', this.onData);
    orphans.unregister(socket);
    socket.destroy();
    // Calls not written yet are decided with those sent (the fallback), none sent later.
    this.outbox = [];
    this.settleAll(this.native.sansIoReset(scratch));
    this.waiting = [];
    this.head = 0;
    this.answeredCount = this.sentCount;
    this.wakeAnswerWaiters();
  }

  /** No more checks; the socket goes once those sent are answered (a closed limiter's calls in flight still settle). */
  close() {
    this.closed = true;
    if (this.head >= this.waiting.length) this.drop();
  }
}

module.exports = { SansIo, setMode, DEFAULT_MODE, MAX_IN_FLIGHT };
