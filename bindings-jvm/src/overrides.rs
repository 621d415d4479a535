//! Per-key overrides (SPEC "Per-key overrides"): a key's own rate and burst
//! in the store, read by every check of a limiter built with
//! `"overrides": true`. The spec is checked by the core's `OverrideSpec`.

use polylimit::{Naming, OverrideSpec};
use serde_json::{Map, Value};

use crate::errors::{block, spawn, PolylimitError};
use crate::limiter::NativeLimiter;
use crate::types::{Override, PolicyLimit};

type Result<T> = std::result::Result<T, PolylimitError>;

/// The arguments of `setOverride` as the core's spec. `ttl` is a duration
/// string (`"1h"`); null fields are not given.
fn spec(
    rate: String,
    policy: Option<String>,
    burst: Option<i64>,
    ttl: Option<String>,
    now_ms: Option<i64>,
) -> Result<OverrideSpec> {
    let mut fields = Map::new();
    fields.insert("rate".into(), Value::from(rate));
    let given = [
        ("policy", policy.map(Value::from)),
        ("burst", burst.map(Value::from)),
        ("ttl", ttl.map(Value::from)),
        ("now_ms", now_ms.map(Value::from)),
    ];
    for (name, value) in given {
        if let Some(value) = value {
            fields.insert(name.into(), value);
        }
    }
    OverrideSpec::from_value(&Value::Object(fields), Naming::Snake).map_err(Into::into)
}

#[uniffi::export]
impl NativeLimiter {
    /// Sets `key`'s override under `policy` (default: the only policy):
    /// `rate` (`"100/m"`), `burst` (default: the rate's count), `ttl` (a
    /// duration string; default: until removed); returns it. A limiter
    /// without `"overrides": true` throws `Config` naming `overrides`.
    #[uniffi::method(default(policy = None, burst = None, ttl = None, now_ms = None))]
    pub fn set_override(
        &self,
        key: String,
        rate: String,
        policy: Option<String>,
        burst: Option<i64>,
        ttl: Option<String>,
        now_ms: Option<i64>,
    ) -> Result<Override> {
        let spec = spec(rate, policy, burst, ttl, now_ms)?;
        block(self.core().set_override(&key, &spec)).map(Into::into)
    }

    /// `setOverride` as a suspend function.
    #[uniffi::method(default(policy = None, burst = None, ttl = None, now_ms = None))]
    pub async fn set_override_async(
        &self,
        key: String,
        rate: String,
        policy: Option<String>,
        burst: Option<i64>,
        ttl: Option<String>,
        now_ms: Option<i64>,
    ) -> Result<Override> {
        let spec = spec(rate, policy, burst, ttl, now_ms)?;
        let inner = self.core().clone();
        spawn(async move { inner.set_override(&key, &spec).await })
            .await
            .map(Into::into)
    }

    /// The override in force for `key` under `policy` at `nowMs` (default:
    /// the store's clock); null when there is none.
    #[uniffi::method(default(policy = None, now_ms = None))]
    pub fn get_override(&self, key: String, policy: Option<String>, now_ms: Option<i64>) -> Result<Option<Override>> {
        block(self.core().get_override(&key, policy.as_deref(), now_ms)).map(|o| o.map(Into::into))
    }

    /// `getOverride` as a suspend function.
    #[uniffi::method(default(policy = None, now_ms = None))]
    pub async fn get_override_async(
        &self,
        key: String,
        policy: Option<String>,
        now_ms: Option<i64>,
    ) -> Result<Option<Override>> {
        let inner = self.core().clone();
        spawn(async move { inner.get_override(&key, policy.as_deref(), now_ms).await })
            .await
            .map(|o| o.map(Into::into))
    }

    /// Removes `key`'s override under `policy`; whether there was one.
    #[uniffi::method(default(policy = None))]
    pub fn remove_override(&self, key: String, policy: Option<String>) -> Result<bool> {
        block(self.core().remove_override(&key, policy.as_deref()))
    }

    /// `removeOverride` as a suspend function.
    #[uniffi::method(default(policy = None))]
    pub async fn remove_override_async(&self, key: String, policy: Option<String>) -> Result<bool> {
        let inner = self.core().clone();
        spawn(async move { inner.remove_override(&key, policy.as_deref()).await }).await
    }

    /// Sets the policy-wide limit of `policy` (default: the only policy):
    /// every key of it is decided under `rate` and `burst` (default: the
    /// rate's count) instead of the policy's numbers, by every process on
    /// the store, until removed or until `ttl` (a duration string) ends. A
    /// per-key override still wins. A limiter without `"overrides": true`
    /// throws `Config` naming `overrides`.
    #[uniffi::method(default(policy = None, burst = None, ttl = None, now_ms = None))]
    pub fn set_limit(
        &self,
        rate: String,
        policy: Option<String>,
        burst: Option<i64>,
        ttl: Option<String>,
        now_ms: Option<i64>,
    ) -> Result<PolicyLimit> {
        let spec = spec(rate, policy, burst, ttl, now_ms)?;
        block(self.core().set_limit(&spec)).map(Into::into)
    }

    /// `setLimit` as a suspend function.
    #[uniffi::method(default(policy = None, burst = None, ttl = None, now_ms = None))]
    pub async fn set_limit_async(
        &self,
        rate: String,
        policy: Option<String>,
        burst: Option<i64>,
        ttl: Option<String>,
        now_ms: Option<i64>,
    ) -> Result<PolicyLimit> {
        let spec = spec(rate, policy, burst, ttl, now_ms)?;
        let inner = self.core().clone();
        spawn(async move { inner.set_limit(&spec).await }).await.map(Into::into)
    }

    /// The policy-wide limit in force for `policy` at `nowMs` (default: the
    /// store's clock); null when there is none.
    #[uniffi::method(default(policy = None, now_ms = None))]
    pub fn get_limit(&self, policy: Option<String>, now_ms: Option<i64>) -> Result<Option<PolicyLimit>> {
        block(self.core().get_limit(policy.as_deref(), now_ms)).map(|l| l.map(Into::into))
    }

    /// `getLimit` as a suspend function.
    #[uniffi::method(default(policy = None, now_ms = None))]
    pub async fn get_limit_async(&self, policy: Option<String>, now_ms: Option<i64>) -> Result<Option<PolicyLimit>> {
        let inner = self.core().clone();
        spawn(async move { inner.get_limit(policy.as_deref(), now_ms).await })
            .await
            .map(|l| l.map(Into::into))
    }

    /// Removes the policy-wide limit of `policy`; whether there was one.
    #[uniffi::method(default(policy = None))]
    pub fn remove_limit(&self, policy: Option<String>) -> Result<bool> {
        block(self.core().remove_limit(policy.as_deref()))
    }

    /// `removeLimit` as a suspend function.
    #[uniffi::method(default(policy = None))]
    pub async fn remove_limit_async(&self, policy: Option<String>) -> Result<bool> {
        let inner = self.core().clone();
        spawn(async move { inner.remove_limit(policy.as_deref()).await }).await
    }
}
