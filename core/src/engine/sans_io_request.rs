//! The engine's side of a request's sans-I/O path
//! ([`crate::Limiter::sans_io_request_start`]): the one (policy, key) target
//! a request's rules planned, sent by the host's socket as
//! [`Engine::decide`] would send it, and its [`CheckResult`] from the reply
//! as [`Engine::decide`] makes it (the HTTP layer then makes the outcome).
//! Any policy of the limiter, where the check path's prototype
//! (`sans_io.rs`) takes a limiter of one policy.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Backend, CheckOptions, Engine, Source};
use crate::breaker::BreakerState;
use crate::decision::CheckResult;
use crate::store::redis::{RedisCheck, RedisStore};

impl Engine {
    /// The store a sans-I/O check of (policy `i`, `key`) goes to, with its
    /// keys: a policy of a common shape on standalone Redis, no penalty,
    /// adaptive, sync, overrides, regions nor block cache. `starting`: also
    /// the breaker closed and no notice of ignored overrides due (the usual
    /// path sends it), else `None`.
    pub(super) fn sans_io_target_store(
        &self,
        i: usize,
        key: &str,
        starting: bool,
    ) -> Option<(&RedisStore, Vec<String>)> {
        let inner = &*self.inner;
        let Backend::Redis(redis) = &*inner.backend else {
            return None;
        };
        let compiled = inner.policies.get(i)?;
        if compiled.penalty.is_some()
            || compiled.params.adaptive.is_some()
            || compiled.policy.sync().is_some()
            || inner.overrides
            || inner.regions.is_some()
            || inner.block_cache.is_some()
        {
            return None;
        }
        if starting {
            let notice_due = inner.ignored_overrides.as_ref().is_some_and(|notice| {
                notice
                    .next
                    .first()
                    .is_some_and(|next| super::process_now_ms() >= next.load(Ordering::Relaxed))
            });
            if notice_due || inner.resilience.state() != BreakerState::Closed {
                return None;
            }
        }
        Some((redis, self.store_keys(i, key)))
    }

    /// Policy `i`'s check of `keys`, as [`Engine::decide`] makes it for one
    /// enforced target of a policy [`Engine::sans_io_target_store`] accepts.
    fn sans_io_target_check<'a>(&'a self, i: usize, keys: &'a [String]) -> RedisCheck<'a> {
        RedisCheck {
            params: &self.inner.policies[i].params,
            keys,
            shadow: false,
            penalty: None,
            lease: None,
            overrides: false,
            limit_record: None,
        }
    }

    /// Appends to `out` the call deciding (policy `i`, `key`) at `options`'
    /// cost (on the store's clock); returns the cost and the server's time
    /// it sends. `None`: the usual path decides (nothing appended).
    pub(crate) fn sans_io_target_start(
        &self,
        i: usize,
        key: &str,
        options: CheckOptions,
        out: &mut Vec<u8>,
    ) -> Option<(i64, i64)> {
        if options.now_ms.is_some() {
            return None;
        }
        let cost = self.validate(options).ok()?;
        let (redis, keys) = self.sans_io_target_store(i, key, true)?;
        let check = self.sans_io_target_check(i, &keys);
        let now = redis.sans_io_encode(&check, cost, out)?;
        Some((cost, now))
    }

    /// The result for (policy `i`, `key`) from `reply` (one whole reply,
    /// `elapsed` after the call was made) to the call
    /// [`Engine::sans_io_target_start`] made; the store's latency and the
    /// breaker's success counted as on the usual path. `None`: the usual
    /// path decides (a server error, so nothing was charged; or the limiter
    /// changed since).
    pub(crate) fn sans_io_target_finish(
        &self,
        i: usize,
        key: &str,
        cost: i64,
        now: i64,
        reply: &[u8],
        elapsed: Duration,
    ) -> Option<CheckResult> {
        let (redis, keys) = self.sans_io_target_store(i, key, false)?;
        let check = self.sans_io_target_check(i, &keys);
        let (store_now, verdicts) = redis.sans_io_decode(&check, now, cost, reply)?.ok()?;
        self.inner.resilience.answered(&self.inner.metrics, elapsed);
        let targets = [(i, key, false)];
        let allowed = verdicts.iter().all(|v| v.allowed);
        Some(self.result(&targets, store_now, allowed, verdicts, Source::Store, &[]))
    }

    /// The result for (policy `i`, `key`) of a call
    /// [`Engine::sans_io_target_start`] sent that got no reply: by the
    /// policy's `on_store_error`, as the usual path decides a call that timed
    /// out (it may have been charged: never sent again), the breaker told of
    /// the failure. `None`: the limiter changed since.
    pub(crate) fn sans_io_target_unanswered(
        &self,
        i: usize,
        key: &str,
        cost: i64,
        elapsed: Duration,
    ) -> Option<CheckResult> {
        self.sans_io_target_store(i, key, false)?;
        self.inner.resilience.unanswered(&self.inner.metrics, elapsed);
        Some(self.fallback(&[(i, key, false)], None, cost, true))
    }
}
