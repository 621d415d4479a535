//! The server's own counters, beside the core's metrics on `/metrics`:
//! /check answers by status and rules reloads by result. Process-wide
//! atomics, so the reload task and both listeners count without sharing a
//! handle.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// The statuses /check answers, in the order `/metrics` lists them.
const STATUSES: [u16; 6] = [200, 400, 403, 429, 500, 503];
static CHECKS: [AtomicU64; STATUSES.len()] = [const { AtomicU64::new(0) }; STATUSES.len()];
static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);
static RELOADS_OK: AtomicU64 = AtomicU64::new(0);
static RELOADS_ERROR: AtomicU64 = AtomicU64::new(0);

/// Counts one /check answer.
pub fn count_check(status: u16) {
    if let Some(i) = STATUSES.iter().position(|&s| s == status) {
        CHECKS[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// A /check call being decided (or shaped): counted while it lives.
pub struct InFlight(());

impl InFlight {
    pub fn start() -> InFlight {
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        InFlight(())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Counts one reload of the rules file.
pub fn count_reload(ok: bool) {
    if ok { &RELOADS_OK } else { &RELOADS_ERROR }.fetch_add(1, Ordering::Relaxed);
}

/// /check answers so far by status, for the log's summary.
pub fn checks() -> Vec<(u16, u64)> {
    STATUSES
        .iter()
        .zip(&CHECKS)
        .map(|(&s, c)| (s, c.load(Ordering::Relaxed)))
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
    out.push_str("# HELP polylimit_server_checks_in_flight /check calls being decided or shaped.\n");
    out.push_str("# TYPE polylimit_server_checks_in_flight gauge\n");
    let _ = writeln!(
        out,
        "polylimit_server_checks_in_flight {}",
        IN_FLIGHT.load(Ordering::Relaxed)
    );
    out.push_str("# HELP polylimit_config_reloads_total Reloads of the rules file (SIGHUP) by result.\n");
    out.push_str("# TYPE polylimit_config_reloads_total counter\n");
    for (result, n) in [("ok", &RELOADS_OK), ("error", &RELOADS_ERROR)] {
        let _ = writeln!(
            out,
            "polylimit_config_reloads_total{{result=\"{result}\"}} {}",
            n.load(Ordering::Relaxed)
        );
    }
    out
}
