//! The limiter handle: build (and the effective configuration), check (ready at once or through a callback),
//! check a request, reset, metrics, close, free.

use std::ffi::c_char;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use polylimit::wire::OutcomeWire;
use polylimit::{CheckOptions, Limiter, Naming, OverrideSpec, RequestInfo};

use crate::decision::polylimit_decision_t;
use crate::errors::{polylimit_error_t, FfiError};
use crate::{c_string, cstr_arg, guard, packed, runtime, str_arg, Status};

/// A limiter. Thread-safe; free it once with `polylimit_limiter_free` after
/// the last call that uses it has returned (pending callbacks keep what they
/// need alive).
pub struct polylimit_limiter_t {
    pub(crate) inner: Limiter,
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

pub(crate) enum Done {
    Decision(polylimit_decision_t),
    /// An acquire: the decision and, when it took leases, them as JSON
    /// (`lease.rs`); the callback gets both (`decision` and `text`).
    Acquired(polylimit_decision_t, Option<String>),
    Text(String),
    /// A packed outcome (`packed::outcome`).
    Bytes(Vec<u8>),
}

pub(crate) type Work = Pin<Box<dyn Future<Output = Result<Done, FfiError>> + Send>>;

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

/// Polls `work` once on the runtime: its result when it is done, else the
/// work itself, to be spawned by `polylimit_pending_start` (the caller then
/// pays for a callback only when there is I/O to wait for).
pub(crate) fn try_now(mut work: Work) -> Result<Result<Done, Box<polylimit_pending_t>>, FfiError> {
    let ready = {
        let _enter = runtime().enter();
        work.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    };
    match ready {
        Poll::Ready(done) => done.map(Ok),
        Poll::Pending => Ok(Err(Box::new(polylimit_pending_t { work }))),
    }
}

/// [`try_now`], then: a result at once is written by `write` (`POLYLIMIT_OK`),
/// else the work goes to `*pending` (`POLYLIMIT_PENDING`; start it with
/// `polylimit_pending_start`).
///
/// # Safety
/// `pending` is writable.
pub(crate) unsafe fn now_or_pending(
    work: Work,
    pending: *mut *mut polylimit_pending_t,
    write: impl FnOnce(Done) -> Result<(), FfiError>,
) -> Result<i32, FfiError> {
    match try_now(work)? {
        Ok(done) => {
            write(done)?;
            Ok(Status::POLYLIMIT_OK as i32)
        }
        Err(p) => {
            // SAFETY: the caller passes a writable `pending`.
            unsafe { *pending = Box::into_raw(p) };
            Ok(Status::POLYLIMIT_PENDING as i32)
        }
    }
}

/// An operation `polylimit_limiter_try_check` or
/// `polylimit_limiter_try_check_request` could not finish at once (it waits
/// for the store). Pass it to `polylimit_pending_start` (which consumes it),
/// or drop it with `polylimit_pending_free`.
pub struct polylimit_pending_t {
    pub(crate) work: Work,
}

/// Runs a pending operation on the polylimit runtime and calls
/// `callback(ctx, …)` exactly once, from a runtime thread, when it completes
/// (a check's `decision`, or a request's packed outcome in `text`/`text_len`).
/// Consumes `pending`. Returns `POLYLIMIT_PENDING`, or
/// `POLYLIMIT_INVALID_ARGUMENT` (and frees `pending`, calling nothing) when
/// `pending` or `callback` is NULL.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet
/// started or freed. `callback` may be called from another thread, once, with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_pending_start(
    pending: *mut polylimit_pending_t,
    callback: polylimit_callback_t,
    ctx: usize,
) -> i32 {
    if pending.is_null() {
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    // SAFETY: `pending` came from `Box::into_raw` in this crate and is consumed once.
    let pending = unsafe { Box::from_raw(pending) };
    let spawned = catch_unwind(AssertUnwindSafe(move || {
        let Some(callback) = callback else {
            return Status::POLYLIMIT_INVALID_ARGUMENT;
        };
        let work = pending.work;
        runtime().spawn(async move {
            let result = CatchUnwind(work).await;
            deliver(callback, ctx, result);
        });
        Status::POLYLIMIT_PENDING
    }));
    spawned.unwrap_or(Status::POLYLIMIT_INTERNAL) as i32
}

/// Drops a pending operation without running it (the store may or may not
/// have seen it). NULL is ignored.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet
/// started or freed.
#[no_mangle]
pub unsafe extern "C" fn polylimit_pending_free(pending: *mut polylimit_pending_t) {
    if !pending.is_null() {
        // SAFETY: `pending` came from `Box::into_raw` in this crate and is freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(pending) })));
    }
}

/// Turns a panic while polling into an error, so the callback always runs.
pub(crate) struct CatchUnwind(pub(crate) Work);

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
        // SAFETY: as above; `b` holds `b.len()` bytes until the callback returns.
        Ok(Done::Bytes(b)) => unsafe { callback(ctx, ok, no_decision, b.as_ptr().cast(), b.len(), no_error) },
        // SAFETY: as above; `d` and `t` live until the callback returns.
        Ok(Done::Acquired(d, t)) => unsafe {
            let (text, len) = t.as_ref().map_or((no_text, 0), |t| (t.as_ptr().cast(), t.len()));
            callback(ctx, ok, &d, text, len, no_error)
        },
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
pub(crate) unsafe fn handle<'a>(l: *const polylimit_limiter_t) -> Result<&'a Limiter, FfiError> {
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

pub(crate) fn options(cost: u64, now_ms: i64) -> CheckOptions {
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
            Some(_) => Err(FfiError::Core(polylimit::Error::Internal("text for a check".into()))),
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
            let wire = OutcomeWire::new(&outcome);
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
            Some(_) => Err(FfiError::Core(polylimit::Error::Internal(
                "a decision for a request".into(),
            ))),
            None => Ok(Status::POLYLIMIT_PENDING as i32),
        }
    })
}

/// `polylimit_limiter_try_check`, peeking: the decision a check of `cost` at
/// `now_ms` would get, charging nothing and recording no penalty. Returns
/// `POLYLIMIT_OK` with `*out` written, or `POLYLIMIT_PENDING` with
/// `*pending` written (start it with `polylimit_pending_start`).
///
/// # Safety
/// As `polylimit_limiter_try_check`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_peek(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    out: *mut polylimit_decision_t,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    // SAFETY: the caller keeps `polylimit_limiter_try_check`'s contract.
    guard(err, || unsafe {
        try_decision(limiter, key, key_len, cost, now_ms, true, out, pending)
    })
}

/// `polylimit_limiter_check` without a callback in the call: returns
/// `POLYLIMIT_OK` with `*out` written when the decision is ready at once
/// (memory store, a local decision), or `POLYLIMIT_PENDING` with
/// `*pending` written (start it with `polylimit_pending_start`). A decision
/// made at once costs no callback, no handle and no thread switch.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL (with `key_len` 0) or
/// points to `key_len` readable bytes; `out`, `pending` and `err` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_check(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    out: *mut polylimit_decision_t,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    // SAFETY: the caller keeps this function's contract.
    guard(err, || unsafe {
        try_decision(limiter, key, key_len, cost, now_ms, false, out, pending)
    })
}

/// `polylimit_limiter_try_check` (`peek` false) and `_try_peek` (true).
///
/// # Safety
/// As `polylimit_limiter_try_check`.
#[allow(clippy::too_many_arguments)]
unsafe fn try_decision(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    peek: bool,
    out: *mut polylimit_decision_t,
    pending: *mut *mut polylimit_pending_t,
) -> Result<i32, FfiError> {
    // SAFETY: the caller passes NULL or a live handle.
    let limiter = unsafe { handle(limiter) }?.clone();
    // SAFETY: the caller passes `key_len` readable bytes at `key`, or NULL.
    let key = unsafe { str_arg(key, key_len, "key") }?.to_string();
    if out.is_null() || pending.is_null() {
        return Err(FfiError::invalid("out or pending is NULL"));
    }
    let work: Work = Box::pin(async move {
        let options = options(cost, now_ms);
        let d = if peek {
            limiter.peek_with(&key, options).await?
        } else {
            limiter.check_with(&key, options).await?
        };
        Ok(Done::Decision((&d).into()))
    });
    let write = |done: Done| match done {
        Done::Decision(d) => {
            // SAFETY: checked above.
            unsafe { *out = d };
            Ok(())
        }
        _ => Err(FfiError::Core(polylimit::Error::Internal("not a decision".into()))),
    };
    // SAFETY: `pending` was checked above.
    unsafe { now_or_pending(work, pending, write) }
}

/// Decides an HTTP request by the limiter's rules, in the compact binary
/// encodings of the core's `polylimit::wire::packed` (`core/src/wire/packed.rs`;
/// no JSON either way).
/// `request` holds the packed request (`request_len` bytes); `cost` is its
/// cost (0: the default); `flags` ORs `POLYLIMIT_HAS_NOW_MS` (decide at
/// `now_ms`, else on the store's clock), `POLYLIMIT_WITH_DECISIONS` (every
/// policy's decision in the outcome; a middleware does not need them),
/// `POLYLIMIT_CASE_INSENSITIVE` and `POLYLIMIT_IGNORE_TRAILING_SLASH` (the
/// router's path matching), `POLYLIMIT_PEEK` (the outcome a check would
/// give, nothing charged).
///
/// Returns `POLYLIMIT_OK` when the outcome is ready at once: it is in `out`
/// (`*out_len` bytes, `*out_owned` NULL) when it fits in `out_cap` bytes,
/// else in `*out_owned` (`*out_len` bytes, free with `polylimit_bytes_free`).
/// Or returns `POLYLIMIT_PENDING` with `*pending` written: start it with
/// `polylimit_pending_start`, whose callback gets the packed outcome in
/// `text`/`text_len`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `request` is NULL (with `request_len`
/// 0) or points to `request_len` readable bytes; `out` is NULL (with
/// `out_cap` 0) or points to `out_cap` writable bytes; `out_len`,
/// `out_owned`, `pending` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_check_request(
    limiter: *const polylimit_limiter_t,
    request: *const u8,
    request_len: usize,
    cost: u64,
    now_ms: i64,
    flags: u32,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    out_owned: *mut *mut u8,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        if out_len.is_null() || out_owned.is_null() || pending.is_null() || (out.is_null() && out_cap != 0) {
            return Err(FfiError::invalid("out_len, out_owned or pending is NULL"));
        }
        let bytes: &[u8] = if request.is_null() {
            if request_len != 0 {
                return Err(FfiError::invalid("request is NULL"));
            }
            &[]
        } else {
            // SAFETY: the caller passes `request_len` readable bytes at `request`.
            unsafe { std::slice::from_raw_parts(request, request_len) }
        };
        let now_ms = (flags & packed::POLYLIMIT_HAS_NOW_MS != 0).then_some(now_ms);
        let request = packed::request(bytes, cost, now_ms, flags, |name| limiter.reads_header(name))?;
        let with_decisions = flags & packed::POLYLIMIT_WITH_DECISIONS != 0;
        let peek = flags & packed::POLYLIMIT_PEEK != 0;
        let work: Work = Box::pin(async move {
            let outcome = if peek {
                limiter.peek_request(&request).await?
            } else {
                limiter.check_request(&request).await?
            };
            Ok(Done::Bytes(packed::outcome(&outcome, with_decisions)))
        });
        let write = |done: Done| match done {
            Done::Bytes(b) => {
                if b.len() <= out_cap {
                    // SAFETY: `out` has `out_cap` writable bytes, which do not overlap `b`.
                    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out, b.len()) };
                    // SAFETY: checked above.
                    unsafe { (*out_len, *out_owned) = (b.len(), std::ptr::null_mut()) };
                } else {
                    let len = b.len();
                    let owned = Box::into_raw(b.into_boxed_slice()).cast::<u8>();
                    // SAFETY: checked above.
                    unsafe { (*out_len, *out_owned) = (len, owned) };
                }
                Ok(())
            }
            _ => Err(FfiError::Core(polylimit::Error::Internal(
                "a decision for a request".into(),
            ))),
        };
        // SAFETY: `pending` was checked above.
        unsafe { now_or_pending(work, pending, write) }
    })
}

/// Settles a request after its response: `token` is the completion token of
/// its packed outcome (`token_len` bytes), `status` the response's status (0:
/// no response, counted as failed). Gives back the charges whose rule's
/// `count` does not count `status`. Returns `POLYLIMIT_OK` when done at once
/// (memory store), or `POLYLIMIT_PENDING` with `*pending` written (start it
/// with `polylimit_pending_start`; its callback gets an empty text). Never
/// fails because the store is down; a malformed token is `POLYLIMIT_CONFIG`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `token` is NULL (with `token_len` 0)
/// or points to `token_len` readable bytes; `pending` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_complete(
    limiter: *const polylimit_limiter_t,
    token: *const u8,
    token_len: usize,
    status: u16,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `token_len` readable bytes at `token`, or NULL.
        let token = unsafe { str_arg(token, token_len, "token") }?.to_string();
        if pending.is_null() {
            return Err(FfiError::invalid("pending is NULL"));
        }
        let status = (status != 0).then_some(status);
        let work: Work = Box::pin(async move {
            limiter.complete(&token, status).await?;
            Ok(Done::Bytes(Vec::new()))
        });
        // SAFETY: `pending` was checked above.
        unsafe { now_or_pending(work, pending, |_| Ok(())) }
    })
}

/// The status a middleware's request ends with, to pass to
/// `polylimit_limiter_try_complete` (the core's `ended_status`, SPEC §6),
/// from what the middleware saw: `status` the response's status (0: none),
/// `handler_answered` nonzero when the handler wrote a status, `handler_failed`
/// when it panicked, `client_gone` when the client left before the response
/// was done. 0 is "no response": the handler wrote nothing and failed, or
/// its client left; a client that left after the handler answered is charged
/// as that status.
#[no_mangle]
pub extern "C" fn polylimit_ended_status(
    status: u16,
    handler_answered: u8,
    handler_failed: u8,
    client_gone: u8,
) -> u16 {
    polylimit::ended_status(status, handler_answered != 0, handler_failed != 0, client_gone != 0).unwrap_or(0)
}

/// Frees `len` bytes this library returned (`out_owned` of
/// `polylimit_limiter_try_check_request`). NULL is ignored.
///
/// # Safety
/// `bytes` is NULL or such a buffer, with the length returned with it, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn polylimit_bytes_free(bytes: *mut u8, len: usize) {
    if !bytes.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: `bytes` came from `Box::<[u8]>::into_raw` with `len` bytes, freed once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(bytes, len)) })
        }));
    }
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

/// Forgets every (policy, key) that a check of the request would charge
/// (the same rules, tiers and keys), penalty records included; waits for the
/// store. `request` holds the packed request (`request_len` bytes, as for
/// `polylimit_limiter_try_check_request`); `flags` ORs
/// `POLYLIMIT_CASE_INSENSITIVE` and `POLYLIMIT_IGNORE_TRAILING_SLASH`. Writes
/// how many (policy, key) pairs were forgotten to `*out_count`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `request` is NULL (with `request_len`
/// 0) or points to `request_len` readable bytes; `out_count` and `err` are
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_reset_request(
    limiter: *const polylimit_limiter_t,
    request: *const u8,
    request_len: usize,
    flags: u32,
    out_count: *mut usize,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        if out_count.is_null() {
            return Err(FfiError::invalid("out_count is NULL"));
        }
        let bytes: &[u8] = if request.is_null() {
            if request_len != 0 {
                return Err(FfiError::invalid("request is NULL"));
            }
            &[]
        } else {
            // SAFETY: the caller passes `request_len` readable bytes at `request`.
            unsafe { std::slice::from_raw_parts(request, request_len) }
        };
        let request = packed::request(bytes, 0, None, flags, |name| limiter.reads_header(name))?;
        let count = runtime().block_on(async move { limiter.reset_request(&request).await })?;
        // SAFETY: checked above.
        unsafe { *out_count = count };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Per-key overrides; waits for the store. `op` 0 sets the override of
/// `spec` (the JSON of Go's `Override`: `Policy`, `Rate`, `Burst`, `TTL` in
/// ns, `NowMs`; zero values unset), 1 reads the one in force (`spec`:
/// `{"Policy", "NowMs"}`), 2 removes it (`{"Policy"}`). `*out` receives the
/// JSON of the result, free with `polylimit_string_free`: the override
/// (`{policy, key, rate, burst, limit, expires_at_ms}`), `null`, or whether
/// one was removed.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` and `spec` are NULL (with length
/// 0) or point to that many readable bytes; `out` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_override(
    limiter: *const polylimit_limiter_t,
    op: i32,
    key: *const u8,
    key_len: usize,
    spec: *const u8,
    spec_len: usize,
    out: *mut *mut c_char,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `key_len` readable bytes at `key`, or NULL.
        let key = unsafe { str_arg(key, key_len, "key") }?.to_string();
        // SAFETY: the caller passes `spec_len` readable bytes at `spec`, or NULL.
        let spec = unsafe { str_arg(spec, spec_len, "spec") }?;
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let spec: serde_json::Value = if spec.is_empty() {
            serde_json::Value::Object(Default::default())
        } else {
            serde_json::from_str(spec).map_err(|e| FfiError::invalid(format!("spec is not JSON: {e}")))?
        };
        let policy = spec
            .get("Policy")
            .and_then(serde_json::Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        let now_ms = spec
            .get("NowMs")
            .and_then(serde_json::Value::as_i64)
            .filter(|n| *n != 0);
        let value = match op {
            0 => {
                let spec = OverrideSpec::from_value(&spec, Naming::Go)?;
                runtime()
                    .block_on(async move { limiter.set_override(&key, &spec).await })?
                    .to_value()
            }
            1 => runtime()
                .block_on(async move { limiter.get_override(&key, policy.as_deref(), now_ms).await })?
                .map_or(serde_json::Value::Null, |o| o.to_value()),
            2 => serde_json::Value::Bool(
                runtime().block_on(async move { limiter.remove_override(&key, policy.as_deref()).await })?,
            ),
            other => return Err(FfiError::invalid(format!("op {other} is not 0, 1 or 2"))),
        };
        // SAFETY: checked above.
        unsafe { *out = c_string(value.to_string()) };
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
