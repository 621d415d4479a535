'use strict';
// A prototype sans-I/O path for `check(key)` (no options) while no other call of this thread is in
// flight (the latency case; under load, the bridge writes the calls of a turn together): the limiter's own net.Socket, on this event loop, carries the exact call
// the core encodes (`sansIoStart`), and the core decodes each reply (`sansIoFeed`), with no hop
// to the core's runtime thread and back. The core decides which checks it covers (one common
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
    // The checks sent, in order: `{ key, resolve, reject }`.
    this.waiting = [];
    this.head = 0;
    this.closed = false;
    // Re-armed by each send (`refresh`), never cleared (a cleared timer cannot be refreshed): when
    // it fires with a check waiting, that check (the only one: one is sent at a time) is late.
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
    if (this.closed || this.head < this.waiting.length || !calls.quiet()) return null;
    const socket = this.socket || this.open();
    if (socket.connecting) return null;
    const bytes = this.native.sansIoStart(key);
    if (bytes === null) return null;
    return new Promise((resolve, reject) => {
      this.waiting.push({ key, resolve, reject });
      socket.ref();
      socket.write(bytes);
      this.timer.refresh();
    });
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

  received(chunk) {
    this.settleAll(this.native.sansIoFeed(chunk, scratch));
    if (this.head >= this.waiting.length) {
      this.waiting.length = 0;
      this.head = 0;
      if (this.closed) this.drop();
      else if (this.socket) this.socket.unref();
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
    if (value === undefined) this.usual(w.key).then(w.resolve, w.reject);
    else w.resolve(value);
  }

  fail(record) {
    const w = this.waiting[this.head++];
    w.reject(fromRecord(record));
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
    this.settleAll(this.native.sansIoReset(scratch));
    this.waiting = [];
    this.head = 0;
  }

  /** No more checks; the socket goes once those sent are answered (a closed limiter's calls in flight still settle). */
  close() {
    this.closed = true;
    if (this.head >= this.waiting.length) this.drop();
  }
}

module.exports = { SansIo };
