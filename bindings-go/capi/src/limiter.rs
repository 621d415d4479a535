//! The limiter handle: build (and the effective configuration), check (ready at once or through a callback),
//! check a request, reset, metrics, close, free.

use std::ffi::c_char;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use polylimit::wire::{Case, OutcomeWire};
use polylimit::{CheckOptions, Limiter, Naming, RequestInfo};

use crate::decision::polylimit_decision_t;
use crate::errors::{polylimit_error_t, FfiError};
use crate::{c_string, cstr_arg, guard, runtime, str_arg, Status};

/// A limiter. Thread-safe; free it once with `polylimit_limiter_free` after
/// the last call that uses it has returned (pending callbacks keep what they
/// need alive).
pub struct polylimit_limiter_t {
    inner: Limiter,
}

/// Called exactly once when a `POLYLIMIT_PENDING` operation completes, from a
/// polylimit runtime thread. `status` is `POLYLIMIT_OK` or an error code.
/// On OK: `decision` (checks) or `text`/`text_len` (request outcomes, JSON)
/// are set; on error `error` is. Everything is borrowed for the call only.
pub type polylimit_callback_t = Option<
    unsafe extern "C" fn(
        ctx: usize,
        status: i32,
        decision: *const polylimit_decision_t,
        text: *const c_char,
        text_len: usize,
        error: *const polylimit_error_t,
    ),
>;

enum Done {
    Decision(polylimit_decision_t),
    Text(String),
}

type Work = Pin<Box<dyn Future<Output = Result<Done, FfiError>> + Send>>;

/// Polls `work` once on the runtime; if it is not ready, spawns it and returns
/// `None` (the callback will be called). Memory-store checks finish in the
/// first poll, so they never leave the calling thread.
fn start(mut work: Work, callback: polylimit_callback_t, ctx: usize) -> Result<Option<Done>, FfiError> {
    let rt = runtime();
    let ready = {
        let _enter = rt.enter();
        work.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    };
    match ready {
        Poll::Ready(done) => done.map(Some),
        Poll::Pending => {
            let Some(callback) = callback else {
                // No callback: wait here (a `_blocking` call on a remote store).
                return rt.block_on(work).map(Some);
            };
            rt.spawn(async move {
                let result = CatchUnwind(work).await;
                deliver(callback, ctx, result);
            });
            Ok(None)
        }
    }
}

/// Turns a panic while polling into an error, so the callback always runs.
struct CatchUnwind(Work);

impl Future for CatchUnwind {
    type Output = Result<Done, FfiError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(panic) => Poll::Ready(Err(FfiError::panic(panic))),
        }
    }
}

type Callback =
    unsafe extern "C" fn(usize, i32, *const polylimit_decision_t, *const c_char, usize, *const polylimit_error_t);

fn deliver(callback: Callback, ctx: usize, result: Result<Done, FfiError>) {
    let (no_decision, no_text, no_error) = (std::ptr::null(), std::ptr::null(), std::ptr::null());
    let ok = Status::POLYLIMIT_OK as i32;
    let _ = catch_unwind(AssertUnwindSafe(|| match result {
        // SAFETY: the callback was given by the caller for exactly this call;
        // the decision lives until it returns.
        Ok(Done::Decision(d)) => unsafe { callback(ctx, ok, &d, no_text, 0, no_error) },
        // SAFETY: as above; `t` holds `t.len()` bytes until the callback returns.
        Ok(Done::Text(t)) => unsafe { callback(ctx, ok, no_decision, t.as_ptr().cast(), t.len(), no_error) },
        Err(e) => {
            let code = e.status() as i32;
            let err = e.into_raw();
            // SAFETY: as above; `err` is ours, borrowed by the callback and freed once after it.
            unsafe {
                callback(ctx, code, no_decision, no_text, 0, err);
                crate::errors::polylimit_error_free(err);
            }
        }
    }));
}

/// # Safety
/// `l` is NULL or a live handle from this crate, not freed while `'a` lasts.
unsafe fn handle<'a>(l: *const polylimit_limiter_t) -> Result<&'a Limiter, FfiError> {
    // SAFETY: the caller passes a live handle or NULL.
    unsafe { l.as_ref() }
        .map(|l| &l.inner)
        .ok_or_else(|| FfiError::invalid("limiter is NULL"))
}

/// # Safety
/// `out` and `err` are NULL or writable.
unsafe fn build(
    out: *mut *mut polylimit_limiter_t,
    err: *mut *mut polylimit_error_t,
    make: impl FnOnce() -> Result<Limiter, FfiError>,
) -> i32 {
    guard(err, || {
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let limiter = make()?;
        // SAFETY: checked above.
        unsafe { *out = Box::into_raw(Box::new(polylimit_limiter_t { inner: limiter })) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// The options object `options_json` (JSON, the Go `Options` struct as
/// `encoding/json` writes it: `{"Policy": {"Rate": "10/s"}, "Store": …,
/// "Timeout": 100000000}`; zero values are unset) as the core reads it.
///
/// # Safety
/// `options_json` is NULL or a NUL-terminated string.
unsafe fn options_arg(options_json: *const c_char) -> Result<serde_json::Value, FfiError> {
    // SAFETY: the caller's promise, passed on.
    let text = unsafe { cstr_arg(options_json, "options_json") }?;
    Ok(polylimit::parse_document(text, "options")?)
}

/// Builds a limiter from the options as JSON in Go's names (`Policy`,
/// `Policies`, `KeyBy`, `Rules`, `RulesFile`, `Store`, `Timeout` in
/// nanoseconds, …; the core's options list, SPEC §2, §5, §6). Errors name
/// the field as written (`Policy.Rate`).
///
/// # Safety
/// `options_json` is NULL or a NUL-terminated string; `out` and `err` are NULL
/// or writable. The limiter written to `*out` is freed once with
/// `polylimit_limiter_free`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_build(
    options_json: *const c_char,
    out: *mut *mut polylimit_limiter_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    // SAFETY: the caller's promises above are the ones `build` and `options_arg` need.
    unsafe {
        build(out, err, || {
            let options = options_arg(options_json)?;
            Ok(Limiter::build(Naming::Go, &options)?)
        })
    }
}

/// The configuration `polylimit_limiter_build` would build from
/// `options_json`, in canonical form (rules-file names, every default, JSON),
/// in `*out_json` (free with `polylimit_string_free`); or its error.
///
/// # Safety
/// `options_json` is NULL or a NUL-terminated string; `out_json` and `err`
/// are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_effective_config(
    options_json: *const c_char,
    out_json: *mut *mut c_char,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if out_json.is_null() {
            return Err(FfiError::invalid("out_json is NULL"));
        }
        // SAFETY: the caller passes NULL or a NUL-terminated string.
        let options = unsafe { options_arg(options_json) }?;
        let config = polylimit::effective_config(Naming::Go, &options)?;
        // SAFETY: checked above.
        unsafe { *out_json = c_string(config.to_string()) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

fn options(cost: u64, now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost,
        now_ms: (now_ms >= 0).then_some(now_ms),
    }
}

/// Checks `key` (`key_len` bytes of UTF-8) with `cost`, at `now_ms` (a
/// negative value: the store's clock). Returns `POLYLIMIT_OK` with `*out`
/// written when the decision is ready at once (memory store), or
/// `POLYLIMIT_PENDING` and calls `callback(ctx, …)` later (remote store). With
/// a NULL callback it waits for the store instead. Never blocks otherwise.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL (with `key_len` 0) or
/// points to `key_len` readable bytes; `out` and `err` are NULL or writable.
/// `callback`, when given, may be called from another thread, once, with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_check(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    out: *mut polylimit_decision_t,
    callback: polylimit_callback_t,
    ctx: usize,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `key_len` readable bytes at `key`, or NULL.
        let key = unsafe { str_arg(key, key_len, "key") }?.to_string();
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let work: Work = Box::pin(async move {
            let d = limiter.check_with(&key, options(cost, now_ms)).await?;
            Ok(Done::Decision((&d).into()))
        });
        match start(work, callback, ctx)? {
            Some(Done::Decision(d)) => {
                // SAFETY: checked above.
                unsafe { *out = d };
                Ok(Status::POLYLIMIT_OK as i32)
            }
            Some(Done::Text(_)) => Err(FfiError::Core(polylimit::Error::Internal("text for a check".into()))),
            None => Ok(Status::POLYLIMIT_PENDING as i32),
        }
    })
}

/// `polylimit_limiter_check` that waits for the answer on the calling thread
/// (fine for the memory store, where a check takes well under a microsecond).
///
/// # Safety
/// As `polylimit_limiter_check`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_check_blocking(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    out: *mut polylimit_decision_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    // SAFETY: the same promises, passed on.
    unsafe { polylimit_limiter_check(limiter, key, key_len, cost, now_ms, out, None, 0, err) }
}

/// Decides an HTTP request by the limiter's rules. `request_json` is the
/// `RequestInfo` object (`method`, `path`, `route`, `peer`, `headers`, `user`,
/// `api_key`, `key`, `cost`, `now_ms`). The outcome is JSON
/// (`{"status", "headers", "body", "delay_ms"}`, plus `"decisions"` when
/// `with_decisions`; a middleware does not need them): with
/// `POLYLIMIT_OK` in `*out_json` (free it with `polylimit_string_free`),
/// with `POLYLIMIT_PENDING` through the callback's `text`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `request_json` is NULL (with
/// `request_len` 0) or points to `request_len` readable bytes; `out_json` and
/// `err` are NULL or writable. `callback`, when given, may be called from
/// another thread, once, with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_check_request(
    limiter: *const polylimit_limiter_t,
    request_json: *const u8,
    request_len: usize,
    with_decisions: bool,
    out_json: *mut *mut c_char,
    callback: polylimit_callback_t,
    ctx: usize,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `request_len` readable bytes at `request_json`, or NULL.
        let text = unsafe { str_arg(request_json, request_len, "request_json") }?;
        if out_json.is_null() {
            return Err(FfiError::invalid("out_json is NULL"));
        }
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| polylimit::Error::config("request", "", format!("is not valid JSON: {e}")))?;
        let request = RequestInfo::from_value(&value)?;
        let work: Work = Box::pin(async move {
            let outcome = limiter.check_request(&request).await?;
            let wire = OutcomeWire::new(&outcome, Case::Snake);
            let wire = if with_decisions { wire } else { wire.without_decisions() };
            let text = serde_json::to_string(&wire).map_err(|e| polylimit::Error::Internal(e.to_string()))?;
            Ok(Done::Text(text))
        });
        match start(work, callback, ctx)? {
            Some(Done::Text(t)) => {
                // SAFETY: checked above.
                unsafe { *out_json = c_string(t) };
                Ok(Status::POLYLIMIT_OK as i32)
            }
            Some(Done::Decision(_)) => Err(FfiError::Core(polylimit::Error::Internal(
                "decision for a request".into(),
            ))),
            None => Ok(Status::POLYLIMIT_PENDING as i32),
        }
    })
}

/// Forgets `key` under every policy; waits for the store.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL (with `key_len` 0) or
/// points to `key_len` readable bytes; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_reset(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `key_len` readable bytes at `key`, or NULL.
        let key = unsafe { str_arg(key, key_len, "key") }?.to_string();
        runtime().block_on(async move { limiter.reset(&key).await })?;
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Metrics in Prometheus text format, in `*out` (free with `polylimit_string_free`).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_metrics(
    limiter: *const polylimit_limiter_t,
    out: *mut *mut c_char,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        // SAFETY: checked above.
        unsafe { *out = c_string(limiter.metrics_text()) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Closes the limiter: later checks fail with `POLYLIMIT_CLOSED`. Idempotent.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_close(limiter: *const polylimit_limiter_t) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller passes NULL or a live handle.
        if let Ok(l) = unsafe { handle(limiter) } {
            l.close();
        }
    }));
}

/// Frees the handle. NULL is ignored. Checks still pending complete normally.
///
/// # Safety
/// `limiter` is NULL or a handle from this library not yet freed; no call
/// using it may be running or start afterwards.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_free(limiter: *mut polylimit_limiter_t) {
    if !limiter.is_null() {
        // SAFETY: the handle came from `build` and is freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(limiter) })));
    }
}
