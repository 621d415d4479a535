//! Alerts of adaptive policies, queued on a completion bridge as JSON
//! records (Go: `Options.OnAnomaly`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use polylimit::adaptive::{AnomalyEvent, AnomalySink};
use polylimit::wire::packed::Reply;

use crate::bridge::polylimit_bridge_t;
use crate::errors::polylimit_error_t;
use crate::limiter::{handle, polylimit_limiter_t};
use crate::{guard, Status};

/// Counts failed alert deliveries in the limiter's
/// `polylimit_anomaly_callback_errors_total`, without holding the limiter.
pub struct polylimit_counter_t {
    inner: Arc<AtomicU64>,
}

/// Sends the limiter's alerts to `bridge` (replacing any earlier sink): each
/// alert is queued, in order, as a JSON record with `ctx` (the alert's
/// JSON), taken like any other record. Queueing never blocks the deciding
/// task and never calls the caller. A NULL `bridge` removes the sink. When
/// `out` is not NULL, writes a counter of failed deliveries there (free it
/// with `polylimit_counter_free`).
///
/// # Safety
/// `limiter` is NULL or a live handle; `bridge` is NULL or a live bridge
/// (alerts after it is freed are dropped); `out` and `err` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_on_anomaly_queued(
    limiter: *const polylimit_limiter_t,
    bridge: *const polylimit_bridge_t,
    ctx: u64,
    out: *mut *mut polylimit_counter_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        // SAFETY: the caller passes NULL or a live bridge.
        let sink: Option<AnomalySink> = unsafe { bridge.as_ref() }.map(|b| {
            let bridge = b.inner.clone();
            Arc::new(move |event: &AnomalyEvent| bridge.push(ctx, &Ok(Reply::Json(event.to_json())))) as AnomalySink
        });
        limiter.set_anomaly_sink(sink);
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

/// Counts one failed alert delivery (the host's handler failed). NULL is ignored.
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
