//! The sans-I/O form of a one-policy decision (a prototype; Node uses it):
//! the host's own socket carries the bytes, the store only encodes the
//! call (the exact FCALL [`RedisStore::decide`] would send) and decodes its
//! reply (the same decoding). Anything the common case does not cover
//! (no live connection yet, a clock sample due, scripts instead of
//! functions, a server error in the reply) answers `None`, and the host
//! takes the usual path, which loads the library, samples the clock,
//! reconnects and decides by the breaker and fallback.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;

use super::args::{push_shape_args, RedisCheck, Shape};
use super::clock::Now;
use super::reply::parse_shape_reply;
use super::scripts::{general_only, library};
use super::state::RedisStore;
use crate::algorithm::Verdict;
use crate::error::Result;

impl RedisStore {
    /// Where a host's socket may reach the server itself: a standalone
    /// server over plain TCP, no AUTH, no SELECT, and each call's timeout.
    pub(crate) fn sans_io_address(&self) -> Option<(String, u16, Duration)> {
        self.link
            .plain_tcp_address()
            .map(|(host, port)| (host, port, self.link.call_timeout()))
    }

    /// Appends to `out` the FCALL of `check`'s shape function at the
    /// estimate of the server's clock, and returns that estimate; `None`
    /// (nothing appended): the usual path decides.
    pub(crate) fn sans_io_encode(&self, check: &RedisCheck<'_>, cost: i64, out: &mut Vec<u8>) -> Option<i64> {
        if !self.functions.load(Ordering::Relaxed) || self.link.is_cluster() || general_only() {
            return None;
        }
        let shape = Shape::of(std::slice::from_ref(check), false)?;
        let generation = self.link.live_generation()?;
        let Now::Estimate(now) = self.clock.now(generation, self.clock.local_us()) else {
            return None;
        };
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(library().shape_function(shape));
        push_shape_args(&mut cmd, shape, check, Some(now), cost);
        cmd.write_packed_command(out);
        Some(now)
    }

    /// The decision in `reply` (one whole RESP2 value, [`reply_len`]) to the
    /// call [`RedisStore::sans_io_encode`] made at `now`; `None`: a server
    /// error (nothing was charged), for the usual path to decide.
    pub(crate) fn sans_io_decode(
        &self,
        check: &RedisCheck<'_>,
        now: i64,
        cost: i64,
        reply: &[u8],
    ) -> Option<Result<(i64, Vec<Verdict>)>> {
        let value = redis::parse_redis_value(reply).ok()?;
        if matches!(value, Value::ServerError(_)) {
            return None;
        }
        Some(parse_shape_reply(value, check, Some(now), cost))
    }
}

/// The length of the first whole RESP2 value in `bytes`, or `None` while
/// it is incomplete (or not RESP2).
pub(crate) fn reply_len(bytes: &[u8]) -> Option<usize> {
    fn line(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let rest = bytes.get(at..)?;
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        Some((&rest[..end], at + end + 2))
    }
    fn number(text: &[u8]) -> Option<i64> {
        std::str::from_utf8(text).ok()?.parse().ok()
    }
    fn value(bytes: &[u8], at: usize, depth: usize) -> Option<usize> {
        if depth > 8 {
            return None;
        }
        let kind = *bytes.get(at)?;
        let (head, next) = line(bytes, at + 1)?;
        match kind {
            b'+' | b'-' | b':' => Some(next),
            b'$' => {
                let n = number(head)?;
                if n < 0 {
                    return Some(next);
                }
                let end = next + n as usize + 2;
                (bytes.len() >= end).then_some(end)
            }
            b'*' => {
                let n = number(head)?;
                let mut at = next;
                for _ in 0..n.max(0) {
                    at = value(bytes, at, depth + 1)?;
                }
                Some(at)
            }
            _ => None,
        }
    }
    value(bytes, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::reply_len;

    #[test]
    fn a_reply_is_framed_only_once_whole() {
        assert_eq!(reply_len(b":12\r\n:3"), Some(5));
        assert_eq!(reply_len(b":12\r"), None);
        assert_eq!(reply_len(b"*3\r\n:1\r\n:2\r\n:3\r\n+OK\r\n"), Some(16));
        assert_eq!(reply_len(b"*3\r\n:1\r\n:2\r\n"), None);
        assert_eq!(reply_len(b"$3\r\nabc\r\n"), Some(9));
        assert_eq!(reply_len(b"$3\r\nab"), None);
        assert_eq!(reply_len(b"-ERR Function not found\r\n"), Some(25));
        assert_eq!(reply_len(b"$-1\r\n"), Some(5));
    }
}
