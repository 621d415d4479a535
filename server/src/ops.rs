//! The server's own counters, beside the core's metrics on `/metrics`:
//! /check answers by status and the calls in flight. Process-wide atomics,
//! so both listeners count without sharing a handle. (Reloads are the
//! core's `polylimit_config_reloads_total`: the limiter is reloaded in place.)

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::log;

/// The log summary's period.
const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// The statuses /check answers, in the order `/metrics` lists them.
const STATUSES: [u16; 6] = [200, 400, 403, 429, 500, 503];
static CHECKS: [AtomicU64; STATUSES.len()] = [const { AtomicU64::new(0) }; STATUSES.len()];
static CHECKS_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
static GRPC_IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// Counts one /check answer.
pub fn count_check(status: u16) {
    if let Some(i) = STATUSES.iter().position(|&s| s == status) {
        CHECKS[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// A call being decided (or, on /check, shaped): counted while it lives.
pub struct InFlight(&'static AtomicU64);

impl InFlight {
    /// A /check call.
    pub fn check() -> InFlight {
        InFlight::start(&CHECKS_IN_FLIGHT)
    }

    /// A `ShouldRateLimit` call.
    pub fn grpc() -> InFlight {
        InFlight::start(&GRPC_IN_FLIGHT)
    }

    fn start(gauge: &'static AtomicU64) -> InFlight {
        gauge.fetch_add(1, Ordering::Relaxed);
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// /check answers so far by status, for the log's summary.
pub fn checks() -> Vec<(u16, u64)> {
    STATUSES
        .iter()
        .zip(&CHECKS)
        .map(|(&s, c)| (s, c.load(Ordering::Relaxed)))
        .collect()
}

/// One `info` line a minute with the /check answers of that minute by
/// status (none in a minute without any): no log line per request.
pub async fn summaries() {
    let mut last = checks();
    let mut ticks = tokio::time::interval(SUMMARY_EVERY);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let now = checks();
        let fields = since(&now, &last);
        if !fields.is_empty() {
            let fields: Vec<(&str, Value)> = fields.iter().map(|(k, n)| (k.as_str(), (*n).into())).collect();
            log::info("checks in the last minute by status", &fields);
        }
        last = now;
    }
}

/// The answers counted between two `checks()`, by status, those with none left out.
fn since(now: &[(u16, u64)], last: &[(u16, u64)]) -> Vec<(String, u64)> {
    now.iter()
        .zip(last)
        .filter(|((_, n), (_, l))| n > l)
        .map(|((status, n), (_, l))| (status.to_string(), n - l))
        .collect()
}

/// The server's counters in Prometheus text format.
pub fn metrics_text() -> String {
    let mut out = String::new();
    out.push_str("# HELP polylimit_server_checks_total /check answers by HTTP status.\n");
    out.push_str("# TYPE polylimit_server_checks_total counter\n");
    for (status, n) in checks() {
        let _ = writeln!(out, "polylimit_server_checks_total{{status=\"{status}\"}} {n}");
    }
    for (name, help, gauge) in [
        (
            "polylimit_server_checks_in_flight",
            "/check calls being decided or shaped.",
            &CHECKS_IN_FLIGHT,
        ),
        (
            "polylimit_server_grpc_in_flight",
            "ShouldRateLimit calls being decided.",
            &GRPC_IN_FLIGHT,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}",
            gauge.load(Ordering::Relaxed)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_the_answers_of_its_minute_only() {
        let last = [(200, 10), (400, 1), (429, 5)];
        let now = [(200, 25), (400, 1), (429, 7)];
        assert_eq!(
            since(&now, &last),
            vec![("200".to_string(), 15), ("429".to_string(), 2)]
        );
        assert!(since(&now, &now).is_empty());
    }
}
