//! The Retry-After arithmetic of `polylimit/client`: the core's `client`
//! module (the fetch, sleep and clock stay in JavaScript).

use napi::Env;
use napi_derive::napi;
use polylimit::client::{RetryInput, RetryOptions};
use polylimit::options::Naming;
use serde_json::Value;

use crate::errors;

/// The checked options of `retryFetch` / `retryWait`.
#[napi]
pub struct NativeRetryOptions(RetryOptions);

#[napi]
impl NativeRetryOptions {
    /// `{ maxRetries, maxWaitMs, budgetMs, jitter, statuses, retryNonIdempotent }` (missing or
    /// null: the default); a config error naming the field and value when
    /// one is wrong (the core's text).
    #[napi(constructor)]
    pub fn new(env: Env, options: Value) -> napi::Result<Self> {
        errors::guard(&env, || {
            let field = |name: &str| -> napi::Result<Option<f64>> {
                match options.get(name) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::Number(n)) => Ok(n.as_f64()),
                    Some(other) => Err(errors::config(&env, name, other, "is not a number")),
                }
            };
            let statuses = match options.get("statuses") {
                None | Some(Value::Null) => None,
                Some(Value::Array(list)) => Some(
                    list.iter()
                        .map(|s| match s.as_f64() {
                            Some(n) if n.fract() == 0.0 => Ok(n as i64),
                            _ => Err(errors::config(&env, "statuses", s, "is not an HTTP status")),
                        })
                        .collect::<napi::Result<_>>()?,
                ),
                Some(other) => return Err(errors::config(&env, "statuses", other, "is not a list")),
            };
            let retry_non_idempotent = match options.get("retryNonIdempotent") {
                None | Some(Value::Null) => None,
                Some(Value::Bool(b)) => Some(*b),
                Some(other) => {
                    return Err(errors::config(
                        &env,
                        "retryNonIdempotent",
                        other,
                        "is not true or false",
                    ))
                }
            };
            let input = RetryInput {
                retry_non_idempotent,
                max_retries: field("maxRetries")?,
                max_wait: field("maxWaitMs")?,
                budget: field("budgetMs")?,
                jitter: field("jitter")?,
                statuses,
            };
            RetryOptions::from_naming(Naming::Camel, &input)
                .map(NativeRetryOptions)
                .map_err(|e| errors::throw(&env, e))
        })
    }

    /// The wait in ms before the next attempt after a response with
    /// `status` to a `method` request (`startedMs`: the first attempt's
    /// clock, `nowMs`: the clock now), or null to give up.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn wait_ms(
        &self,
        method: String,
        status: f64,
        retry_after: Option<String>,
        retries: f64,
        started_ms: f64,
        now_ms: f64,
        random: f64,
    ) -> Option<f64> {
        if status.fract() != 0.0 || !(0.0..=65535.0).contains(&status) || retries.is_nan() || retries < 0.0 {
            return None;
        }
        let retries = retries.min(u32::MAX as f64) as u32;
        let (started, now) = (started_ms.round() as i64, now_ms.round() as i64);
        self.0
            .wait_since(
                &method,
                status as u16,
                retry_after.as_deref(),
                retries,
                started,
                now,
                random,
            )
            .map(|ms| ms as f64)
    }
}

/// The wait in ms a Retry-After value asks for from `nowMs`; null when
/// missing or unreadable.
#[napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn parse_retry_after(value: Option<String>, now_ms: f64) -> Option<f64> {
    polylimit::client::parse_retry_after(value.as_deref(), now_ms.round() as i64).map(|ms| ms as f64)
}

/// The core's defaults of `retryFetch`'s options (durations in ms), so
/// `client.js` restates none.
#[napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn retry_defaults() -> Value {
    let d = RetryOptions::defaults_in(Naming::Camel);
    serde_json::json!({
        "maxRetries": d.max_retries,
        "maxWaitMs": d.max_wait,
        "budgetMs": d.budget,
        "jitter": d.jitter,
        "statuses": d.statuses,
        "retryNonIdempotent": d.retry_non_idempotent,
    })
}
