//! `Limiter.onAnomaly(listener)`: the core's alerts of adaptive policies (a
//! key became anomalous, or recovered) handed to a Kotlin/Java
//! `AnomalyListener` in order, on the limiter's own alert thread (the core's
//! `on_a_thread`, as Python and Go), never on the deciding call. A listener
//! that throws is counted in `polylimit_anomaly_callback_errors_total`; the
//! exception never reaches a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::errors::PolylimitError;

/// An alert of an adaptive policy (the same fields as Python's dict, Node's
/// object and Go's `AnomalyEvent`).
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct AnomalyEvent {
    /// `polylimit.anomalous` or `polylimit.recovered`.
    pub event: String,
    /// The policy's name.
    pub policy: String,
    /// The key as the policy's `alert_keys` says (default: a rule's
    /// dimensions with `ip` and `key` values hashed).
    pub key: String,
    /// Requests per second over the short window, this one included.
    pub rate: f64,
    /// The key's baseline, requests per second.
    pub baseline: f64,
    /// `limit` or `restore`.
    pub action: String,
    /// The budget while anomalous, requests per second (0 on recovery).
    pub limited_to: f64,
    /// The decision's time (the store's clock), ms since the epoch.
    pub at_ms: i64,
    /// Alerts of the policy dropped by the storm limit since the last one.
    pub suppressed: i64,
}

impl From<&polylimit::adaptive::AnomalyEvent> for AnomalyEvent {
    fn from(e: &polylimit::adaptive::AnomalyEvent) -> Self {
        // The fields as every binding shows them: the core's one JSON form.
        let v = e.to_json();
        let text = |name: &str| v[name].as_str().unwrap_or_default().to_string();
        AnomalyEvent {
            event: text("event"),
            policy: e.policy.clone(),
            key: e.key.clone(),
            rate: e.rate,
            baseline: e.baseline,
            action: text("action"),
            limited_to: e.limited_to,
            at_ms: e.at_ms,
            suppressed: i64::try_from(e.suppressed).unwrap_or(i64::MAX),
        }
    }
}

/// Receives a limiter's alerts (Java: a lambda `event -> …`). Called on the
/// limiter's alert thread, one alert at a time, in order; a slow listener
/// delays only later alerts (1,024 wait, the rest are counted as failed).
#[uniffi::export(callback_interface)]
pub trait AnomalyListener: Send + Sync {
    /// One alert. An exception is caught and counted.
    fn on_anomaly(&self, event: AnomalyEvent) -> Result<(), PolylimitError>;
}

/// A Kotlin/Java exception in the listener arrives as this.
impl From<uniffi::UnexpectedUniFFICallbackError> for PolylimitError {
    fn from(e: uniffi::UnexpectedUniFFICallbackError) -> Self {
        PolylimitError::Internal { text: e.reason }
    }
}

/// Sends `limiter`'s alerts to `listener` (or to nobody with `None`).
pub(crate) fn install(
    limiter: &polylimit::Limiter,
    listener: Option<Box<dyn AnomalyListener>>,
) -> Result<(), PolylimitError> {
    let Some(listener) = listener else {
        limiter.set_anomaly_sink(None);
        return Ok(());
    };
    // The counter, not the limiter: the alert thread must not keep it alive.
    let errors: Arc<AtomicU64> = limiter.anomaly_callback_errors();
    let failed = errors.clone();
    let deliver = move |event: polylimit::adaptive::AnomalyEvent| {
        let call = std::panic::AssertUnwindSafe(|| listener.on_anomaly((&event).into()));
        if !matches!(std::panic::catch_unwind(call), Ok(Ok(()))) {
            failed.fetch_add(1, Ordering::Relaxed);
        }
    };
    let sink = polylimit::adaptive::on_a_thread("polylimit-alerts", deliver, errors).map_err(|e| {
        PolylimitError::from(polylimit::Error::Internal(format!(
            "cannot start the alert thread: {e}"
        )))
    })?;
    limiter.set_anomaly_sink(Some(sink));
    Ok(())
}
