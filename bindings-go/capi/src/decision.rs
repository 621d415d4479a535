//! A decision as a plain C struct.

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

impl From<&Decision> for polylimit_decision_t {
    fn from(d: &Decision) -> Self {
        use polylimit_source_t::*;
        let source = match d.source {
            Source::Store => POLYLIMIT_SOURCE_STORE,
            Source::Local => POLYLIMIT_SOURCE_LOCAL,
            Source::FailOpen => POLYLIMIT_SOURCE_FAIL_OPEN,
            Source::FailClosed => POLYLIMIT_SOURCE_FAIL_CLOSED,
            Source::Penalty => POLYLIMIT_SOURCE_PENALTY,
            Source::Allowlist => POLYLIMIT_SOURCE_ALLOWLIST,
            Source::Denylist => POLYLIMIT_SOURCE_DENYLIST,
        };
        polylimit_decision_t {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_after_ms: d.reset_after_ms,
            has_retry_after: d.retry_after_ms.is_some(),
            retry_after_ms: d.retry_after_ms.unwrap_or(0),
            delay_ms: d.delay_ms,
            source: source as i32,
        }
    }
}

/// The shared name of a source (`store`, `local`, `fail_open`, …), a static
/// string; `unknown` for a value out of range.
#[no_mangle]
pub extern "C" fn polylimit_source_name(source: i32) -> *const std::ffi::c_char {
    let name: &'static str = match source {
        0 => "store\0",
        1 => "local\0",
        2 => "fail_open\0",
        3 => "fail_closed\0",
        4 => "penalty\0",
        5 => "allowlist\0",
        6 => "denylist\0",
        _ => "unknown\0",
    };
    name.as_ptr().cast()
}
