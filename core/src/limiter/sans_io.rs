//! A prototype sans-I/O path for one-policy checks: a host whose event loop
//! owns a socket to the Redis server sends the exact call the core would
//! send ([`Limiter::sans_io_start`]) and hands the reply back
//! ([`Limiter::sans_io_finish`]), with no hop to the runtime's thread.
//! Routing stays in the core: whatever the common case does not cover
//! (Cluster, Sentinel, TLS, AUTH or SELECT in the URL, several policies,
//! penalties, overrides, a breaker not closed, no connection yet, a clock
//! sample due, a server error) goes the usual way, which loads the library,
//! samples the clock, reconnects and applies the breaker and fallback. A
//! call whose host's socket fails or times out is decided by the fallback
//! ([`Limiter::sans_io_unanswered`]), as the usual path decides a call that
//! timed out: it may have reached the server, so it is never sent again.

use std::time::{Duration, Instant};

use super::Limiter;
use crate::decision::Decision;
use crate::engine::{CheckOptions, Engine};
use crate::error::Result;

/// A check sent by the host's own socket, to finish with its reply.
#[derive(Clone)]
pub struct SansIoCall {
    key: String,
    cost: i64,
    now: i64,
    started: Instant,
    /// The engine in force at the start: the call finishes on it, as a call
    /// of the usual path does, even after a reload (deciding it again on
    /// new rules would charge it twice).
    engine: Engine,
}

impl std::fmt::Debug for SansIoCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SansIoCall")
            .field("key", &self.key)
            .field("cost", &self.cost)
            .field("now", &self.now)
            .finish()
    }
}

impl Limiter {
    /// `(host, port, timeout)` of the server a host's own plain-TCP socket
    /// may carry checks to (no handshake needed), or `None`: every check
    /// goes the usual way.
    pub fn sans_io_address(&self) -> Option<(String, u16, Duration)> {
        self.engine().sans_io_address()
    }

    /// Appends to `out` the bytes of the call deciding `key` (as
    /// [`Limiter::check_with`] would), or returns `None` with nothing
    /// appended: decide it with [`Limiter::check_with`].
    pub fn sans_io_start(&self, key: &str, options: CheckOptions, out: &mut Vec<u8>) -> Option<SansIoCall> {
        let engine = self.engine();
        let (cost, now) = engine.sans_io_start(key, options, out)?;
        Some(SansIoCall {
            key: key.to_string(),
            cost,
            now,
            started: Instant::now(),
            engine,
        })
    }

    /// The decision of `call` from its `reply` (one whole reply:
    /// [`sans_io_reply_len`]), or `None`: decide it with
    /// [`Limiter::check_with`] (nothing was charged). A call finishes on
    /// the policies it started with, a reload since or not.
    pub fn sans_io_finish(&self, call: &SansIoCall, reply: &[u8]) -> Option<Result<Decision>> {
        call.engine
            .sans_io_finish(&call.key, call.cost, call.now, reply, call.started.elapsed())
    }
}

impl Limiter {
    /// The decision of `call`, sent, when no reply came (the host's socket
    /// failed or stayed silent past the timeout): the policy's
    /// `on_store_error`, the breaker told of a failure, on the policies it
    /// started with. `None`: decide it with [`Limiter::check_with`].
    pub fn sans_io_unanswered(&self, call: &SansIoCall) -> Option<Decision> {
        call.engine
            .sans_io_unanswered(&call.key, call.cost, call.started.elapsed())
    }
}

/// The length of the first whole reply in `bytes` (a host's socket's
/// buffer), or `None` while it is incomplete.
pub fn sans_io_reply_len(bytes: &[u8]) -> Option<usize> {
    crate::store::redis::reply_len(bytes)
}
