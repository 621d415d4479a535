//! A policy's `sync` (issue 19): `{ interval: 100ms, share: N }`, parsed with
//! the policy. What a synced check does is `crate::engine::synced`.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::policy::Algorithm;

/// The default interval between syncs of a key.
pub const DEFAULT_INTERVAL_MS: u64 = 100;

/// A policy's `sync`: `{ interval: 100ms, share: N }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPolicy {
    interval_ms: u64,
    share: u64,
}

impl SyncPolicy {
    /// Parses `sync` of a policy of `algorithm` whose limit is `limit`;
    /// `path` is the field's name in errors (`policies.api.sync`).
    pub(crate) fn parse(value: &Value, path: &str, algorithm: Algorithm, limit: u64) -> Result<SyncPolicy> {
        if !matches!(
            algorithm,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::FixedWindow | Algorithm::SlidingWindowCounter
        ) {
            return Err(Error::config(
                path,
                "",
                format!(
                    "does not apply to {}: only token_bucket, gcra, fixed_window and sliding_window_counter sync",
                    algorithm.as_str()
                ),
            ));
        }
        let obj: &Map<String, Value> = value
            .as_object()
            .ok_or_else(|| Error::config(path, value, "is not an object like { interval: 100ms, share: 10 }"))?;
        for key in obj.keys() {
            if key != "interval" && key != "share" {
                return Err(Error::config(
                    format!("{path}.{key}"),
                    "",
                    "is not a sync field (expected one of interval, share)",
                ));
            }
        }
        let interval_ms = match obj.get("interval") {
            None => DEFAULT_INTERVAL_MS,
            Some(v) => v
                .as_str()
                .and_then(crate::duration::parse_duration_ms)
                .filter(|ms| *ms > 0)
                .ok_or_else(|| {
                    Error::config(
                        format!("{path}.interval"),
                        v,
                        "is not a duration like \"100ms\" or \"1s\", above zero",
                    )
                })?,
        };
        let share = match obj.get("share") {
            None => (limit / 10).max(1),
            Some(v) => v.as_u64().filter(|n| (1..=limit).contains(n)).ok_or_else(|| {
                Error::config(
                    format!("{path}.share"),
                    v,
                    format!("is not an integer from 1 to the policy's limit ({limit})"),
                )
            })?,
        };
        Ok(SyncPolicy { interval_ms, share })
    }

    /// Longest time between two syncs of a key, in ms.
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// Units one sync takes from the store.
    pub fn share(&self) -> u64 {
        self.share
    }

    /// The canonical form.
    pub(crate) fn to_value(&self) -> Value {
        let mut out = Map::new();
        out.insert("interval".into(), format!("{}ms", self.interval_ms).into());
        out.insert("share".into(), self.share.into());
        Value::Object(out)
    }
}
