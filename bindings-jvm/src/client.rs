//! The Retry-After arithmetic of the client helper (`RetryAfterClient` in
//! Kotlin): the core's `client` module, as Python's `polylimit.client`, Node's
//! `polylimit/client` and Go's `bindings-go/client` compute it (the shared
//! vectors of tests/conformance/client/).

use polylimit::client::{RetryInput, RetryOptions};
use polylimit::Naming;

use crate::errors::{guard, PolylimitError};

/// When to retry a response; a field left null is the core's default
/// (`core/src/client.rs`, the same in every language).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    #[uniffi(default = None)]
    pub max_retries: Option<i32>,
    /// The longest single wait; a longer Retry-After returns the response.
    #[uniffi(default = None)]
    pub max_wait_ms: Option<i64>,
    /// No wait ends later than this after the first attempt.
    #[uniffi(default = None)]
    pub budget_ms: Option<i64>,
    /// Up to this fraction of the wait is added (0 to 1).
    #[uniffi(default = None)]
    pub jitter: Option<f64>,
    /// The statuses retried.
    #[uniffi(default = None)]
    pub statuses: Option<Vec<i32>>,
    /// Retry a status other than 429 for a method that is not idempotent
    /// (POST, PATCH, …) too; by default a 503 (which may come after the app
    /// processed the request) is retried for GET, HEAD, OPTIONS, PUT and
    /// DELETE only.
    #[uniffi(default = None)]
    pub retry_non_idempotent: Option<bool>,
}

impl RetryPolicy {
    /// The core checks the fields under the Kotlin names (`maxWaitMs: -1 is
    /// not a non-negative number`), as it does JavaScript's.
    fn options(&self) -> Result<RetryOptions, PolylimitError> {
        let input = RetryInput {
            max_retries: self.max_retries.map(f64::from),
            max_wait: self.max_wait_ms.map(|ms| ms as f64),
            budget: self.budget_ms.map(|ms| ms as f64),
            jitter: self.jitter,
            statuses: self
                .statuses
                .as_ref()
                .map(|list| list.iter().map(|s| i64::from(*s)).collect()),
            retry_non_idempotent: self.retry_non_idempotent,
        };
        Ok(RetryOptions::from_naming(Naming::Camel, &input)?)
    }
}

/// The wait in ms a `Retry-After` value asks for from `nowMs`: whole seconds
/// or an HTTP-date (a past date is 0); null when missing or unreadable.
#[uniffi::export]
pub fn parse_retry_after(value: Option<String>, now_ms: i64) -> Option<i64> {
    polylimit::client::parse_retry_after(value.as_deref(), now_ms).map(|ms| i64::try_from(ms).unwrap_or(i64::MAX))
}

/// The wait in ms before retrying a response with `status` and
/// `retryAfter` (its Retry-After value) to a `method` request, after `retries` retries and
/// `elapsedMs` since the first attempt, with the random draw `random` in
/// [0, 1); null to give up and return the response. A bad policy field
/// throws `Config` naming it.
#[uniffi::export]
#[allow(clippy::too_many_arguments)]
pub fn retry_wait(
    policy: RetryPolicy,
    method: String,
    status: i32,
    retry_after: Option<String>,
    retries: i32,
    elapsed_ms: i64,
    now_ms: i64,
    random: f64,
) -> Result<Option<i64>, PolylimitError> {
    guard(|| {
        let options = policy.options()?;
        let (Ok(status), Ok(retries)) = (u16::try_from(status), u32::try_from(retries)) else {
            return Ok(None);
        };
        let elapsed = u64::try_from(elapsed_ms).unwrap_or(0);
        Ok(options
            .wait_ms(
                &method,
                status,
                retry_after.as_deref(),
                retries,
                elapsed,
                now_ms,
                random,
            )
            .map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_left_null_is_the_cores_default() {
        let policy = RetryPolicy {
            max_retries: None,
            max_wait_ms: None,
            budget_ms: None,
            jitter: None,
            statuses: None,
            retry_non_idempotent: None,
        };
        assert_eq!(policy.options().unwrap(), RetryOptions::default());
        let given = RetryPolicy {
            max_wait_ms: Some(-1),
            ..policy
        };
        let err = given.options().unwrap_err();
        assert_eq!(err.to_string(), "maxWaitMs: -1 is not a non-negative number");
    }
}
