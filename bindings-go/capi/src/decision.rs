//! A decision as a plain C struct.

use std::ffi::{c_char, CString};
use std::panic::catch_unwind;
use std::sync::OnceLock;

use polylimit::{Decision, Source};

/// Who decided (`polylimit_source_name` gives the shared name).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum polylimit_source_t {
    /// The configured store.
    POLYLIMIT_SOURCE_STORE = 0,
    /// The process-local fallback limiter.
    POLYLIMIT_SOURCE_LOCAL = 1,
    /// Allowed because the store is unavailable.
    POLYLIMIT_SOURCE_FAIL_OPEN = 2,
    /// Denied because the store is unavailable.
    POLYLIMIT_SOURCE_FAIL_CLOSED = 3,
    /// Denied: the key is serving a penalty block.
    POLYLIMIT_SOURCE_PENALTY = 4,
    /// Allowed: allowlisted.
    POLYLIMIT_SOURCE_ALLOWLIST = 5,
    /// Denied: denylisted.
    POLYLIMIT_SOURCE_DENYLIST = 6,
    /// Denied: the key is anomalous and over its shrunk (adaptive) budget.
    POLYLIMIT_SOURCE_ADAPTIVE = 7,
}

/// The decision for one key (SPEC §3).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct polylimit_decision_t {
    /// The request may proceed.
    pub allowed: bool,
    /// The policy's count.
    pub limit: u64,
    /// Whole requests still available.
    pub remaining: u64,
    /// Time until the key is back to idle, in ms.
    pub reset_after_ms: u64,
    /// Whether `retry_after_ms` is set (denied, and the cost can fit).
    pub has_retry_after: bool,
    /// When denied: time until the same request could be allowed, in ms.
    pub retry_after_ms: u64,
    /// Shape mode: how long to hold the request, in ms.
    pub delay_ms: u64,
    /// A `polylimit_source_t`.
    pub source: i32,
}

impl From<Source> for polylimit_source_t {
    /// Exhaustive: a new core source is a compile error here, and the tests
    /// below check that each maps to its own value, its place in
    /// `Source::ALL` (what a packed outcome carries).
    fn from(source: Source) -> Self {
        use polylimit_source_t::*;
        match source {
            Source::Store => POLYLIMIT_SOURCE_STORE,
            Source::Local => POLYLIMIT_SOURCE_LOCAL,
            Source::FailOpen => POLYLIMIT_SOURCE_FAIL_OPEN,
            Source::FailClosed => POLYLIMIT_SOURCE_FAIL_CLOSED,
            Source::Penalty => POLYLIMIT_SOURCE_PENALTY,
            Source::Allowlist => POLYLIMIT_SOURCE_ALLOWLIST,
            Source::Denylist => POLYLIMIT_SOURCE_DENYLIST,
            Source::Adaptive => POLYLIMIT_SOURCE_ADAPTIVE,
        }
    }
}

impl From<&Decision> for polylimit_decision_t {
    fn from(d: &Decision) -> Self {
        polylimit_decision_t {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after_ms: d.reset_after_ms,
            has_retry_after: d.retry_after_ms.is_some(),
            retry_after_ms: d.retry_after_ms.unwrap_or(0),
            delay_ms: d.delay_ms,
            source: polylimit_source_t::from(d.source) as i32,
        }
    }
}

/// The core's names of the sources, NUL-terminated, in `Source::ALL` order.
fn source_names() -> &'static [CString] {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    NAMES.get_or_init(|| Source::ALL.iter().map(|s| static_name(s.as_str())).collect())
}

/// A core name as a C string (core names hold no NUL).
pub(crate) fn static_name(name: &str) -> CString {
    CString::new(name).unwrap_or_default()
}

/// The shared name of a source (`store`, `local`, `fail_open`, …: the core's
/// `Source::as_str`), a static string; `unknown` for a value that is no
/// `polylimit_source_t`.
#[no_mangle]
pub extern "C" fn polylimit_source_name(source: i32) -> *const c_char {
    catch_unwind(|| {
        Source::ALL
            .iter()
            .position(|&s| polylimit_source_t::from(s) as i32 == source)
            .map(|i| source_names()[i].as_ptr())
    })
    .ok()
    .flatten()
    .unwrap_or(c"unknown".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::ffi::CStr;

    fn name(source: i32) -> &'static str {
        // SAFETY: polylimit_source_name returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(polylimit_source_name(source)) }
            .to_str()
            .unwrap()
    }

    #[test]
    fn every_source_has_its_own_c_value_and_name() {
        let mut values = HashSet::new();
        for (i, &source) in Source::ALL.iter().enumerate() {
            let c = polylimit_source_t::from(source) as i32;
            assert!(values.insert(c), "{source:?}: {c} is taken");
            // A packed outcome carries the place in Source::ALL; Go reads it as a polylimit_source_t.
            assert_eq!(c, i as i32, "{source:?}");
            assert_eq!(name(c), source.as_str());
        }
        for c in [-1, Source::ALL.len() as i32, i32::MAX] {
            assert_eq!(name(c), "unknown");
        }
    }

    #[test]
    fn a_decision_carries_its_source() {
        for &source in &Source::ALL {
            let d = Decision {
                allowed: true,
                limit: 1,
                remaining: 0,
                reset_after_ms: 1,
                retry_after_ms: None,
                delay_ms: 0,
                source,
            };
            assert_eq!(name(polylimit_decision_t::from(&d).source), source.as_str());
        }
    }
}
