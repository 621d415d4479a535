//! The Retry-After arithmetic of Go's `bindings-go/client` (the core's
//! `client` module): the options in Go's naming (`time.Duration` ns, zero
//! for the default, a negative for none), the parse and the wait.

use std::sync::OnceLock;

use polylimit::client::{RetryInput, RetryOptions};
use polylimit::options::Naming;

use crate::errors::{polylimit_error_t, polylimit_status_t, FfiError};
use crate::guard;

/// A `RetryTransport`'s fields as Go holds them.
#[repr(C)]
pub struct polylimit_retry_options_t {
    /// `MaxRetries` (0: the default, negative: none).
    pub max_retries: i64,
    /// `MaxWait` in ns (0: the default).
    pub max_wait_ns: i64,
    /// `Budget` in ns (0: the default).
    pub budget_ns: i64,
    /// `Jitter` (0: the default, negative: none; above 1 is an error).
    pub jitter: f64,
    /// `Statuses` (`statuses_set` false: nil, the default).
    pub statuses: *const i64,
    /// The length of `statuses`.
    pub statuses_len: usize,
    /// Whether `Statuses` is non-nil (an empty list retries nothing).
    pub statuses_set: bool,
    /// `RetryNonIdempotent`: a status other than 429 is retried for a
    /// method that is not idempotent too.
    pub retry_non_idempotent: bool,
}

/// # Safety
/// `o` is NULL or valid, its `statuses` holding `statuses_len` integers.
unsafe fn options(o: *const polylimit_retry_options_t) -> Result<RetryOptions, FfiError> {
    if o.is_null() {
        return Err(FfiError::invalid("options is NULL"));
    }
    // SAFETY: the caller passes a valid struct.
    let o = unsafe { &*o };
    let statuses = if !o.statuses_set {
        None
    } else if o.statuses.is_null() || o.statuses_len == 0 {
        Some(Vec::new())
    } else {
        // SAFETY: the caller promises `statuses_len` integers at `statuses`.
        Some(unsafe { std::slice::from_raw_parts(o.statuses, o.statuses_len) }.to_vec())
    };
    let input = RetryInput {
        max_retries: Some(o.max_retries as f64),
        max_wait: Some(o.max_wait_ns as f64),
        budget: Some(o.budget_ns as f64),
        jitter: Some(o.jitter),
        statuses,
        retry_non_idempotent: Some(o.retry_non_idempotent),
    };
    Ok(RetryOptions::from_naming(Naming::Go, &input)?)
}

/// A header value: `None` when absent; bytes that are not UTF-8 read as an
/// unreadable value (`Some("")`), as a garbled header is.
///
/// # Safety
/// `ptr` points to `len` readable bytes (or is NULL with `len` 0).
unsafe fn header<'a>(ptr: *const u8, len: usize, present: bool) -> Result<Option<&'a str>, FfiError> {
    if !present {
        return Ok(None);
    }
    if ptr.is_null() && len > 0 {
        return Err(FfiError::invalid("the Retry-After value is NULL"));
    }
    if len == 0 {
        return Ok(Some(""));
    }
    // SAFETY: the caller promises `len` readable bytes at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    Ok(Some(std::str::from_utf8(bytes).unwrap_or("")))
}

/// Checks a `RetryTransport`'s options: `POLYLIMIT_CONFIG` with an error
/// naming the field and value when one is wrong.
///
/// # Safety
/// `options` is valid (see `polylimit_retry_options_t`); `err` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_retry_check(
    options: *const polylimit_retry_options_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: forwarded from the caller's promise.
        unsafe { self::options(options) }?;
        Ok(polylimit_status_t::POLYLIMIT_OK as i32)
    })
}

/// The wait a `Retry-After` value (`len` bytes at `value`; `present` false
/// when the header is absent) asks for from `now_ms`: `*found` false when
/// it is missing or unreadable, else `*wait_ms`.
///
/// # Safety
/// `value` points to `len` readable bytes (or is NULL with `len` 0);
/// `found`, `wait_ms` are writable; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_parse_retry_after(
    value: *const u8,
    len: usize,
    present: bool,
    now_ms: i64,
    found: *mut bool,
    wait_ms: *mut u64,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if found.is_null() || wait_ms.is_null() {
            return Err(FfiError::invalid("found or wait_ms is NULL"));
        }
        // SAFETY: the caller promises `len` readable bytes.
        let text = unsafe { header(value, len, present) }?;
        let got = polylimit::client::parse_retry_after(text, now_ms);
        // SAFETY: checked non-NULL; the caller promises writable pointers.
        unsafe {
            *found = got.is_some();
            *wait_ms = got.unwrap_or(0);
        }
        Ok(polylimit_status_t::POLYLIMIT_OK as i32)
    })
}

/// The wait in ms before the next attempt after a response with `status`
/// to a request of `method` (`method_len` bytes; empty is GET) and its
/// Retry-After value (as in `polylimit_parse_retry_after`), after
/// `retries` retries, the first attempt at `started_ms` and the clock at
/// `now_ms`, with the random draw `random` in [0, 1): `*retry` false to give
/// up and return the response. A bad option is `POLYLIMIT_CONFIG`.
///
/// # Safety
/// As `polylimit_retry_check` and `polylimit_parse_retry_after`; `retry`
/// is writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn polylimit_retry_wait(
    options: *const polylimit_retry_options_t,
    method: *const u8,
    method_len: usize,
    status: i64,
    retry_after: *const u8,
    retry_after_len: usize,
    retry_after_present: bool,
    retries: i64,
    started_ms: i64,
    now_ms: i64,
    random: f64,
    retry: *mut bool,
    wait_ms: *mut u64,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if retry.is_null() || wait_ms.is_null() {
            return Err(FfiError::invalid("retry or wait_ms is NULL"));
        }
        // SAFETY: forwarded from the caller's promise.
        let options = unsafe { self::options(options) }?;
        // SAFETY: the caller promises `retry_after_len` readable bytes.
        let text = unsafe { header(retry_after, retry_after_len, retry_after_present) }?;
        // SAFETY: the caller promises `method_len` readable bytes.
        let method = unsafe { header(method, method_len, method_len > 0) }?
            .filter(|m| !m.is_empty())
            .unwrap_or("GET");
        let got = match (u16::try_from(status), u32::try_from(retries)) {
            (Ok(status), Ok(retries)) => options.wait_since(method, status, text, retries, started_ms, now_ms, random),
            _ => None,
        };
        // SAFETY: checked non-NULL; the caller promises writable pointers.
        unsafe {
            *retry = got.is_some();
            *wait_ms = got.unwrap_or(0);
        }
        Ok(polylimit_status_t::POLYLIMIT_OK as i32)
    })
}

/// The core's defaults of a `RetryTransport`'s fields (what a zero field
/// means), so Go restates none. `statuses` points to a static list.
///
/// # Safety
/// `out` is writable; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_retry_defaults(
    out: *mut polylimit_retry_options_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    static STATUSES: OnceLock<Vec<i64>> = OnceLock::new();
    guard(err, || {
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let d = RetryOptions::defaults_in(Naming::Go);
        let statuses = STATUSES.get_or_init(|| d.statuses.clone().unwrap_or_default());
        let whole = |v: Option<f64>| v.unwrap_or(0.0) as i64;
        // SAFETY: checked non-NULL; the caller promises a writable struct.
        unsafe {
            *out = polylimit_retry_options_t {
                max_retries: whole(d.max_retries),
                max_wait_ns: whole(d.max_wait),
                budget_ns: whole(d.budget),
                jitter: d.jitter.unwrap_or(0.0),
                statuses: statuses.as_ptr(),
                statuses_len: statuses.len(),
                statuses_set: true,
                retry_non_idempotent: d.retry_non_idempotent.unwrap_or(false),
            }
        };
        Ok(polylimit_status_t::POLYLIMIT_OK as i32)
    })
}
