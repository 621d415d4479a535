//! A decision crosses to JavaScript as the core's decision record
//! (`polylimit::wire::decision_record`: 8 numbers in a `Float64Array`,
//! cheaper than an object per check). `index.js` turns it into `{ allowed,
//! limit, remaining, resetAfterMs, retryAfterMs, delayMs, source }`, the
//! source by its place in [`source_names`].

use polylimit::Source;

/// The source names in index order (`Source::ALL`), for `index.js`.
#[napi_derive::napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn source_names() -> Vec<&'static str> {
    Source::ALL.iter().map(|s| s.as_str()).collect()
}
