//! Concurrency leases (issue 18): acquire (a check that, for a concurrency
//! policy, takes slots until released) and release. The leases an acquire
//! took cross as JSON text, `[[policy, key, id], …]` (the core's `Lease`),
//! which the caller keeps opaque and hands back to release.

use std::ffi::c_char;

use polylimit::Lease;
use serde_json::{json, Value};

use crate::decision::polylimit_decision_t;
use crate::errors::{polylimit_error_t, FfiError};
use polylimit::bridge::Call;
use polylimit::wire::packed::Reply;

use crate::limiter::{handle, options, polylimit_limiter_t};
use crate::pending::{now_or_pending, polylimit_pending_t, unexpected};
use crate::{c_string, guard, str_arg, Status};

pub(crate) fn leases_text(leases: &[Lease]) -> Option<String> {
    if leases.is_empty() {
        return None;
    }
    let list: Vec<Value> = leases.iter().map(|l| json!([l.policy, l.key, l.id])).collect();
    Some(Value::Array(list).to_string())
}

/// Acquires `key` (`key_len` bytes of UTF-8) with `cost` slots, at `now_ms`
/// (a negative value: the store's clock). Returns `POLYLIMIT_OK` when the
/// decision is ready at once (memory store): `*out` is written and
/// `*out_leases` is the leases taken as JSON (free with
/// `polylimit_string_free`), or NULL when none were (denied, or no policy is
/// a concurrency one). Or returns `POLYLIMIT_PENDING` with `*pending`
/// written: submit it with `polylimit_pending_submit`; its record is an
/// acquired one (the decision and the leases taken).
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL (with `key_len` 0) or
/// points to `key_len` readable bytes; `out`, `out_leases`, `pending` and
/// `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_acquire(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    out: *mut polylimit_decision_t,
    out_leases: *mut *mut c_char,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `key_len` readable bytes at `key`, or NULL.
        let key = unsafe { str_arg(key, key_len, "key") }?.to_string();
        if out.is_null() || out_leases.is_null() || pending.is_null() {
            return Err(FfiError::invalid("out, out_leases or pending is NULL"));
        }
        let work: Call = Box::pin(async move {
            let result = limiter.check_all(&key, options(cost, now_ms)).await?;
            Ok(Reply::Acquired(result.decision(), result.leases))
        });
        let write = |reply: Reply| match reply {
            Reply::Acquired(d, leases) => {
                // SAFETY: checked above.
                unsafe {
                    *out = (&d).into();
                    *out_leases = leases_text(&leases).map_or(std::ptr::null_mut(), c_string);
                }
                Ok(())
            }
            other => Err(unexpected(&other)),
        };
        // SAFETY: `pending` was checked above.
        unsafe { now_or_pending(work, pending, write) }
    })
}

/// Releases the leases `leases` (`leases_len` bytes: the JSON an acquire
/// gave) at `now_ms` (negative: the store's clock). Idempotent in the core:
/// an unknown, released or ended lease is left as it is. Returns
/// `POLYLIMIT_OK` with `*out_released` (how many were live) when done at
/// once, or `POLYLIMIT_PENDING` with `*pending` written: submit it with
/// `polylimit_pending_submit`; its record is that count. A store that is down is no error (the leases end by themselves).
///
/// # Safety
/// `limiter` is NULL or a live handle; `leases` is NULL (with `leases_len`
/// 0) or points to `leases_len` readable bytes; `out_released`, `pending`
/// and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_release(
    limiter: *const polylimit_limiter_t,
    leases: *const u8,
    leases_len: usize,
    now_ms: i64,
    out_released: *mut u64,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `leases_len` readable bytes at `leases`, or NULL.
        let text = unsafe { str_arg(leases, leases_len, "leases") }?;
        if out_released.is_null() || pending.is_null() {
            return Err(FfiError::invalid("out_released or pending is NULL"));
        }
        let parsed: Vec<(usize, String, String)> = serde_json::from_str(text)
            .map_err(|e| polylimit::Error::config("leases", "", format!("is not a lease list: {e}")))?;
        let leases: Vec<Lease> = parsed
            .into_iter()
            .map(|(policy, key, id)| Lease { policy, key, id })
            .collect();
        let work: Call = Box::pin(async move {
            let released = if now_ms >= 0 {
                limiter.release_at(&leases, now_ms).await?
            } else {
                limiter.release(&leases).await?
            };
            Ok(Reply::Count(released as u64))
        });
        let write = |reply: Reply| match reply {
            Reply::Count(n) => {
                // SAFETY: checked above.
                unsafe { *out_released = n };
                Ok(())
            }
            other => Err(unexpected(&other)),
        };
        // SAFETY: `pending` was checked above.
        unsafe { now_or_pending(work, pending, write) }
    })
}

/// A second handle on the same limiter (its store, state, metrics and
/// `close`), in `*out`: a caller keeps it to release leases after the first
/// handle is freed (requests in flight finish after a close). Free it once
/// with `polylimit_limiter_free`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_clone(
    limiter: *const polylimit_limiter_t,
    out: *mut *mut polylimit_limiter_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let inner = unsafe { handle(limiter) }?.clone();
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        // SAFETY: checked above.
        unsafe { *out = Box::into_raw(Box::new(polylimit_limiter_t { inner })) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}
