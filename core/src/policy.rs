//! Policies: the JSON/YAML object every language shares, parsed and checked
//! once, when a limiter is built.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::duration::{parse_duration_ms, MAX_DURATION_MS};
use crate::error::{Error, Result};

mod sync;
pub use sync::SyncPolicy;

/// Largest value any scaled quantity (`burst * period_ms`, `limit * period_ms`,
/// `max_delay_ms * count`) may reach. Lua numbers are doubles, exact below
/// 2^53; staying under 2^50 leaves room for the sums the algorithms form.
pub(crate) const MAX_SCALED: u64 = 1 << 50;

/// Largest `limit` of a `sliding_window_log`: it keeps an entry per admitted
/// request, so this bounds a key's entries, and with them the work of a
/// denial (which walks at most half of them) inside Redis' one thread.
pub const MAX_LOG_ENTRIES: u64 = 100_000;

/// Largest cost a single check may carry.
pub const MAX_COST: u64 = 1 << 32;

/// Largest `limit` of a `concurrency` policy: a key holds one lease slot per
/// request in flight, so this bounds a key's state.
pub const MAX_IN_FLIGHT: u64 = 100_000;

/// A `concurrency` policy's lease when it names none: a request not released
/// within it (its process crashed) gives its slot back then.
pub const DEFAULT_LEASE_MS: u64 = 60_000;

/// The algorithms: six rate limits, and a limit of requests in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Tokens refill at the rate up to `burst`.
    TokenBucket,
    /// Meter (`police`) or queue (`shape`) draining at the rate.
    LeakyBucket,
    /// Generic cell rate algorithm: one timestamp per key.
    Gcra,
    /// Counter per epoch-aligned window.
    FixedWindow,
    /// Log of admitted requests over a rolling window.
    SlidingWindowLog,
    /// Weighted previous + current window counters.
    SlidingWindowCounter,
    /// Requests in flight: a lease per admitted request, given back when
    /// released or when its `lease` ends.
    Concurrency,
}

impl Algorithm {
    /// The name used in configuration and in store keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindowLog => "sliding_window_log",
            Algorithm::SlidingWindowCounter => "sliding_window_counter",
            Algorithm::Concurrency => "concurrency",
        }
    }

    const ALL: [Algorithm; 7] = [
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowLog,
        Algorithm::SlidingWindowCounter,
        Algorithm::Concurrency,
    ];

    /// Window algorithms count requests per window; the others are buckets.
    pub fn is_window(self) -> bool {
        matches!(
            self,
            Algorithm::FixedWindow | Algorithm::SlidingWindowLog | Algorithm::SlidingWindowCounter
        )
    }
}

/// How a token bucket refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refill {
    /// Continuously, a fraction of a token at a time.
    Continuous,
    /// Whole tokens per elapsed period; the partial period is kept.
    Interval,
}

/// What a leaky bucket does with overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeakyMode {
    /// Reject it.
    Police,
    /// Admit it with a delay, up to `max_delay`.
    Shape,
}

/// What a check answers while its store cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStoreError {
    /// Run the same policy in a process-local memory store.
    Local,
    /// Allow.
    FailOpen,
    /// Deny (HTTP 503).
    FailClosed,
}

impl OnStoreError {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            OnStoreError::Local => "local",
            OnStoreError::FailOpen => "fail_open",
            OnStoreError::FailClosed => "fail_closed",
        }
    }
}

/// Progressive blocking of keys that keep getting denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Penalty {
    /// Denials within `within_ms` that trigger a block.
    pub threshold: u64,
    /// The window the denials are counted in.
    pub within_ms: u64,
    /// Block lengths, one per level; the last repeats.
    pub cooldowns_ms: Vec<u64>,
    /// Time without denials after which the level decays.
    pub forget_after_ms: u64,
}

/// A validated policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Shared: every decision of a request names its policy (no copy each time).
    name: Arc<str>,
    algorithm: Algorithm,
    count: u64,
    period_ms: u64,
    burst: u64,
    refill: Refill,
    mode: LeakyMode,
    max_delay_ms: Option<u64>,
    on_store_error: OnStoreError,
    penalty: Option<Penalty>,
    sync: Option<SyncPolicy>,
    adaptive: Option<crate::adaptive::Adaptive>,
}

const KNOWN_FIELDS: [&str; 14] = [
    "algorithm",
    "limit",
    "lease",
    "rate",
    "burst",
    "capacity",
    "refill",
    "mode",
    "max_delay",
    "on_store_error",
    "penalty",
    "name",
    "sync",
    "adaptive",
];
const FIELDS: &str =
    "algorithm, rate, burst (capacity), limit, lease, refill, mode, max_delay, on_store_error, penalty, adaptive, name, sync";

const NAME_RULE: &str = "is not a name of 1 to 128 bytes without control characters";

/// A policy or rule name: it reaches header values, metric labels and store
/// keys, so CR, LF and other control characters are refused.
pub(crate) fn check_name(field: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(Error::config(field, Value::String(name.to_string()), NAME_RULE));
    }
    Ok(())
}

impl Policy {
    /// Parses a policy from JSON or YAML text.
    pub fn parse(text: &str) -> Result<Policy> {
        let value = crate::document::parse(text, "policy")?;
        Policy::from_value(&value, "")
    }

    /// Builds a policy from a JSON value. `path` prefixes field names in
    /// errors (`policies.api`); pass `""` for a top-level policy.
    pub fn from_value(value: &Value, path: &str) -> Result<Policy> {
        let at = |field: &str| {
            if path.is_empty() {
                field.to_string()
            } else {
                format!("{path}.{field}")
            }
        };
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config(if path.is_empty() { "policy" } else { path }, value, "is not an object"))?;
        for key in obj.keys() {
            if !KNOWN_FIELDS.contains(&key.as_str()) {
                return Err(Error::config(
                    at(key),
                    "",
                    format!("is not a policy field (expected one of {FIELDS})"),
                ));
            }
        }
        if obj.contains_key("burst") && obj.contains_key("capacity") {
            return Err(Error::config(at("capacity"), "", "is an alias of burst; give only one"));
        }

        let algorithm = match obj.get("algorithm") {
            None => Algorithm::TokenBucket,
            Some(v) => {
                let s = v.as_str().unwrap_or("");
                Algorithm::ALL.into_iter().find(|a| a.as_str() == s).ok_or_else(|| {
                    let names: Vec<_> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
                    Error::config(at("algorithm"), v, format!("is not one of {}", names.join(", ")))
                })?
            }
        };

        let (count, period_ms) = if algorithm == Algorithm::Concurrency {
            concurrency_fields(obj, &at)?
        } else {
            for field in ["limit", "lease"] {
                if obj.contains_key(field) {
                    return Err(Error::config(at(field), "", "applies only to concurrency"));
                }
            }
            let rate = obj
                .get("rate")
                .ok_or_else(|| Error::config(at("rate"), "", "is required"))?;
            rate_fields(rate, &at)?
        };

        let burst_field = if obj.contains_key("capacity") {
            "capacity"
        } else {
            "burst"
        };
        let burst = match obj.get(burst_field) {
            None => count,
            Some(_) if algorithm == Algorithm::Concurrency => {
                return Err(Error::config(
                    at(burst_field),
                    "",
                    "does not apply to concurrency: the limit is `limit`, the requests in flight",
                ))
            }
            Some(_) if algorithm.is_window() => {
                return Err(Error::config(
                    at(burst_field),
                    "",
                    format!(
                        "does not apply to {}: the limit per window is the rate's count",
                        algorithm.as_str()
                    ),
                ))
            }
            Some(v) => positive_int(v).ok_or_else(|| Error::config(at(burst_field), v, "is not a positive integer"))?,
        };

        let refill = match obj.get("refill") {
            None => Refill::Continuous,
            Some(_) if algorithm != Algorithm::TokenBucket => {
                return Err(Error::config(at("refill"), "", "applies only to token_bucket"))
            }
            Some(v) => match v.as_str() {
                Some("continuous") => Refill::Continuous,
                Some("interval") => Refill::Interval,
                _ => return Err(Error::config(at("refill"), v, "is not one of continuous, interval")),
            },
        };

        let mode = match obj.get("mode") {
            None => LeakyMode::Police,
            Some(_) if algorithm != Algorithm::LeakyBucket => {
                return Err(Error::config(at("mode"), "", "applies only to leaky_bucket"))
            }
            Some(v) => match v.as_str() {
                Some("police") => LeakyMode::Police,
                Some("shape") => LeakyMode::Shape,
                _ => return Err(Error::config(at("mode"), v, "is not one of police, shape")),
            },
        };

        let max_delay_ms = match obj.get("max_delay") {
            None => None,
            Some(_) if mode != LeakyMode::Shape => {
                return Err(Error::config(
                    at("max_delay"),
                    "",
                    "applies only to leaky_bucket with mode: shape",
                ))
            }
            // Zero is meaningful here: no queueing, requests spaced exactly T apart.
            Some(v) => Some(duration(v, &at("max_delay"), true)?),
        };

        let on_store_error = match obj.get("on_store_error") {
            None => OnStoreError::Local,
            Some(v) => match v.as_str() {
                Some("local") => OnStoreError::Local,
                Some("fail_open") => OnStoreError::FailOpen,
                Some("fail_closed") => OnStoreError::FailClosed,
                _ => {
                    return Err(Error::config(
                        at("on_store_error"),
                        v,
                        "is not one of local, fail_open, fail_closed",
                    ))
                }
            },
        };

        let penalty = obj
            .get("penalty")
            .map(|v| parse_penalty(v, &at("penalty")))
            .transpose()?;
        let adaptive = obj
            .get("adaptive")
            .map(|v| crate::adaptive::parse(v, &at("adaptive")))
            .transpose()?;
        if adaptive.is_some() && algorithm == Algorithm::Concurrency {
            return Err(Error::config(at("adaptive"), "", "does not apply to concurrency"));
        }

        let name = match obj.get("name") {
            None => Arc::from("default"),
            Some(Value::String(s)) => {
                check_name(&at("name"), s)?;
                Arc::from(s.as_str())
            }
            Some(v) => return Err(Error::config(at("name"), v, NAME_RULE)),
        };

        let sync = obj
            .get("sync")
            .map(|v| SyncPolicy::parse(v, &at("sync"), algorithm, burst))
            .transpose()?;
        if sync.is_some() && penalty.is_some() {
            // A penalty counts denials in the store; a synced denial never reaches it.
            return Err(Error::config(at("sync"), "", "does not combine with penalty"));
        }
        if sync.is_some() && adaptive.is_some() {
            // Adaptive counts every attempt in the store; a synced check reaches
            // it once per share, so a burst would never look anomalous.
            return Err(Error::config(at("sync"), "", "does not combine with adaptive"));
        }

        let policy = Policy {
            name,
            algorithm,
            count,
            period_ms,
            burst,
            refill,
            mode,
            max_delay_ms,
            on_store_error,
            penalty,
            sync,
            adaptive,
        };
        policy.check_range(&at)?;
        Ok(policy)
    }

    /// Rejects policies whose arithmetic would leave the exact integer range.
    fn check_range(&self, at: &dyn Fn(&str) -> String) -> Result<()> {
        let too_big = |field: &str, value: String| {
            Err(Error::config(
                at(field),
                value,
                "is too large: the policy's arithmetic would overflow",
            ))
        };
        if self.count > MAX_SCALED {
            return too_big("rate", format!("\"{}/{}ms\"", self.count, self.period_ms));
        }
        if self.algorithm == Algorithm::SlidingWindowLog && self.count > MAX_LOG_ENTRIES {
            return Err(Error::config(
                at("rate"),
                format!("\"{}/{}ms\"", self.count, self.period_ms),
                format!(
                    "is too large for sliding_window_log, which keeps an entry per request: at most \
                     {MAX_LOG_ENTRIES} per window (sliding_window_counter has no such bound)"
                ),
            ));
        }
        if self.burst.checked_mul(self.period_ms).is_none_or(|v| v > MAX_SCALED) {
            let field = match self.algorithm {
                Algorithm::Concurrency => "lease",
                a if a.is_window() => "rate",
                _ => "burst",
            };
            return too_big(field, self.burst.to_string());
        }
        if let Some(d) = self.max_delay_ms {
            if d.checked_mul(self.count).is_none_or(|v| v > MAX_SCALED) {
                return too_big("max_delay", format!("\"{d}ms\""));
            }
        }
        Ok(())
    }

    /// The policy with another rate and burst (a per-key override,
    /// `crate::overrides`): the same algorithm, refill, mode and fallback;
    /// a `max_delay` left to its default follows the new burst.
    pub(crate) fn with_limit(&self, count: u64, period_ms: u64, burst: u64) -> Result<Policy> {
        let policy = Policy {
            count,
            period_ms,
            burst,
            ..self.clone()
        };
        policy.check_range(&|field: &str| field.to_string())?;
        Ok(policy)
    }

    /// The label used in headers, metrics and store keys.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The name, shared (a request's decisions name their policy with it).
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }
    /// Returns the policy with another name.
    pub fn with_name(mut self, name: impl Into<String>) -> Policy {
        self.name = Arc::from(name.into());
        self
    }
    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
    /// Concurrency: how long a lease lasts unless released, in ms.
    pub fn lease_ms(&self) -> Option<u64> {
        (self.algorithm == Algorithm::Concurrency).then_some(self.period_ms)
    }
    /// The rate's count: requests per period (concurrency: the limit).
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The rate's period (the window for window algorithms; concurrency:
    /// the lease), in ms.
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }
    /// Bucket capacity; for window algorithms, the limit per window.
    pub fn burst(&self) -> u64 {
        self.burst
    }
    /// The decision's `limit`: burst for buckets, count for windows.
    pub fn limit(&self) -> u64 {
        self.burst
    }
    /// Token bucket refill style.
    pub fn refill(&self) -> Refill {
        self.refill
    }
    /// Leaky bucket mode.
    pub fn mode(&self) -> LeakyMode {
        self.mode
    }
    /// Shape mode: the longest delay granted, in units of 1/count ms
    /// (the algorithms' scaled time). Default `(burst-1)*T`.
    pub(crate) fn max_delay_scaled(&self) -> u64 {
        match self.max_delay_ms {
            Some(ms) => ms * self.count,
            None => (self.burst - 1) * self.period_ms,
        }
    }
    /// Shape mode: the longest delay granted, in ms.
    pub fn max_delay_ms(&self) -> u64 {
        self.max_delay_ms
            .unwrap_or((self.burst - 1) * self.period_ms / self.count)
    }
    /// What a check answers while the store cannot.
    pub fn on_store_error(&self) -> OnStoreError {
        self.on_store_error
    }
    /// Progressive blocking, if configured.
    pub fn penalty(&self) -> Option<&Penalty> {
        self.penalty.as_ref()
    }
    /// Local-with-sync admission (`sync`), if configured.
    pub fn sync(&self) -> Option<&SyncPolicy> {
        self.sync.as_ref()
    }
    /// Adaptive limits per key, if configured.
    pub fn adaptive(&self) -> Option<&crate::adaptive::Adaptive> {
        self.adaptive.as_ref()
    }

    /// The policy with every field spelled out, defaults included, in the
    /// form [`Policy::from_value`] reads back (durations as `"<n>ms"`).
    pub fn to_value(&self) -> Value {
        let ms = |n: u64| Value::String(format!("{n}ms"));
        let mut out = serde_json::Map::new();
        out.insert("name".into(), self.name().into());
        out.insert("algorithm".into(), self.algorithm.as_str().into());
        if self.algorithm == Algorithm::Concurrency {
            out.insert("limit".into(), self.count.into());
            out.insert("lease".into(), ms(self.period_ms));
        } else {
            out.insert("rate".into(), format!("{}/{}ms", self.count, self.period_ms).into());
        }
        if !self.algorithm.is_window() && self.algorithm != Algorithm::Concurrency {
            out.insert("burst".into(), self.burst.into());
        }
        if self.algorithm == Algorithm::TokenBucket {
            let refill = match self.refill {
                Refill::Continuous => "continuous",
                Refill::Interval => "interval",
            };
            out.insert("refill".into(), refill.into());
        }
        if self.algorithm == Algorithm::LeakyBucket {
            let mode = match self.mode {
                LeakyMode::Police => "police",
                LeakyMode::Shape => "shape",
            };
            out.insert("mode".into(), mode.into());
            if self.mode == LeakyMode::Shape {
                out.insert("max_delay".into(), ms(self.max_delay_ms()));
            }
        }
        out.insert("on_store_error".into(), self.on_store_error.as_str().into());
        if let Some(p) = &self.penalty {
            let mut penalty = serde_json::Map::new();
            penalty.insert("threshold".into(), p.threshold.into());
            penalty.insert("within".into(), ms(p.within_ms));
            penalty.insert("cooldowns".into(), p.cooldowns_ms.iter().map(|c| ms(*c)).collect());
            penalty.insert("forget_after".into(), ms(p.forget_after_ms));
            out.insert("penalty".into(), penalty.into());
        }
        if let Some(sync) = &self.sync {
            out.insert("sync".into(), sync.to_value());
        }
        if let Some(a) = &self.adaptive {
            out.insert("adaptive".into(), a.to_value());
        }
        Value::Object(out)
    }
}

/// A rate policy's `rate` → (count, period_ms).
fn rate_fields(rate: &Value, at: &dyn Fn(&str) -> String) -> Result<(u64, u64)> {
    parse_rate(rate).ok_or_else(|| {
        Error::config(
            at("rate"),
            rate,
            "is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0",
        )
    })
}

/// A `concurrency` policy's `limit` and `lease` → (limit, lease_ms), held
/// where a rate policy holds its count and period. `rate` is refused: a
/// limit of requests in flight has no rate.
fn concurrency_fields(obj: &Map<String, Value>, at: &dyn Fn(&str) -> String) -> Result<(u64, u64)> {
    if let Some(rate) = obj.get("rate") {
        return Err(Error::config(
            at("rate"),
            rate,
            "does not apply to concurrency: give `limit`, the most requests in flight per key",
        ));
    }
    let limit = obj.get("limit").ok_or_else(|| {
        Error::config(
            at("limit"),
            "",
            "is required for concurrency (the most requests in flight per key)",
        )
    })?;
    let limit = positive_int(limit).filter(|n| *n <= MAX_IN_FLIGHT).ok_or_else(|| {
        Error::config(
            at("limit"),
            limit,
            format!("is not an integer from 1 to {MAX_IN_FLIGHT}"),
        )
    })?;
    let lease_ms = match obj.get("lease") {
        None => DEFAULT_LEASE_MS,
        Some(v) => duration(v, &at("lease"), false)?,
    };
    Ok((limit, lease_ms))
}

/// `"10/s"`, `"100/min"`, `"5/10s"`, `"1000 per hour"` → (count, period_ms).
fn parse_rate(value: &Value) -> Option<(u64, u64)> {
    let text = value.as_str()?.trim();
    let (n, d) = text.split_once('/').or_else(|| text.split_once(" per "))?;
    let n = n.trim();
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let count: u64 = n.parse().ok()?;
    let period = parse_duration_ms(d)?;
    (count > 0 && period > 0).then_some((count, period))
}

fn positive_int(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n > 0)
}

fn duration(value: &Value, field: &str, zero_ok: bool) -> Result<u64> {
    match value.as_str().and_then(parse_duration_ms) {
        Some(ms) if ms > 0 || zero_ok => Ok(ms),
        _ => Err(Error::config(
            field,
            value,
            format!(
                "is not a duration like \"250ms\", \"1s\", \"1m30s\" (at most {}d){}",
                MAX_DURATION_MS / 86_400_000,
                if zero_ok { "" } else { ", above zero" }
            ),
        )),
    }
}

fn parse_penalty(value: &Value, path: &str) -> Result<Penalty> {
    let obj: &Map<String, Value> = value
        .as_object()
        .ok_or_else(|| Error::config(path, value, "is not an object"))?;
    const PENALTY_FIELDS: [&str; 4] = ["threshold", "within", "cooldowns", "forget_after"];
    for key in obj.keys() {
        if !PENALTY_FIELDS.contains(&key.as_str()) {
            return Err(Error::config(
                format!("{path}.{key}"),
                "",
                "is not a penalty field (expected one of threshold, within, cooldowns, forget_after)",
            ));
        }
    }
    let field = |name: &str| format!("{path}.{name}");
    let required = |name: &str| {
        obj.get(name)
            .ok_or_else(|| Error::config(field(name), "", "is required"))
    };
    let threshold = {
        let v = required("threshold")?;
        positive_int(v)
            .filter(|n| *n <= 1_000_000)
            .ok_or_else(|| Error::config(field("threshold"), v, "is not a positive integer of at most 1000000"))?
    };
    let within_ms = duration(required("within")?, &field("within"), false)?;
    let cooldowns_value = required("cooldowns")?;
    let cooldowns_ms = match cooldowns_value {
        Value::String(_) => vec![duration(cooldowns_value, &field("cooldowns"), false)?],
        Value::Array(items) if !items.is_empty() && items.len() <= 32 => items
            .iter()
            .enumerate()
            .map(|(i, v)| duration(v, &format!("{}[{i}]", field("cooldowns")), false))
            .collect::<Result<Vec<_>>>()?,
        _ => {
            return Err(Error::config(
                field("cooldowns"),
                cooldowns_value,
                "is not a list of 1 to 32 durations",
            ))
        }
    };
    let forget_after_ms = match obj.get("forget_after") {
        None => cooldowns_ms
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .saturating_mul(2)
            .min(MAX_DURATION_MS),
        Some(v) => duration(v, &field("forget_after"), false)?,
    };
    Ok(Penalty {
        threshold,
        within_ms,
        cooldowns_ms,
        forget_after_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        Policy::from_value(&v, "").unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let p = Policy::from_value(&json!({"rate": "10/s"}), "").unwrap();
        assert_eq!(p.algorithm(), Algorithm::TokenBucket);
        assert_eq!((p.count(), p.period_ms(), p.burst()), (10, 1000, 10));
        assert_eq!(p.refill(), Refill::Continuous);
        assert_eq!(p.on_store_error(), OnStoreError::Local);
        assert_eq!(p.name(), "default");
    }

    #[test]
    fn rate_forms() {
        for (rate, count, period) in [
            ("10/s", 10, 1000),
            ("100/min", 100, 60_000),
            ("5/10s", 5, 10_000),
            ("1000 per hour", 1000, 3_600_000),
            ("1/1m30s", 1, 90_000),
            ("7 / 250ms", 7, 250),
        ] {
            let p = Policy::from_value(&json!({"rate": rate}), "").unwrap();
            assert_eq!((p.count(), p.period_ms()), (count, period), "{rate}");
        }
    }

    #[test]
    fn errors_name_the_field_and_the_value() {
        assert_eq!(
            err(json!({"rate": "ten/s"})),
            "rate: \"ten/s\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0"
        );
        assert_eq!(
            err(json!({"rate": "0/s"})),
            "rate: \"0/s\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0"
        );
        assert_eq!(
            err(json!({"rate": "-1/s"})),
            "rate: \"-1/s\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0"
        );
        assert_eq!(
            err(json!({"rate": 10})),
            "rate: 10 is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0"
        );
        assert_eq!(err(json!({})), "rate: is required");
        assert_eq!(
            err(json!({"rate": "1/s", "burst": 0})),
            "burst: 0 is not a positive integer"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "burst": -3})),
            "burst: -3 is not a positive integer"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "burst": 2.5})),
            "burst: 2.5 is not a positive integer"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "burst": "10"})),
            "burst: \"10\" is not a positive integer"
        );
        assert_eq!(err(json!({"rate": "1/s", "algorithm": "magic"})), "algorithm: \"magic\" is not one of token_bucket, leaky_bucket, gcra, fixed_window, sliding_window_log, sliding_window_counter, concurrency");
        assert!(err(json!({"rate": "1/s", "colour": "red"})).starts_with("colour: is not a policy field"));
        assert_eq!(
            err(json!({"rate": "1/s", "burst": 1u64 << 41})),
            "burst: 2199023255552 is too large: the policy's arithmetic would overflow"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "refill": "sometimes"})),
            "refill: \"sometimes\" is not one of continuous, interval"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "algorithm": "gcra", "refill": "interval"})),
            "refill: applies only to token_bucket"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "algorithm": "fixed_window", "burst": 5})),
            "burst: does not apply to fixed_window: the limit per window is the rate's count"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "on_store_error": "panic"})),
            "on_store_error: \"panic\" is not one of local, fail_open, fail_closed"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "algorithm": "leaky_bucket", "mode": "shape", "max_delay": "soon"})),
            "max_delay: \"soon\" is not a duration like \"250ms\", \"1s\", \"1m30s\" (at most 36500d)"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "penalty": {"threshold": 3, "within": "1m"}})),
            "penalty.cooldowns: is required"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "penalty": {"threshold": 3, "within": "0s", "cooldowns": ["1s"]}})),
            "penalty.within: \"0s\" is not a duration like \"250ms\", \"1s\", \"1m30s\" (at most 36500d), above zero"
        );
        assert_eq!(err(json!({"rate": "1/s", "penalty": {"threshold": 3, "within": "1m", "cooldowns": ["1s", "x"]}})), "penalty.cooldowns[1]: \"x\" is not a duration like \"250ms\", \"1s\", \"1m30s\" (at most 36500d), above zero");
    }

    #[test]
    fn nested_paths_prefix_the_field() {
        let e = Policy::from_value(&json!({"rate": "ten/s"}), "policies.api").unwrap_err();
        match e {
            Error::Config { field, value, .. } => {
                assert_eq!(field, "policies.api.rate");
                assert_eq!(value, "\"ten/s\"");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn yaml_and_capacity_alias() {
        let p = Policy::parse(
            "algorithm: gcra\nrate: 1 per second\ncapacity: 10\non_store_error: fail_closed\nname: payments\n",
        )
        .unwrap();
        assert_eq!(
            (p.algorithm(), p.burst(), p.on_store_error(), p.name()),
            (Algorithm::Gcra, 10, OnStoreError::FailClosed, "payments")
        );
    }

    #[test]
    fn shape_default_max_delay_admits_burst_at_once() {
        let p = Policy::from_value(
            &json!({"algorithm": "leaky_bucket", "mode": "shape", "rate": "10/s", "burst": 5}),
            "",
        )
        .unwrap();
        assert_eq!(p.max_delay_ms(), 400);
        assert_eq!(p.max_delay_scaled(), 4 * 1000);
    }

    #[test]
    fn penalty_parses() {
        let p = Policy::from_value(&json!({"rate": "1/s", "penalty": {"threshold": 3, "within": "1m", "cooldowns": ["10s", "1m", "10m"], "forget_after": "1h"}}), "").unwrap();
        assert_eq!(
            p.penalty().unwrap(),
            &Penalty {
                threshold: 3,
                within_ms: 60_000,
                cooldowns_ms: vec![10_000, 60_000, 600_000],
                forget_after_ms: 3_600_000
            }
        );
    }

    #[test]
    fn concurrency_fields() {
        let p = Policy::from_value(&json!({"algorithm": "concurrency", "limit": 10, "lease": "30s"}), "").unwrap();
        assert_eq!((p.limit(), p.lease_ms()), (10, Some(30_000)));
        let p = Policy::from_value(&json!({"algorithm": "concurrency", "limit": 3}), "").unwrap();
        assert_eq!(p.lease_ms(), Some(DEFAULT_LEASE_MS));
        assert_eq!(Policy::from_value(&p.to_value(), "").unwrap(), p, "to_value reads back");
        let c = |extra: Value| {
            let mut v = json!({"algorithm": "concurrency", "limit": 10});
            v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            err(v)
        };
        assert_eq!(
            c(json!({"rate": "10/s"})),
            "rate: \"10/s\" does not apply to concurrency: give `limit`, the most requests in flight per key"
        );
        assert_eq!(
            err(json!({"algorithm": "concurrency"})),
            "limit: is required for concurrency (the most requests in flight per key)"
        );
        assert_eq!(c(json!({"limit": 0})), "limit: 0 is not an integer from 1 to 100000");
        assert_eq!(
            c(json!({"limit": "10"})),
            "limit: \"10\" is not an integer from 1 to 100000"
        );
        assert_eq!(
            c(json!({"limit": 100_001})),
            "limit: 100001 is not an integer from 1 to 100000"
        );
        assert!(c(json!({"lease": "0s"})).starts_with("lease: \"0s\" is not a duration"));
        assert!(c(json!({"burst": 5})).starts_with("burst: does not apply to concurrency"));
        assert_eq!(
            err(json!({"rate": "1/s", "limit": 5})),
            "limit: applies only to concurrency"
        );
        assert_eq!(
            err(json!({"rate": "1/s", "lease": "5s"})),
            "lease: applies only to concurrency"
        );
    }
}
