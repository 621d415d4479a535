//! Administration: per-key overrides, the breaker, metrics, adaptive alerts.

use std::sync::Arc;

use super::Limiter;
use crate::breaker::{BreakerState, Clock};
use crate::error::Result;
use crate::limits::PolicyLimit;
use crate::overrides::{Override, OverrideSpec};

impl Limiter {
    /// Sets a per-key override: `key` (for a rules file, the key its rules
    /// compose, e.g. `user=acme`) is decided under `spec`'s rate and burst
    /// instead of the policy's, by every process on the store, until removed
    /// or until its TTL ends. Bad input is an error naming the field.
    pub async fn set_override(&self, key: &str, spec: &OverrideSpec) -> Result<Override> {
        self.engine().set_override(key, spec).await
    }

    /// The override in force for `key` under `policy` (`None`: the limiter's
    /// only policy) at `now_ms` (`None`: the store's clock).
    pub async fn get_override(&self, key: &str, policy: Option<&str>, now_ms: Option<i64>) -> Result<Option<Override>> {
        self.engine().get_override(key, policy, now_ms).await
    }

    /// Removes the override of `key` under `policy`; whether one was in force.
    pub async fn remove_override(&self, key: &str, policy: Option<&str>) -> Result<bool> {
        self.engine().remove_override(key, policy).await
    }

    /// Sets a policy-wide limit: every key of `spec.policy` (`None`: the
    /// limiter's only policy) is decided under `spec`'s rate and burst
    /// instead of the policy's, by every process on the store, until removed
    /// or until its TTL ends. A per-key override still wins. Needs
    /// `overrides: true`; bad input is an error naming the field. Counted in
    /// `polylimit_limit_changes_total` and logged on stderr.
    pub async fn set_limit(&self, spec: &OverrideSpec) -> Result<PolicyLimit> {
        self.engine().set_limit(spec).await
    }

    /// The policy-wide limit in force for `policy` (`None`: the limiter's
    /// only policy) at `now_ms` (`None`: the store's clock).
    pub async fn get_limit(&self, policy: Option<&str>, now_ms: Option<i64>) -> Result<Option<PolicyLimit>> {
        self.engine().get_limit(policy, now_ms).await
    }

    /// Removes the policy-wide limit of `policy`; whether one was in force.
    pub async fn remove_limit(&self, policy: Option<&str>) -> Result<bool> {
        self.engine().remove_limit(policy).await
    }

    /// The store's breaker state (`Closed` for the memory store).
    pub fn breaker_state(&self) -> BreakerState {
        self.engine().breaker_state()
    }

    /// For tests: the store's circuit breaker reads the time from `clock`
    /// (a [`crate::breaker::ManualClock`]) instead of the process's clock, so
    /// a test moves it past a cooldown instead of sleeping. Set it before the
    /// first check; clones of this limiter share it.
    #[doc(hidden)]
    pub fn set_breaker_clock(&self, clock: Arc<dyn Clock>) {
        self.engine().set_breaker_clock(clock)
    }

    /// Metrics in Prometheus text format, rendered from [`Limiter::metrics_snapshot`].
    pub fn metrics_text(&self) -> String {
        self.engine().metrics_text()
    }

    /// Every metric family this limiter exports, read now: names, help,
    /// kinds, labels and values (cumulative since the limiter was built).
    /// The Prometheus text is rendered from it, and each binding bridges it
    /// into its host's OpenTelemetry SDK, so both show the same metrics.
    pub fn metrics_snapshot(&self) -> crate::metrics::MetricsSnapshot {
        self.engine().metrics_snapshot()
    }

    /// Sends every alert of the adaptive policies (a key became anomalous or
    /// recovered) to `sink`, or to nobody with `None`. The sink runs on a
    /// thread of its own (`polylimit-alerts`), in order, never on the
    /// deciding task, as in every language; a panic in it is caught and
    /// counted, as are alerts dropped when 1024 are waiting.
    pub fn on_anomaly(&self, sink: Option<crate::adaptive::AnomalySink>) {
        let Some(sink) = sink else {
            return self.engine().alerts().set_sink(None);
        };
        let errors = self.engine().alerts().sink_error_counter();
        let counted = errors.clone();
        let deliver = move |event: crate::adaptive::AnomalyEvent| {
            let call = std::panic::AssertUnwindSafe(|| sink(&event));
            if std::panic::catch_unwind(call).is_err() {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        };
        let background = Some(self.engine().background().clone());
        match crate::adaptive::on_a_counted_thread("polylimit-alerts", deliver, errors, background) {
            Ok(threaded) => self.engine().alerts().set_sink(Some(threaded)),
            // No thread to be had: no callback rather than one on the request's path.
            Err(_) => {
                self.engine().alerts().count_sink_error();
                self.engine().alerts().set_sink(None)
            }
        }
    }

    /// Returns once the work this limiter runs off the request's path has
    /// finished: the refund of a check that was cut short, the lookup that
    /// says per-key overrides are ignored, the alerts queued for the
    /// [`Limiter::on_anomaly`] sink. For tests and shutdown; checks never
    /// wait for it.
    pub async fn settled(&self) {
        self.engine().settled().await
    }

    /// Sets the sink every alert goes to as it is, on the deciding task: for
    /// a binding whose sink already hands the alert to its own thread or
    /// queue ([`crate::adaptive::on_a_thread`]) and never blocks.
    #[doc(hidden)]
    pub fn set_anomaly_sink(&self, sink: Option<crate::adaptive::AnomalySink>) {
        self.engine().alerts().set_sink(sink);
    }

    /// Whether each alert also writes one JSON line to stderr (on by default).
    pub fn set_anomaly_log(&self, on: bool) {
        self.engine().alerts().set_log(on);
    }

    /// Counts an alert callback that failed outside the core (a binding's
    /// exception), in `polylimit_anomaly_callback_errors_total`.
    pub fn count_anomaly_callback_error(&self) {
        self.engine().alerts().count_sink_error();
    }

    /// The counter behind `polylimit_anomaly_callback_errors_total`, for a
    /// binding's callback to add to without holding the limiter.
    pub fn anomaly_callback_errors(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.engine().alerts().sink_error_counter()
    }
}
