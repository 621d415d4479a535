//! A decision crosses to JavaScript as a record of 8 numbers in a
//! `Float64Array` (cheaper than an object per check): id, allowed (0 or 1), limit, remaining, reset_after_ms, retry_after_ms
//! (-1 for none), delay_ms, source index (the order of `Source::ALL`).
//! `index.js` turns it into `{ allowed, limit, remaining, resetAfterMs,
//! retryAfterMs, delayMs, source }`.

use polylimit::{Decision, Source};

/// The source names in index order, for `index.js`.
#[napi_derive::napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn source_names() -> Vec<&'static str> {
    Source::ALL.iter().map(|s| s.as_str()).collect()
}

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
        d.source.index() as f64,
    ]
}
