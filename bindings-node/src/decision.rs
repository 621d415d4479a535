//! A decision crosses to JavaScript in a packed record
//! (`polylimit::wire::packed`), its source as an index: `packed.js` names it
//! by its place in [`source_names`].

use polylimit::Source;

/// The source names in index order (`Source::ALL`), for `packed.js`.
#[napi_derive::napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn source_names() -> Vec<&'static str> {
    Source::ALL.iter().map(|s| s.as_str()).collect()
}
