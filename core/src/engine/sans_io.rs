//! The engine's side of the sans-I/O prototype ([`crate::Limiter::sans_io_start`]):
//! which checks it covers, and their decision from the store's reply, as
//! [`Engine::check_all`] makes it on the usual path.

use std::time::Duration;

use super::{Backend, CheckOptions, Engine, Source};
use crate::decision::Decision;
use crate::error::Result;
use crate::store::redis::{RedisCheck, RedisStore};

impl Engine {
    /// The store a sans-I/O check of `key` goes to, with its policy's keys:
    /// one policy of a common shape on standalone Redis, no penalty,
    /// overrides, sync, regions nor block cache. `starting`: also the breaker
    /// closed and no notice of ignored overrides due (the usual path sends
    /// it), else `None`; a check already sent is decoded whatever they became.
    fn sans_io_store(&self, key: &str, starting: bool) -> Option<(&RedisStore, Vec<String>)> {
        if self.inner.policies.len() != 1 {
            return None;
        }
        self.sans_io_target_store(0, key, starting)
    }

    /// The store's address for a host's own socket, and each call's timeout.
    pub(crate) fn sans_io_address(&self) -> Option<(String, u16, Duration)> {
        match &*self.inner.backend {
            Backend::Redis(redis) if !redis.is_cluster() => redis.sans_io_address(),
            _ => None,
        }
    }

    /// Appends to `out` the call deciding `key`; returns the cost and the
    /// server's time it sends. `None`: the usual path decides (nothing appended).
    pub(crate) fn sans_io_start(&self, key: &str, options: CheckOptions, out: &mut Vec<u8>) -> Option<(i64, i64)> {
        if options.now_ms.is_some() {
            return None;
        }
        let cost = self.validate(options).ok()?;
        let (redis, keys) = self.sans_io_store(key, true)?;
        let check = self.sans_io_check(&keys);
        let now = redis.sans_io_encode(&check, cost, out)?;
        Some((cost, now))
    }

    /// The decision of `key` from `reply` (one whole reply, `elapsed` after
    /// the call was made) to the call [`Engine::sans_io_start`] made; counted
    /// in the metrics as any check, the store's latency and the breaker's
    /// success too. `None`: the usual path decides (the server answered an
    /// error, so nothing was charged; or the limiter changed since).
    pub(crate) fn sans_io_finish(
        &self,
        key: &str,
        cost: i64,
        now: i64,
        reply: &[u8],
        elapsed: Duration,
    ) -> Option<Result<Decision>> {
        let (redis, keys) = self.sans_io_store(key, false)?;
        let check = self.sans_io_check(&keys);
        // A reply that does not decode is the usual path's too, which then decides by the fallback.
        let (store_now, verdicts) = redis.sans_io_decode(&check, now, cost, reply)?.ok()?;
        self.inner.resilience.answered(&self.inner.metrics, elapsed);
        let targets = [(0, key, false)];
        let allowed = verdicts.iter().all(|v| v.allowed);
        let result = self.result(&targets, store_now, allowed, verdicts, Source::Store, &[]);
        for (i, decision) in result.decisions.iter().enumerate() {
            self.inner.metrics.decision(i, decision);
        }
        Some(Ok(result.decision()))
    }

    /// The decision of a call [`Engine::sans_io_start`] sent that got no
    /// reply (the host's socket failed or timed out): by the policy's
    /// `on_store_error`, as the usual path decides a call it sent that
    /// timed out (the server may have charged it: it is never sent again),
    /// the breaker told of the failure. `None`: the limiter changed since.
    pub(crate) fn sans_io_unanswered(&self, key: &str, cost: i64, elapsed: Duration) -> Option<Decision> {
        self.sans_io_store(key, false)?;
        self.inner.resilience.unanswered(&self.inner.metrics, elapsed);
        let result = self.fallback(&[(0, key, false)], None, cost, true);
        for (i, decision) in result.decisions.iter().enumerate() {
            self.inner.metrics.decision(i, decision);
        }
        Some(result.decision())
    }

    /// The one policy's check of `keys`.
    fn sans_io_check<'a>(&'a self, keys: &'a [String]) -> RedisCheck<'a> {
        let compiled = &self.inner.policies[0];
        RedisCheck {
            params: &compiled.params,
            keys,
            shadow: false,
            penalty: None,
            lease: None,
            overrides: false,
            limit_record: None,
        }
    }
}
