//! Per-key overrides: a different rate and burst for one key of one policy
//! (an enterprise customer, a batch job), set, read and removed at runtime,
//! kept in the store so every process and every language sees them, with an
//! optional time to live.
//!
//! The algorithm stays the policy's; an override replaces its `rate` and
//! `burst`, validated as a policy's fields are. Every check of (policy, key)
//! reads the override in the same store call that decides: inside the Lua
//! script on Redis, under the overrides' lock on the memory store. The state
//! of a key under an override lives in keys of its own, so neither the
//! policy's state nor the override's is ever read with the other's numbers;
//! setting or removing an override clears the override's state (the key
//! starts full under the new numbers), and the policy's state is as the
//! override found it (or expired meanwhile).
//!
//! Storage on Redis, beside the key's state and under the same hash tag
//! (`<prefix>:<variant>:<policy>:{<escaped key>}`, without the state's
//! fingerprint, so a reload that renews the state keeps the override):
//! - `…}:override`: the record, text `o1 <count> <period_ms> <burst> <max_delay> <until_ms>`
//!   (`max_delay` in the algorithms' scaled units, `until_ms` 0 for no end),
//!   with a Redis TTL equal to the override's when it has one;
//! - `…}:override:state` (and `…}:override:state:log` for a sliding log): the state under it.
//!
//! A record that is not in this form (foreign data, another type) is no
//! override: checks decide by the policy and never fail because of it.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::algorithm::Params;
use crate::duration::parse_duration_ms;
use crate::engine::{process_now_ms, Engine, RefundProbe};
use crate::error::{Error, Result};
use crate::options::Naming;
use crate::policy::Policy;
use crate::store::memory::OVERRIDE_SLOT;
use crate::store::overrides::{parse_record, record, script_sha, SCRIPT};

/// What [`crate::Limiter::set_override`] sets: a `rate` (required) and a
/// `burst` (optional: the rate's count) for one key of one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverrideSpec {
    /// The policy's name; `None` on a limiter with one policy.
    pub policy: Option<String>,
    /// `"<n>/<duration>"`, as a policy's `rate`.
    pub rate: String,
    /// The bucket capacity (not for window algorithms); `None`: the rate's count.
    pub burst: Option<u64>,
    /// How long the override lasts; `None`: until removed.
    pub ttl: Option<Duration>,
    /// The time it is set at, in ms since the epoch (tests and simulations:
    /// a TTL counts from it); `None`: the store's clock.
    pub now_ms: Option<i64>,
}

impl OverrideSpec {
    /// An override of `rate` on the limiter's one policy, without end.
    pub fn new(rate: impl Into<String>) -> OverrideSpec {
        OverrideSpec {
            policy: None,
            rate: rate.into(),
            burst: None,
            ttl: None,
            now_ms: None,
        }
    }

    /// From the object a binding passes: `policy`, `rate`, `burst` (alias
    /// `capacity`), `ttl` (a duration string, or a number in the naming's
    /// unit: seconds in Python, ms in JavaScript, a `time.Duration` in Go),
    /// `now_ms` (`nowMs`, `NowMs`). Bad input is an error naming the field.
    pub fn from_value(value: &Value, naming: Naming) -> Result<OverrideSpec> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("override", value, "is not an object"))?;
        let mut fields = Map::new();
        for (name, v) in obj {
            let canonical = match name.as_str() {
                "policy" | "Policy" => "policy",
                "rate" | "Rate" => "rate",
                "burst" | "Burst" => "burst",
                "capacity" | "Capacity" => "capacity",
                "ttl" | "TTL" | "Ttl" => "ttl",
                "now_ms" | "nowMs" | "NowMs" => "now_ms",
                _ => {
                    return Err(Error::config(
                        name.as_str(),
                        "",
                        "is not an override field (expected one of policy, rate, burst, ttl, now_ms)",
                    ))
                }
            };
            // Go passes its zero values for fields left unset.
            let unset = v.is_null() || (naming == Naming::Go && (v == &json!(0) || v == &json!("")));
            if !unset {
                fields.insert(canonical.to_string(), v.clone());
            }
        }
        if fields.contains_key("burst") && fields.contains_key("capacity") {
            return Err(Error::config("capacity", "", "is an alias of burst; give only one"));
        }
        let policy = match fields.get("policy") {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return Err(Error::config("policy", v, "is not a policy name")),
        };
        let rate = match fields.get("rate") {
            None => return Err(Error::config("rate", "", "is required")),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                return Err(Error::config(
                    "rate",
                    v,
                    "is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0",
                ))
            }
        };
        let burst_field = if fields.contains_key("capacity") {
            "capacity"
        } else {
            "burst"
        };
        let burst = match fields.get(burst_field) {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n > 0)
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| *f > 0.0 && f.fract() == 0.0 && *f < 9e15)
                            .map(|f| f as u64)
                    })
                    .ok_or_else(|| Error::config(burst_field, v, "is not a positive integer"))?,
            ),
        };
        let ttl = match fields.get("ttl") {
            None => None,
            Some(v) => {
                let text = crate::options::duration(naming, v, "ttl")?;
                let ms = text
                    .as_str()
                    .and_then(parse_duration_ms)
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| Error::config("ttl", v, "is not a duration like \"10m\", \"1h\" above zero"))?;
                Some(Duration::from_millis(ms))
            }
        };
        let now_ms = match fields.get("now_ms") {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                            .map(|f| f as i64)
                    })
                    .filter(|n| (0..=1 << 50).contains(n))
                    .ok_or_else(|| Error::config("now_ms", v, "is not a time in ms since the epoch"))?,
            ),
        };
        Ok(OverrideSpec {
            policy,
            rate,
            burst,
            ttl,
            now_ms,
        })
    }
}

/// An override in force for one key of one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Override {
    /// The policy's name.
    pub policy: String,
    /// The key.
    pub key: String,
    /// The override's rate, `"<count>/<period>"`.
    pub rate: String,
    /// Its bucket capacity (the limit per window for window algorithms).
    pub burst: u64,
    /// The `limit` of its decisions (as `burst`).
    pub limit: u64,
    /// When it ends, in ms since the epoch (the store's clock); `None`: never.
    pub expires_at_ms: Option<i64>,
}

impl Override {
    /// `{policy, key, rate, burst, limit, expires_at_ms}`, the form the bindings return.
    pub fn to_value(&self) -> Value {
        json!({
            "policy": self.policy,
            "key": self.key,
            "rate": self.rate,
            "burst": self.burst,
            "limit": self.limit,
            "expires_at_ms": self.expires_at_ms,
        })
    }
}

/// `"<count>/<period>"` with the period in the largest whole unit.
pub(crate) fn rate_text(count: i64, period_ms: i64) -> String {
    let period = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")]
        .iter()
        .find(|(unit, _)| period_ms % unit == 0)
        .map_or_else(
            || format!("{period_ms}ms"),
            |(unit, name)| format!("{}{name}", period_ms / unit),
        );
    format!("{count}/{period}")
}

/// The numbers of `policy` under an override of `rate` and `burst`,
/// validated as a policy's fields (errors name `rate` or `burst`).
pub(crate) fn override_params(policy: &Policy, rate: &str, burst: Option<u64>) -> Result<Params> {
    let mut fields = Map::new();
    fields.insert("algorithm".into(), policy.algorithm().as_str().into());
    fields.insert("rate".into(), rate.into());
    if let Some(burst) = burst {
        fields.insert("burst".into(), burst.into());
    }
    let parsed = Policy::from_value(&Value::Object(fields), "")?;
    let overridden = policy.with_limit(parsed.count(), parsed.period_ms(), parsed.burst())?;
    Ok(Params::new(&overridden))
}

impl Engine {
    /// What an override or a policy-wide limit sets, checked: the policy's
    /// index, the numbers, the TTL in ms (0: none). Errors name the field.
    pub(crate) fn checked_spec(&self, spec: &OverrideSpec) -> Result<(usize, Params, i64)> {
        let i = self.override_policy(spec.policy.as_deref())?;
        let params = override_params(self.policy_at(i), &spec.rate, spec.burst)?;
        let ttl_ms = match spec.ttl {
            None => 0,
            Some(ttl) => i64::try_from(ttl.as_millis())
                .ok()
                .filter(|ms| (1..=1 << 50).contains(ms))
                .ok_or_else(|| Error::config("ttl", format!("{ttl:?}"), "is not a duration from 1ms to 2^50 ms"))?,
        };
        if let Some(now) = spec.now_ms {
            if !(0..=1 << 50).contains(&now) {
                return Err(Error::config("now_ms", now, "is not a time in ms since the epoch"));
            }
        }
        Ok((i, params, ttl_ms))
    }

    /// The index of policy `name`; `None`: the limiter's only policy.
    /// Fails on a limiter whose checks do not read overrides.
    pub(crate) fn override_policy(&self, name: Option<&str>) -> Result<usize> {
        if !self.overrides_enabled() {
            return Err(Error::config(
                "overrides",
                "false",
                "is off for this limiter: build it (and every limiter that should honour overrides) with overrides: true",
            ));
        }
        let mut policies = self.policies();
        let index = match name {
            Some(name) => policies
                .position(|p| p.name() == name)
                .ok_or_else(|| Error::config("policy", format!("{name:?}"), "is not a policy of this limiter")),
            None if self.policies().count() == 1 => Ok(0),
            None => Err(Error::config(
                "policy",
                "",
                "is required: this limiter has several policies; name the one to override",
            )),
        }?;
        if self.policy_at(index).algorithm() == crate::policy::Algorithm::Concurrency {
            return Err(Error::config(
                "policy",
                format!("{:?}", self.policy_at(index).name()),
                "is a concurrency policy: an override sets a rate, not slots in flight",
            ));
        }
        Ok(index)
    }

    fn override_of(&self, i: usize, key: &str, params: &Params, until: Option<i64>) -> Override {
        Override {
            policy: self.policy_at(i).name().to_string(),
            key: key.to_string(),
            rate: rate_text(params.count, params.period),
            burst: params.burst as u64,
            limit: params.burst as u64,
            expires_at_ms: until,
        }
    }

    /// Sets an override; returns it as stored.
    pub(crate) async fn set_override(&self, key: &str, spec: &OverrideSpec) -> Result<Override> {
        self.check_open()?;
        let (i, params, ttl_ms) = self.checked_spec(spec)?;
        match self.redis_store() {
            None => {
                let now = spec.now_ms.unwrap_or_else(process_now_ms);
                let until = (ttl_ms > 0).then(|| now + ttl_ms);
                let memory = self.memory_store();
                let slot = self.records_slot(i);
                memory
                    .overrides
                    .set(slot, key, params.clone(), until.unwrap_or(i64::MAX), now, || {
                        memory.reset(slot | OVERRIDE_SLOT, slot | OVERRIDE_SLOT, key)
                    })?;
                Ok(self.override_of(i, key, &params, until))
            }
            Some(redis) => {
                let keys = self.override_keys(i, key);
                let mut args = vec![now_arg(spec.now_ms), "set".to_string()];
                args.extend(record(&params, 0).into_iter().take(4));
                args.push(ttl_ms.to_string());
                let (_, now): (i64, i64) = redis.script(script_sha(), SCRIPT, &keys, &args).await?;
                self.block_cache_forget(i, key);
                // For the limiters that ignore overrides to say so: best effort.
                let _ = self.mark_overrides(redis, i, ttl_ms).await;
                let until = (ttl_ms > 0).then(|| now + ttl_ms);
                Ok(self.override_of(i, key, &params, until))
            }
        }
    }

    /// The override in force for `key` of `policy` at `now_ms` (the store's clock when `None`).
    pub(crate) async fn get_override(
        &self,
        key: &str,
        policy: Option<&str>,
        now_ms: Option<i64>,
    ) -> Result<Option<Override>> {
        self.check_open()?;
        let i = self.override_policy(policy)?;
        match self.redis_store() {
            None => {
                let now = now_ms.unwrap_or_else(process_now_ms);
                Ok(self
                    .memory_store()
                    .overrides
                    .get(self.records_slot(i), key, now)
                    .map(|(params, until)| self.override_of(i, key, &params, (until != i64::MAX).then_some(until))))
            }
            Some(redis) => {
                let keys = self.override_keys(i, key);
                let args = [now_arg(now_ms), "get".to_string()];
                let (raw, now): (String, i64) = redis.script(script_sha(), SCRIPT, &keys[..1], &args).await?;
                let kind = self.params_at(i).kind;
                Ok(parse_record(&raw, kind)
                    .filter(|(_, until)| *until == 0 || now < *until)
                    .map(|([count, period, burst, max_delay], until)| {
                        let params = Params {
                            kind,
                            count,
                            period,
                            burst,
                            max_delay,
                            adaptive: None,
                        };
                        self.override_of(i, key, &params, (until > 0).then_some(until))
                    }))
            }
        }
    }

    /// Removes the override of `key` under `policy`; whether one was in force.
    pub(crate) async fn remove_override(&self, key: &str, policy: Option<&str>) -> Result<bool> {
        self.check_open()?;
        let i = self.override_policy(policy)?;
        match self.redis_store() {
            None => {
                let memory = self.memory_store();
                let slot = self.records_slot(i);
                Ok(memory.overrides.remove(slot, key, process_now_ms(), || {
                    memory.reset(slot | OVERRIDE_SLOT, slot | OVERRIDE_SLOT, key)
                }))
            }
            Some(redis) => {
                let keys = self.override_keys(i, key);
                let args = [String::new(), "del".to_string()];
                let (removed, _): (i64, i64) = redis.script(script_sha(), SCRIPT, &keys, &args).await?;
                self.block_cache_forget(i, key);
                Ok(removed > 0)
            }
        }
    }
}

#[doc(hidden)]
impl RefundProbe {
    /// Sets a per-key override ([`crate::Limiter::set_override`]).
    pub async fn set_override(&self, key: &str, spec: &OverrideSpec) -> Result<Override> {
        self.engine().set_override(key, spec).await
    }

    /// Removes the override of `key` on the limiter's one policy.
    pub async fn remove_override(&self, key: &str) -> Result<bool> {
        self.engine().remove_override(key, None).await
    }
}

pub(crate) fn now_arg(now_ms: Option<i64>) -> String {
    now_ms.map(|n| n.to_string()).unwrap_or_default()
}

/// Marks that policy `KEYS[1]`'s overrides exist: the marker lives as long
/// as the longest override set (`ARGV[1]` ms, 0: no end).
const MARK_SCRIPT: &str = r#"
local ttl = tonumber(ARGV[1])
local left = redis.call('PTTL', KEYS[1])
if ttl == 0 then
  redis.call('SET', KEYS[1], '1')
elseif left ~= -1 and left < ttl then
  redis.call('SET', KEYS[1], '1', 'PX', ttl)
end
return 1
"#;

fn sha_of(script: &'static str, cell: &'static std::sync::OnceLock<String>) -> &'static str {
    cell.get_or_init(|| redis::Script::new(script).get_hash().to_string())
}

/// How often a limiter without `overrides: true` looks for overrides of a
/// policy that it has not reported yet, at most (SPEC §11).
const NOTICE_EVERY_MS: i64 = 60_000;

impl Engine {
    /// Marks policy `i` as having overrides in the store, for `ttl_ms` (0: no end).
    pub(crate) async fn mark_overrides(
        &self,
        redis: &crate::store::redis::RedisStore,
        i: usize,
        ttl_ms: i64,
    ) -> Result<()> {
        static SHA: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let keys = [self.override_marker(i)];
        let _: i64 = redis
            .script(sha_of(MARK_SCRIPT, &SHA), MARK_SCRIPT, &keys, &[ttl_ms.to_string()])
            .await?;
        Ok(())
    }

    /// Called by a check of `targets` on a limiter that ignores overrides:
    /// starts a look for the policies due one ([`IgnoredOverrides`](crate::store::overrides::IgnoredOverrides)).
    pub(crate) fn notice_overrides(
        &self,
        notice: &crate::store::overrides::IgnoredOverrides,
        targets: &[crate::engine::Target<'_>],
    ) {
        use std::sync::atomic::Ordering;
        let now = process_now_ms();
        for &(i, _, _) in targets {
            let Some(next) = notice.next.get(i) else { continue };
            let due = next.load(Ordering::Relaxed);
            if now < due
                || next
                    .compare_exchange(due, now + NOTICE_EVERY_MS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            if self.params_at(i).kind == crate::algorithm::Kind::Concurrency {
                next.store(i64::MAX - 1, Ordering::Relaxed); // takes no override: never looked for
                continue;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                continue;
            };
            let engine = self.clone();
            let running = engine.background().start();
            runtime.spawn(async move {
                let _running = running;
                let Some(redis) = engine.redis_store() else { return };
                if redis.exists(&engine.override_marker(i)).await.unwrap_or(false) {
                    if let Some(next) = engine.ignored_overrides().and_then(|n| n.next.get(i)) {
                        next.store(i64::MAX, Ordering::Relaxed);
                    }
                    let line = json!({
                        "event": "polylimit.override_ignored",
                        "policy": engine.policy_at(i).name(),
                        "message": "per-key overrides of this policy are set in the store; this limiter was built without overrides: true and ignores them",
                    });
                    use std::io::Write;
                    let _ = writeln!(std::io::stderr().lock(), "{line}");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_foreign_ones_are_none() {
        let policy = Policy::from_value(&json!({"rate": "10/s"}), "").unwrap();
        let params = override_params(&policy, "100/m", Some(500)).unwrap();
        let [c, p, b, d, u] = record(&params, 1234);
        let raw = format!("o1 {c} {p} {b} {d} {u}");
        assert_eq!(parse_record(&raw, params.kind), Some(([100, 60_000, 500, 0], 1234)));
        for foreign in [
            "",
            "o1",
            "o1 1 2 3 4",
            "o1 0 1 1 0 0",
            "o1 1 1 1 0 0 0",
            "x1 1 1 1 0 0",
            "o1 -1 1 1 0 0",
        ] {
            assert_eq!(parse_record(foreign, params.kind), None, "{foreign:?}");
        }
        assert_eq!(rate_text(100, 60_000), "100/1m");
        assert_eq!(rate_text(7, 1500), "7/1500ms");
    }

    #[test]
    fn bad_limits_name_their_field() {
        let window = Policy::from_value(&json!({"algorithm": "fixed_window", "rate": "10/s"}), "").unwrap();
        let e = override_params(&window, "ten/s", None).unwrap_err().to_string();
        assert!(e.starts_with("rate: \"ten/s\""), "{e}");
        let e = override_params(&window, "10/s", Some(5)).unwrap_err().to_string();
        assert!(e.starts_with("burst"), "{e}");
        let e = OverrideSpec::from_value(&json!({"rate": "1/s", "ttl": -1}), Naming::Snake)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("ttl"), "{e}");
        let e = OverrideSpec::from_value(&json!({"rate": "1/s", "limit": 3}), Naming::Snake)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("limit"), "{e}");
        let spec = OverrideSpec::from_value(&json!({"rate": "1/s", "ttl": 2.5}), Naming::Snake).unwrap();
        assert_eq!(spec.ttl, Some(Duration::from_millis(2500)));
        let spec = OverrideSpec::from_value(&json!({"Rate": "1/s", "TTL": 2_000_000, "Burst": 0}), Naming::Go).unwrap();
        assert_eq!((spec.ttl, spec.burst), (Some(Duration::from_millis(2)), None));
    }
}
