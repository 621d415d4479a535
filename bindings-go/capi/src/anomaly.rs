//! Alerts of adaptive policies, handed to a C callback (Go: `Options.OnAnomaly`).

use std::ffi::c_char;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use polylimit::adaptive::{AnomalyEvent, AnomalySink};

use crate::completions;
use crate::errors::{polylimit_error_t, FfiError};
use crate::limiter::{handle, polylimit_limiter_t};
use crate::{guard, Status};

/// Called with each alert as JSON (`text`, `text_len` bytes, borrowed for the
/// call only), in order, from a thread of the limiter's own (never from
/// within the call that decided), one call per alert.
pub type polylimit_anomaly_callback_t = Option<unsafe extern "C" fn(ctx: usize, text: *const c_char, text_len: usize)>;

/// Counts failed alert callbacks in the limiter's
/// `polylimit_anomaly_callback_errors_total`, without holding the limiter.
pub struct polylimit_counter_t {
    inner: Arc<AtomicU64>,
}

/// Sends the limiter's alerts to `callback(ctx, …)`; a NULL `callback`
/// removes it. When `out` is not NULL, writes a counter of failed callbacks
/// there (free it with `polylimit_counter_free`).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `err` are NULL or writable;
/// `callback` stays callable with `ctx` until it is removed.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_on_anomaly(
    limiter: *const polylimit_limiter_t,
    callback: polylimit_anomaly_callback_t,
    ctx: usize,
    out: *mut *mut polylimit_counter_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        match callback {
            Some(callback) => {
                let deliver = move |event: AnomalyEvent| {
                    let text = event.to_json().to_string();
                    // SAFETY: the caller keeps `callback` valid with `ctx` until removed.
                    unsafe { callback(ctx, text.as_ptr().cast(), text.len()) }
                };
                // On a thread of its own, in order: never from within the deciding
                // call (a memory-store check completes inside a nocallback C call).
                let sink =
                    polylimit::adaptive::on_a_thread("polylimit-alerts", deliver, limiter.anomaly_callback_errors())
                        .map_err(|e| FfiError::invalid(format!("cannot start the alert thread: {e}")))?;
                limiter.set_anomaly_sink(Some(sink));
            }
            None => limiter.set_anomaly_sink(None),
        }
        // SAFETY: the caller passes NULL or a writable `out`.
        unsafe { write_error_counter(limiter, out) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Sends the limiter's alerts to the completion queue instead of a callback
/// (replacing any callback or earlier queue sink): each alert is queued, in
/// order, as an entry with `ctx`, status `POLYLIMIT_OK`, no decision, and the
/// alert's JSON in `text`/`text_len` (taken by `polylimit_completions_take`).
/// Queueing never blocks the deciding task and never calls the caller. Remove
/// it with `polylimit_limiter_on_anomaly(limiter, NULL, …)`. When `out` is not
/// NULL, writes a counter of failed deliveries there (free it with
/// `polylimit_counter_free`). Returns `POLYLIMIT_INVALID_ARGUMENT` when the
/// queue was never opened (`polylimit_completions_open`).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_on_anomaly_queued(
    limiter: *const polylimit_limiter_t,
    ctx: usize,
    out: *mut *mut polylimit_counter_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        if !completions::is_open() {
            return Err(FfiError::invalid("the completion queue is not open"));
        }
        let sink: AnomalySink = Arc::new(move |event: &AnomalyEvent| completions::push_json(ctx, event.to_json()));
        limiter.set_anomaly_sink(Some(sink));
        // SAFETY: the caller passes NULL or a writable `out`.
        unsafe { write_error_counter(limiter, out) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Writes a new handle on `limiter`'s counter of failed alert deliveries to
/// `out`, unless `out` is NULL.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn write_error_counter(limiter: &polylimit::Limiter, out: *mut *mut polylimit_counter_t) {
    if !out.is_null() {
        let counter = Box::new(polylimit_counter_t {
            inner: limiter.anomaly_callback_errors(),
        });
        // SAFETY: checked above; the caller promises it is writable.
        unsafe { *out = Box::into_raw(counter) };
    }
}

/// Counts one failed callback. NULL is ignored.
///
/// # Safety
/// `counter` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn polylimit_counter_add(counter: *const polylimit_counter_t) {
    // SAFETY: the caller passes NULL or a live counter.
    if let Some(c) = unsafe { counter.as_ref() } {
        c.inner.fetch_add(1, Ordering::Relaxed);
    }
}

/// Frees a counter. NULL is ignored.
///
/// # Safety
/// `counter` is NULL or live, and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn polylimit_counter_free(counter: *mut polylimit_counter_t) {
    if !counter.is_null() {
        // SAFETY: from Box::into_raw in polylimit_limiter_on_anomaly.
        drop(unsafe { Box::from_raw(counter) });
    }
}
