//! A decision crosses to JavaScript as a record of 8 numbers in a
//! `Float64Array` (cheaper than an object per check): id, allowed (0 or 1), limit, remaining, reset_after_ms, retry_after_ms
//! (-1 for none), delay_ms, source index (the order of [`SOURCES`]).
//! `index.js` turns it into `{ allowed, limit, remaining, resetAfterMs,
//! retryAfterMs, delayMs, source }`.

use polylimit::{Decision, Source};

/// The sources in index order; `index.js` holds the same list.
pub const SOURCES: [Source; 7] = [
    Source::Store,
    Source::Local,
    Source::FailOpen,
    Source::FailClosed,
    Source::Penalty,
    Source::Allowlist,
    Source::Denylist,
];

/// The record of a decision of check `id`.
pub fn record(id: u32, d: &Decision) -> [f64; 8] {
    [
        id as f64,
        if d.allowed { 1.0 } else { 0.0 },
        d.limit as f64,
        d.remaining as f64,
        d.reset_after_ms as f64,
        d.retry_after_ms.map_or(-1.0, |v| v as f64),
        d.delay_ms as f64,
        SOURCES.iter().position(|s| *s == d.source).unwrap_or(0) as f64,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_indexes_match_index_js() {
        let names: Vec<&str> = SOURCES.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            [
                "store",
                "local",
                "fail_open",
                "fail_closed",
                "penalty",
                "allowlist",
                "denylist"
            ]
        );
    }
}
