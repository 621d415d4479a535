//! `Limiter`: built from an options object (JSON text under the rules-file
//! names, read by the core's `Limiter::build`) or a rules file; each call
//! comes blocking (for servlet threads) and as `…Async` (a Kotlin `suspend`
//! function that holds no thread while the store answers).
//!
//! `close()` is the `AutoCloseable` uniffi gives every object: it drops the
//! handle, and dropping it closes the core limiter (`Drop` below).

use std::sync::Arc;

use polylimit::Naming;
use serde_json::{json, Value};

use crate::args::{options, request_info, status_code};
use crate::errors::{block, guard, spawn, PolylimitError};
use crate::lease::{Acquired, Lease};
use crate::types::{Decision, HttpRequest, Outcome};

// The direct calls (`fast*.rs`) import it from here.
pub(crate) use crate::args::check_options;

type Result<T> = std::result::Result<T, PolylimitError>;

/// A rate limiter (memory or Redis store), safe to share between threads.
/// `NativeLimiter` in Kotlin: the public `Limiter` there is the
/// hand-written facade (`Limiter.kt`) that routes the direct calls.
#[derive(uniffi::Object)]
pub struct NativeLimiter {
    inner: polylimit::Limiter,
}

impl Drop for NativeLimiter {
    fn drop(&mut self) {
        // The alert thread ends once it has delivered what is queued.
        self.inner.set_anomaly_sink(None);
        self.inner.close();
    }
}

fn build(options: &Value) -> Result<Arc<NativeLimiter>> {
    guard(|| {
        let inner = polylimit::Limiter::build(Naming::Snake, options)?;
        Ok(Arc::new(NativeLimiter { inner }))
    })
}

#[uniffi::export]
impl NativeLimiter {
    /// A limiter from an options object as JSON text, under the rules-file
    /// names: `{"policy": {"algorithm": "gcra", "rate": "10/s", "burst": 20},
    /// "store": "redis://127.0.0.1:6379"}`, or `{"rules_file": "polylimit.yaml"}`.
    /// Bad input throws `PolylimitException.Config` naming the field.
    #[uniffi::constructor]
    pub fn new(options_json: String) -> Result<Arc<Self>> {
        build(&options(&options_json)?)
    }

    /// A limiter from a rules file (YAML or JSON, `${NAME:-default}` expanded).
    #[uniffi::constructor]
    pub fn from_rules_file(path: String) -> Result<Arc<Self>> {
        build(&json!({ "rules_file": path }))
    }

    /// A limiter from the text of a rules document (YAML or JSON).
    #[uniffi::constructor]
    pub fn from_rules(text: String) -> Result<Arc<Self>> {
        build(&json!({ "rules": text }))
    }

    /// Checks `key`, charging `cost` (default 1), at `nowMs` (default: the
    /// store's clock); blocks the calling thread until decided.
    #[uniffi::method(default(cost = None, now_ms = None))]
    pub fn check(&self, key: String, cost: Option<i64>, now_ms: Option<i64>) -> Result<Decision> {
        let options = check_options(cost, now_ms)?;
        block(self.inner.check_with(&key, options)).map(Into::into)
    }

    /// `check` as a suspend function: no thread waits for the store.
    #[uniffi::method(default(cost = None, now_ms = None))]
    pub async fn check_async(&self, key: String, cost: Option<i64>, now_ms: Option<i64>) -> Result<Decision> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        spawn(async move { inner.check_with(&key, options).await })
            .await
            .map(Into::into)
    }

    /// Acquires `key`: a check that, for a concurrency policy, takes `cost`
    /// slots until the returned lease is released (blocking).
    #[uniffi::method(default(cost = None, now_ms = None))]
    pub fn acquire(&self, key: String, cost: Option<i64>, now_ms: Option<i64>) -> Result<Acquired> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        let (decision, guard) = block(async move { inner.acquire_with(&key, options).await })?;
        Ok(self.acquired(decision, guard))
    }

    /// `acquire` as a suspend function.
    #[uniffi::method(default(cost = None, now_ms = None))]
    pub async fn acquire_async(&self, key: String, cost: Option<i64>, now_ms: Option<i64>) -> Result<Acquired> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        let (decision, guard) = spawn(async move { inner.acquire_with(&key, options).await }).await?;
        Ok(self.acquired(decision, guard))
    }

    /// The decision `check` would return now, charging nothing.
    #[uniffi::method(default(cost = None, now_ms = None))]
    pub fn peek(&self, key: String, cost: Option<i64>, now_ms: Option<i64>) -> Result<Decision> {
        let options = check_options(cost, now_ms)?;
        block(self.inner.peek_with(&key, options)).map(Into::into)
    }

    /// `peek` as a suspend function.
    #[uniffi::method(default(cost = None, now_ms = None))]
    pub async fn peek_async(&self, key: String, cost: Option<i64>, now_ms: Option<i64>) -> Result<Decision> {
        let options = check_options(cost, now_ms)?;
        let inner = self.inner.clone();
        spawn(async move { inner.peek_with(&key, options).await })
            .await
            .map(Into::into)
    }

    /// Forgets every policy's state for `key`.
    pub fn reset(&self, key: String) -> Result<()> {
        block(self.inner.reset(&key))
    }

    /// `reset` as a suspend function.
    pub async fn reset_async(&self, key: String) -> Result<()> {
        let inner = self.inner.clone();
        spawn(async move { inner.reset(&key).await }).await
    }

    /// Reads the limiter's rules file (or options) again, `${NAME}` expanded
    /// anew, and swaps the rules at once; a bad file throws `Config` naming
    /// the field and keeps the old rules.
    pub fn reload(&self) -> Result<()> {
        block(self.inner.reload())
    }

    /// `reload` as a suspend function.
    pub async fn reload_async(&self) -> Result<()> {
        let inner = self.inner.clone();
        spawn(async move { inner.reload().await }).await
    }

    /// Decides a request by the limiter's rules: what the middleware answers.
    pub fn check_request(&self, request: HttpRequest) -> Result<Outcome> {
        let req = request_info(&request)?;
        block(self.inner.check_request(&req)).map(Into::into)
    }

    /// `checkRequest` as a suspend function.
    pub async fn check_request_async(&self, request: HttpRequest) -> Result<Outcome> {
        let req = request_info(&request)?;
        let inner = self.inner.clone();
        spawn(async move { inner.check_request(&req).await })
            .await
            .map(Into::into)
    }

    /// The outcome `checkRequest` would return now, charging nothing.
    pub fn peek_request(&self, request: HttpRequest) -> Result<Outcome> {
        let req = request_info(&request)?;
        block(self.inner.peek_request(&req)).map(Into::into)
    }

    /// `peekRequest` as a suspend function.
    pub async fn peek_request_async(&self, request: HttpRequest) -> Result<Outcome> {
        let req = request_info(&request)?;
        let inner = self.inner.clone();
        spawn(async move { inner.peek_request(&req).await })
            .await
            .map(Into::into)
    }

    /// Forgets every (policy, key) `checkRequest` would charge for `request`;
    /// returns how many.
    pub fn reset_request(&self, request: HttpRequest) -> Result<i64> {
        let req = request_info(&request)?;
        block(self.inner.reset_request(&req)).map(count)
    }

    /// `resetRequest` as a suspend function.
    pub async fn reset_request_async(&self, request: HttpRequest) -> Result<i64> {
        let req = request_info(&request)?;
        let inner = self.inner.clone();
        spawn(async move { inner.reset_request(&req).await }).await.map(count)
    }

    /// Settles a request after its response (`Outcome.completion`) with its
    /// status (null or 0: no response). Never throws because the store is
    /// down; a malformed token throws `Config` naming `token`.
    #[uniffi::method(default(status = None))]
    pub fn complete(&self, token: String, status: Option<i32>) -> Result<()> {
        let status = status_code(status)?;
        block(self.inner.complete(&token, status)).map(|_| ())
    }

    /// `complete` as a suspend function.
    #[uniffi::method(default(status = None))]
    pub async fn complete_async(&self, token: String, status: Option<i32>) -> Result<()> {
        let status = status_code(status)?;
        let inner = self.inner.clone();
        spawn(async move { inner.complete(&token, status).await.map(|_| ()) }).await
    }

    /// `complete` reporting the request's actual cost, learned from the
    /// response (an LLM call's tokens): the difference from its reservation
    /// is given back (smaller) or charged whatever the limit (larger), capped
    /// at the rules' `max_cost`; `now_ms` is the clock of that charge (tests).
    /// A negative cost throws `Config` naming `cost`, once the request is
    /// completed without it (as if none was reported).
    #[uniffi::method(default(status = None, now_ms = None))]
    pub fn complete_cost(&self, token: String, status: Option<i32>, cost: i64, now_ms: Option<i64>) -> Result<()> {
        let status = status_code(status)?;
        let (cost, now_ms) = (serde_json::Value::from(cost), now_ms.map(serde_json::Value::from));
        block(self.inner.complete_values(&token, status, Some(&cost), now_ms.as_ref())).map(|_| ())
    }

    /// `completeCost` as a suspend function (the non-blocking middlewares'
    /// settlement with a reported cost).
    #[uniffi::method(default(status = None, now_ms = None))]
    pub async fn complete_cost_async(
        &self,
        token: String,
        status: Option<i32>,
        cost: i64,
        now_ms: Option<i64>,
    ) -> Result<()> {
        let status = status_code(status)?;
        let (cost, now_ms) = (serde_json::Value::from(cost), now_ms.map(serde_json::Value::from));
        let inner = self.inner.clone();
        spawn(async move {
            inner
                .complete_values(&token, status, Some(&cost), now_ms.as_ref())
                .await
                .map(|_| ())
        })
        .await
    }

    /// Prometheus text exposition of this limiter's metrics.
    pub fn metrics_text(&self) -> String {
        self.inner.metrics_text()
    }

    /// Every metric family, read now (the Prometheus text is rendered from
    /// the same snapshot; polylimit-otel bridges it into OpenTelemetry).
    pub fn metrics_snapshot(&self) -> crate::types::MetricsSnapshot {
        self.inner.metrics_snapshot().into()
    }

    /// The policies' names, in order.
    pub fn policy_names(&self) -> Vec<String> {
        self.inner.policies().map(|p| p.name().to_string()).collect()
    }

    /// Sends the alerts of the adaptive policies (a key became anomalous or
    /// recovered) to `listener`, in order, on the limiter's alert thread
    /// (never on the deciding call); null removes it. An exception in the
    /// listener is counted in `polylimit_anomaly_callback_errors_total`.
    pub fn on_anomaly(&self, listener: Option<Box<dyn crate::AnomalyListener>>) -> Result<()> {
        guard(|| crate::anomaly::install(&self.inner, listener))
    }

    /// Closes the limiter: every later call throws `PolylimitException.Closed`
    /// (`close()` does it too, and frees the handle).
    pub fn shutdown(&self) {
        self.inner.close();
    }

    /// `closed`, `open` or `half_open`: the store's circuit breaker.
    pub fn breaker_state(&self) -> String {
        self.inner.breaker_state().as_str().to_string()
    }
}

impl NativeLimiter {
    /// The core limiter (shared with the direct handle, `direct.rs`).
    pub(crate) fn core(&self) -> &polylimit::Limiter {
        &self.inner
    }

    pub(crate) fn acquired(&self, decision: polylimit::Decision, guard: Option<polylimit::LeaseGuard>) -> Acquired {
        Acquired {
            decision: decision.into(),
            lease: guard.map(|g| Lease::new(self.inner.clone(), g)),
        }
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
