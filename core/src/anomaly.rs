//! A limiter's alerts of adaptive policies: the storm limit, the callback,
//! the log line and the metrics. The events and the configuration are in
//! `adaptive`; the arithmetic that reports transitions in `algorithm/adaptive.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::adaptive::{Adaptive, AlertKeys, AnomalyEvent, AnomalyKind, AnomalySink};

/// Alerts delivered per policy per second at most; the rest are counted
/// and reported with the next one delivered.
pub(crate) const ALERTS_PER_SECOND: u64 = 20;

/// The storm limit: a fixed one-second window per policy.
#[derive(Default)]
pub(crate) struct AlertGate {
    windows: Mutex<HashMap<String, (i64, u64, u64)>>,
}

impl AlertGate {
    /// Whether an alert of `policy` at `now_ms` may be delivered; if so, how
    /// many were suppressed before it.
    pub fn admit(&self, policy: &str, now_ms: i64) -> Option<u64> {
        let mut windows = self.windows.lock();
        let entry = windows.entry(policy.to_string()).or_insert((i64::MIN, 0, 0));
        let second = now_ms.div_euclid(1000);
        if entry.0 != second {
            entry.0 = second;
            entry.1 = 0;
        }
        if entry.1 >= ALERTS_PER_SECOND {
            entry.2 += 1;
            return None;
        }
        entry.1 += 1;
        Some(std::mem::take(&mut entry.2))
    }
}

/// The key as alerts show it.
pub(crate) fn alert_key(key: &str, mode: AlertKeys) -> String {
    use sha2::{Digest, Sha256};
    let hash = |text: &str| {
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    };
    match mode {
        AlertKeys::Raw => key.to_string(),
        AlertKeys::Hash => hash(key),
        AlertKeys::Dimensions => {
            // A rule's key: `<dimension>=<value>` joined by `|` (values escaped).
            let dimension = |name: &str| {
                matches!(name, "ip" | "route" | "method" | "user" | "api_key" | "key" | "global")
                    || name.starts_with("header:")
            };
            let parts: Option<Vec<String>> = key
                .split('|')
                .map(|part| {
                    let (name, value) = part.split_once('=')?;
                    dimension(name).then(|| match name {
                        "ip" | "key" => format!("{name}={}", hash(value)),
                        _ => part.to_string(),
                    })
                })
                .collect();
            match parts {
                Some(parts) => parts.join("|"),
                None => hash(key),
            }
        }
    }
}

/// A limiter's alerts: the storm gate, the sink, the log line and the metrics.
pub(crate) struct Alerts {
    sink: parking_lot::RwLock<Option<AnomalySink>>,
    log: std::sync::atomic::AtomicBool,
    gate: AlertGate,
    /// Per policy: anomalies, recoveries, keys anomalous now, alerts suppressed.
    counts: Mutex<std::collections::BTreeMap<String, [u64; 4]>>,
    sink_errors: Arc<std::sync::atomic::AtomicU64>,
}

impl Default for Alerts {
    fn default() -> Self {
        Alerts {
            sink: Default::default(),
            log: std::sync::atomic::AtomicBool::new(true),
            gate: AlertGate::default(),
            counts: Default::default(),
            sink_errors: Default::default(),
        }
    }
}

impl Alerts {
    /// Sets (or with `None` removes) the callback every alert goes to.
    pub fn set_sink(&self, sink: Option<AnomalySink>) {
        *self.sink.write() = sink;
    }

    /// Alerts that write each one's JSON line to stderr, or not.
    pub fn logging(on: bool) -> Alerts {
        let alerts = Alerts::default();
        alerts.set_log(on);
        alerts
    }

    /// Whether each alert also writes one JSON line to stderr (default on).
    pub fn set_log(&self, on: bool) {
        self.log.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records a transition reported with a decision of `policy` for `key`.
    pub fn transition(
        &self,
        policy: &str,
        adaptive: &Adaptive,
        key: &str,
        report: &crate::algorithm::adaptive::AdaptiveReport,
        now_ms: i64,
    ) {
        use crate::algorithm::adaptive::{Transition, SCALE};
        let kind = match report.transition {
            Transition::None => return,
            Transition::Anomalous => AnomalyKind::Anomalous,
            Transition::Recovered => AnomalyKind::Recovered,
        };
        let suppressed = {
            let mut counts = self.counts.lock();
            let c = counts.entry(policy.to_string()).or_default();
            match kind {
                AnomalyKind::Anomalous => {
                    c[0] += 1;
                    c[2] += 1;
                }
                AnomalyKind::Recovered => {
                    c[1] += 1;
                    c[2] = c[2].saturating_sub(1);
                }
            }
            let admitted = self.gate.admit(policy, now_ms);
            if admitted.is_none() {
                c[3] += 1;
            }
            admitted
        };
        let Some(suppressed) = suppressed else { return };
        let per_second = |per_window: f64| per_window * 1000.0 / adaptive.window_ms as f64;
        let limited = adaptive
            .min_per_window
            .max(report.baseline_milli.div_ceil(SCALE as u64));
        let event = AnomalyEvent {
            kind,
            policy: policy.to_string(),
            key: alert_key(key, adaptive.alert_keys),
            rate: per_second(report.window_requests as f64),
            baseline: per_second(report.baseline_milli as f64 / SCALE as f64),
            limited_to: if kind == AnomalyKind::Anomalous {
                per_second(limited as f64)
            } else {
                0.0
            },
            at_ms: now_ms,
            suppressed,
        };
        if self.log.load(std::sync::atomic::Ordering::Relaxed) {
            // Not eprintln!, which panics when stderr cannot take the line (a
            // closed pipe, a full non-blocking one): a log line never fails a check.
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "{}", event.to_json());
        }
        let sink = self.sink.read().clone();
        if let Some(sink) = sink {
            let call = std::panic::AssertUnwindSafe(|| sink(&event));
            if std::panic::catch_unwind(call).is_err() {
                self.count_sink_error();
            }
        }
    }

    /// Counts a callback that failed (a binding reports its exceptions here).
    pub fn count_sink_error(&self) {
        self.sink_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counter of failed callbacks, for a binding to add to without
    /// holding the limiter (a callback holding it would keep it alive).
    pub fn sink_error_counter(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.sink_errors.clone()
    }

    /// The metrics' families (labels: policy names only).
    pub fn families(&self) -> Vec<crate::metrics::MetricFamily> {
        use crate::metrics::{family, MetricKind};
        let counts = self.counts.lock();
        let families = [
            (
                "polylimit_anomalies_total",
                MetricKind::Counter,
                "Keys that became anomalous (adaptive).",
                0,
            ),
            (
                "polylimit_anomaly_recoveries_total",
                MetricKind::Counter,
                "Anomalous keys that recovered.",
                1,
            ),
            (
                "polylimit_anomalous_keys",
                MetricKind::Gauge,
                "Keys anomalous now (until their recovery is seen).",
                2,
            ),
            (
                "polylimit_anomaly_alerts_suppressed_total",
                MetricKind::Counter,
                "Alerts dropped by the storm limit.",
                3,
            ),
        ];
        let mut out: Vec<_> = families
            .into_iter()
            .map(|(name, kind, help, i)| {
                let points = counts
                    .iter()
                    .map(|(policy, c)| (vec![("policy", policy.as_str())], c[i] as i64));
                family(name, kind, help, points)
            })
            .collect();
        let errors = self.sink_errors.load(std::sync::atomic::Ordering::Relaxed) as i64;
        out.push(family(
            "polylimit_anomaly_callback_errors_total",
            MetricKind::Counter,
            "Alert callbacks that raised.",
            [(Vec::new(), errors)],
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_limits_storms() {
        let gate = AlertGate::default();
        for _ in 0..ALERTS_PER_SECOND {
            assert_eq!(gate.admit("p", 1000), Some(0));
        }
        assert_eq!(gate.admit("p", 1999), None);
        assert_eq!(gate.admit("q", 1999), Some(0));
        assert_eq!(gate.admit("p", 2000), Some(1));
    }

    #[test]
    fn alert_keys_hide_addresses_by_default() {
        let shown = alert_key("ip=203.0.113.7|route=/pay", AlertKeys::Dimensions);
        assert!(
            shown.starts_with("ip=sha256:") && shown.ends_with("|route=/pay"),
            "{shown}"
        );
        assert!(!shown.contains("203.0.113.7"));
        assert_eq!(
            alert_key("user=acme|header:x-client=bad", AlertKeys::Dimensions),
            "user=acme|header:x-client=bad"
        );
        assert!(alert_key("203.0.113.7", AlertKeys::Dimensions).starts_with("sha256:"));
        assert!(alert_key("user=acme", AlertKeys::Hash).starts_with("sha256:"));
        assert_eq!(alert_key("203.0.113.7", AlertKeys::Raw), "203.0.113.7");
    }
}
