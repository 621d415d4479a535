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
use crate::engine::CheckOptions;
use crate::error::Result;

/// A check sent by the host's own socket, to finish with its reply.
#[derive(Debug, Clone)]
pub struct SansIoCall {
    key: String,
    cost: i64,
    now: i64,
    rules: u64,
    started: Instant,
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
        let rules = self.rules_generation();
        let (cost, now) = self.engine().sans_io_start(key, options, out)?;
        Some(SansIoCall {
            key: key.to_string(),
            cost,
            now,
            rules,
            started: Instant::now(),
        })
    }

    /// The decision of `call` from its `reply` (one whole reply:
    /// [`sans_io_reply_len`]), or `None`: decide it with
    /// [`Limiter::check_with`] (nothing was charged).
    pub fn sans_io_finish(&self, call: &SansIoCall, reply: &[u8]) -> Option<Result<Decision>> {
        if self.rules_generation() != call.rules {
            // Charged under the rules before a reload: read by those rules
            // no more; the usual path decides again.
            return None;
        }
        self.engine()
            .sans_io_finish(&call.key, call.cost, call.now, reply, call.started.elapsed())
    }
}

impl Limiter {
    /// The decision of `call`, sent, when no reply came (the host's socket
    /// failed or stayed silent past the timeout): the policy's
    /// `on_store_error`, the breaker told of a failure. `None` only when the
    /// rules were reloaded since: decide it with [`Limiter::check_with`].
    pub fn sans_io_unanswered(&self, call: &SansIoCall) -> Option<Decision> {
        if self.rules_generation() != call.rules {
            return None;
        }
        self.engine()
            .sans_io_unanswered(&call.key, call.cost, call.started.elapsed())
    }
}

/// The length of the first whole reply in `bytes` (a host's socket's
/// buffer), or `None` while it is incomplete.
pub fn sans_io_reply_len(bytes: &[u8]) -> Option<usize> {
    crate::store::redis::reply_len(bytes)
}
