//! Policy-wide limits: other numbers for every key of one policy, set, read
//! and removed at runtime (`set_limit`, `get_limit`, `remove_limit`), kept in
//! the store so every process on it applies them at its next check.
//!
//! Opt-in with the per-key overrides (`overrides: true`), and the same rules:
//! the algorithm, penalty, adaptive layer and fallback stay the policy's; a
//! limit replaces its `rate` and `burst`, validated as an override's
//! ([`OverrideSpec`], errors name the field); a TTL counts on the store's
//! clock. Precedence: a per-key override, then the policy-wide limit, then
//! the policy's own numbers. Headers show the limit in force.
//!
//! Where the limit lives:
//! - Redis: one record per policy, `<prefix>:<variant>:<policy>:{%limit}`
//!   (`%` is escaped in every user key, so no key's state is named so), text
//!   `l1 <count> <period_ms> <burst> <max_delay> <until_ms> <generation>`,
//!   with a Redis TTL equal to the limit's. On a single server and Sentinel
//!   the decision script reads it among its keys, in the same atomic call
//!   that decides (so the next check of any process applies it).
//!   Redis Cluster cannot read a key of another slot in a script:
//!   there, each process reads the record with a plain `GET` before a
//!   check, at most once per [`CLUSTER_REFRESH_MS`] per policy (on the
//!   limiter's breaker clock, which tests move), and passes it to the script;
//!   a change reaches every other process within that bound, and the process
//!   that made it at once. The record's end by TTL is exact everywhere (the
//!   script compares `until_ms` with the decision's clock).
//! - Memory store: a map per policy, read under its lock by each decision.
//!
//! The state of a key under a limit lives in keys of its own
//! (`…}:limit:state`, beside `…}:limit:gen`, which names the generation of
//! the limit that state was charged under): a check whose limit has another
//! generation drops that state first, so a changed limit starts every key
//! fresh under its numbers, and removing it returns to the policy's own
//! state (as the limit found it, or expired meanwhile). Never state read
//! with another limit's numbers. On the memory store, setting or removing a
//! limit clears its state at once. A refund goes to the state that was
//! charged ([`Charged::Limit`]): nothing when the limit is gone or changed.
//!
//! Each change is audited: `polylimit_limit_changes_total{policy,action}`
//! (action `set` or `remove`, counted by the process that made it) and one
//! JSON line on stderr: `{"event":"polylimit.limit_changed", ...}`.

use serde_json::{json, Value};

use crate::algorithm::Params;
use crate::engine::{process_now_ms, Engine};
use crate::error::Result;
use crate::overrides::{now_arg, rate_text, OverrideSpec};
use crate::store::memory::LIMIT_SLOT;
use crate::store::overrides::{limit_script_sha, parse_limit_record, record, LimitEntry, LIMIT_SCRIPT};

pub use crate::store::overrides::CLUSTER_REFRESH_MS;

/// A policy-wide limit in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyLimit {
    /// The policy's name.
    pub policy: String,
    /// The limit's rate, `"<count>/<period>"`.
    pub rate: String,
    /// Its bucket capacity (the limit per window for window algorithms).
    pub burst: u64,
    /// The `limit` of its decisions (as `burst`).
    pub limit: u64,
    /// When it ends, in ms since the epoch (the store's clock); `None`: never.
    pub expires_at_ms: Option<i64>,
}

impl PolicyLimit {
    /// `{policy, rate, burst, limit, expires_at_ms}`, the form the bindings return.
    pub fn to_value(&self) -> Value {
        json!({
            "policy": self.policy,
            "rate": self.rate,
            "burst": self.burst,
            "limit": self.limit,
            "expires_at_ms": self.expires_at_ms,
        })
    }
}

/// A generation for a new limit: random, below 2^53 (exact in Lua's numbers).
fn new_generation() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::getrandom(&mut bytes).is_err() {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        bytes = (process_now_ms() as u64 ^ n << 40 ^ u64::from(std::process::id()) << 20).to_le_bytes();
    }
    (u64::from_le_bytes(bytes) & ((1 << 53) - 1)).max(1)
}

/// The JSON line a change writes on stderr.
fn audit_line(action: &str, limit: Option<&PolicyLimit>, policy: &str, ttl_ms: Option<i64>) -> Value {
    let process = std::env::args()
        .next()
        .map(|a| a.rsplit(['/', '\\']).next().unwrap_or_default().to_string())
        .unwrap_or_default();
    json!({
        "event": "polylimit.limit_changed",
        "action": action,
        "policy": policy,
        "rate": limit.map(|l| l.rate.clone()),
        "burst": limit.map(|l| l.burst),
        "ttl_ms": ttl_ms,
        "expires_at_ms": limit.and_then(|l| l.expires_at_ms),
        "pid": std::process::id(),
        "process": process,
    })
}

impl Engine {
    fn limit_of(&self, i: usize, params: &Params, until: Option<i64>) -> PolicyLimit {
        PolicyLimit {
            policy: self.policy_at(i).name().to_string(),
            rate: rate_text(params.count, params.period),
            burst: params.burst as u64,
            limit: params.burst as u64,
            expires_at_ms: until,
        }
    }

    fn audit_limit(&self, i: usize, action: &'static str, limit: Option<&PolicyLimit>, ttl_ms: Option<i64>) {
        self.count_limit_change(i, action);
        let line = audit_line(action, limit, self.policy_at(i).name(), ttl_ms);
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }

    /// Sets the policy-wide limit of `spec.policy`; returns it as stored.
    pub(crate) async fn set_limit(&self, spec: &OverrideSpec) -> Result<PolicyLimit> {
        self.check_open()?;
        let (i, params, ttl_ms) = self.checked_spec(spec)?;
        let limit = match self.redis_store() {
            None => {
                let now = spec.now_ms.unwrap_or_else(process_now_ms);
                let until = (ttl_ms > 0).then(|| now + ttl_ms);
                let memory = self.memory_store();
                let slot = self.records_slot(i);
                let entry = LimitEntry {
                    params: params.clone(),
                    expires_at: until.unwrap_or(i64::MAX),
                };
                memory.limits.set(slot, entry, || memory.reset_slot(slot | LIMIT_SLOT));
                self.limit_of(i, &params, until)
            }
            Some(redis) => {
                let keys = [self.limit_record_key(i)];
                let mut args = vec![now_arg(spec.now_ms), "set".to_string()];
                args.extend(record(&params, 0).into_iter().take(4));
                args.push(ttl_ms.to_string());
                args.push(new_generation().to_string());
                let (_, now): (i64, i64) = redis.script(limit_script_sha(), LIMIT_SCRIPT, &keys, &args).await?;
                self.forget_cached_limit(i);
                self.block_cache_forget_policy(i);
                // For the limiters that ignore overrides (and limits) to say so: best effort.
                let _ = self.mark_overrides(redis, i, ttl_ms).await;
                let until = (ttl_ms > 0).then(|| now + ttl_ms);
                self.limit_of(i, &params, until)
            }
        };
        self.audit_limit(i, "set", Some(&limit), (ttl_ms > 0).then_some(ttl_ms));
        Ok(limit)
    }

    /// The limit in force for `policy` at `now_ms` (the store's clock when `None`).
    pub(crate) async fn get_limit(&self, policy: Option<&str>, now_ms: Option<i64>) -> Result<Option<PolicyLimit>> {
        self.check_open()?;
        let i = self.override_policy(policy)?;
        match self.redis_store() {
            None => {
                let now = now_ms.unwrap_or_else(process_now_ms);
                Ok(self.memory_store().limits.get(self.records_slot(i), now).map(|e| {
                    let until = (e.expires_at != i64::MAX).then_some(e.expires_at);
                    self.limit_of(i, &e.params, until)
                }))
            }
            Some(redis) => {
                let keys = [self.limit_record_key(i)];
                let args = [now_arg(now_ms), "get".to_string()];
                let (raw, now): (String, i64) = redis.script(limit_script_sha(), LIMIT_SCRIPT, &keys, &args).await?;
                Ok(self.parse_limit(i, &raw, now))
            }
        }
    }

    /// The limit a record holds for policy `i` at `now`, if in force.
    fn parse_limit(&self, i: usize, raw: &str, now: i64) -> Option<PolicyLimit> {
        let kind = self.params_at(i).kind;
        parse_limit_record(raw, kind)
            .filter(|(_, until, _)| *until == 0 || now < *until)
            .map(|([count, period, burst, max_delay], until, _)| {
                let params = Params {
                    kind,
                    count,
                    period,
                    burst,
                    max_delay,
                    adaptive: None,
                };
                self.limit_of(i, &params, (until > 0).then_some(until))
            })
    }

    /// Removes the limit of `policy`; whether one was in force.
    pub(crate) async fn remove_limit(&self, policy: Option<&str>) -> Result<bool> {
        self.check_open()?;
        let i = self.override_policy(policy)?;
        let removed = match self.redis_store() {
            None => {
                let memory = self.memory_store();
                let slot = self.records_slot(i);
                memory
                    .limits
                    .remove(slot, process_now_ms(), || memory.reset_slot(slot | LIMIT_SLOT))
            }
            Some(redis) => {
                let keys = [self.limit_record_key(i)];
                let args = [String::new(), "del".to_string()];
                let (raw, now): (String, i64) = redis.script(limit_script_sha(), LIMIT_SCRIPT, &keys, &args).await?;
                self.forget_cached_limit(i);
                self.block_cache_forget_policy(i);
                self.parse_limit(i, &raw, now).is_some()
            }
        };
        if removed {
            self.audit_limit(i, "remove", None, None);
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Kind;

    #[test]
    fn records_read_back_and_foreign_ones_are_none() {
        assert_eq!(
            parse_limit_record("l1 100 60000 500 0 1234 77", Kind::TokenBucket),
            Some(([100, 60_000, 500, 0], 1234, 77))
        );
        for foreign in [
            "",
            "l1",
            "o1 1 1 1 0 0",
            "l1 1 1 1 0 0",
            "l1 1 1 1 0 0 x",
            "l1 0 1 1 0 0 5",
        ] {
            assert_eq!(parse_limit_record(foreign, Kind::TokenBucket), None, "{foreign:?}");
        }
        let g = new_generation();
        assert!(g > 0 && g < 1 << 53);
    }
}
