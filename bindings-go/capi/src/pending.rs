//! Operations that may wait for the store: each `polylimit_limiter_try_*`
//! polls its call once on the calling thread, answers at once when it is
//! done (the memory store, a local decision), else hands back a
//! `polylimit_pending_t` to submit to a bridge (`bridge.rs`). Every call
//! returns a `wire::packed::Reply`, the form its record carries.

use std::ffi::c_char;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use polylimit::bridge::Call;
use polylimit::wire::packed::Reply;

use crate::decision::polylimit_decision_t;
use crate::errors::{panic_error, polylimit_error_t, FfiError};
use crate::{runtime, Status};

/// An operation a `polylimit_limiter_try_*` call could not finish at once
/// (it waits for the store). Submit it to a bridge with
/// `polylimit_pending_submit` (which consumes it), or drop it with
/// `polylimit_pending_free`.
pub struct polylimit_pending_t {
    pub(crate) work: Call,
}

/// Polls `work` once on the runtime: its result when it is done, else the
/// work itself, to be submitted (the caller then pays for a record only when
/// there is I/O to wait for).
pub(crate) fn try_now(mut work: Call) -> Result<Result<Reply, Box<polylimit_pending_t>>, FfiError> {
    let ready = {
        let _enter = runtime().enter();
        work.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    };
    match ready {
        Poll::Ready(reply) => Ok(Ok(reply?)),
        Poll::Pending => Ok(Err(Box::new(polylimit_pending_t { work }))),
    }
}

/// [`try_now`], then: a result at once is written by `write` (`POLYLIMIT_OK`),
/// else the work goes to `*pending` (`POLYLIMIT_PENDING`).
///
/// # Safety
/// `pending` is writable.
pub(crate) unsafe fn now_or_pending(
    work: Call,
    pending: *mut *mut polylimit_pending_t,
    write: impl FnOnce(Reply) -> Result<(), FfiError>,
) -> Result<i32, FfiError> {
    match try_now(work)? {
        Ok(reply) => {
            write(reply)?;
            Ok(Status::POLYLIMIT_OK as i32)
        }
        Err(p) => {
            // SAFETY: the caller passes a writable `pending`.
            unsafe { *pending = Box::into_raw(p) };
            Ok(Status::POLYLIMIT_PENDING as i32)
        }
    }
}

/// The error of a call that answered a reply of another kind (a bug).
pub(crate) fn unexpected(reply: &Reply) -> FfiError {
    FfiError::Core(polylimit::Error::Internal(format!(
        "unexpected {:?} reply",
        reply.kind()
    )))
}

/// Drops a pending operation without running it (the store may or may not
/// have seen it). NULL is ignored.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet
/// submitted or freed.
#[no_mangle]
pub unsafe extern "C" fn polylimit_pending_free(pending: *mut polylimit_pending_t) {
    if !pending.is_null() {
        // SAFETY: `pending` came from `Box::into_raw` in this crate and is freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(pending) })));
    }
}

// The callback form below is kept only while the JVM still calls it (until its helper moves to the bridge).

/// Called exactly once when a started operation completes, from a polylimit
/// runtime thread. `status` is `POLYLIMIT_OK` or an error code. On OK:
/// `decision` (checks, acquires) and/or `text`/`text_len` (a request's
/// packed outcome, an acquire's leases as JSON, a release's count as decimal
/// text, empty for a completion); on error `error`. Everything is borrowed
/// for the call only.
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

/// Runs a pending operation on the polylimit runtime and calls
/// `callback(ctx, …)` exactly once, from a runtime thread, when it completes.
/// Consumes `pending`. Returns `POLYLIMIT_PENDING`, or
/// `POLYLIMIT_INVALID_ARGUMENT` (and frees `pending`, calling nothing) when
/// `pending` or `callback` is NULL. Prefer `polylimit_pending_submit`.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet
/// submitted or freed. `callback` may be called from another thread, once, with `ctx`.
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
            let _ = catch_unwind(AssertUnwindSafe(|| deliver(callback, ctx, result)));
        });
        Status::POLYLIMIT_PENDING
    }));
    spawned.unwrap_or(Status::POLYLIMIT_INTERNAL) as i32
}

/// Turns a panic while polling into an error, so the callback always runs.
struct CatchUnwind(Call);

impl Future for CatchUnwind {
    type Output = polylimit::Result<Reply>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        catch_unwind(AssertUnwindSafe(|| self.0.as_mut().poll(cx)))
            .unwrap_or_else(|panic| Poll::Ready(Err(panic_error(panic))))
    }
}

type Callback =
    unsafe extern "C" fn(usize, i32, *const polylimit_decision_t, *const c_char, usize, *const polylimit_error_t);

/// What `polylimit_callback_t` gets of a reply: a decision and/or text.
fn callback_parts(reply: Reply) -> (Option<polylimit_decision_t>, Option<Vec<u8>>) {
    match reply {
        Reply::Decision(d) => (Some((&d).into()), None),
        Reply::Acquired(d, leases) => (
            Some((&d).into()),
            crate::lease::leases_text(&leases).map(String::into_bytes),
        ),
        Reply::Outcome(o, with_decisions) => (None, Some(crate::packed::outcome(&o, with_decisions))),
        Reply::Count(n) => (None, Some(n.to_string().into_bytes())),
        Reply::Json(v) => (None, Some(v.to_string().into_bytes())),
        Reply::Unit | Reply::Bool(_) | Reply::Decisions(_) => (None, Some(Vec::new())),
    }
}

/// Calls `callback` with `result` as `polylimit_callback_t` describes it.
fn deliver(callback: Callback, ctx: usize, result: polylimit::Result<Reply>) {
    let (decision, text) = match result {
        Ok(reply) => callback_parts(reply),
        Err(e) => {
            let e = FfiError::Core(e);
            let code = e.status() as i32;
            let err = e.into_raw();
            // SAFETY: the callback was given for exactly this call; `err` is
            // ours, borrowed by the callback and freed once after it.
            unsafe {
                callback(ctx, code, std::ptr::null(), std::ptr::null(), 0, err);
                crate::errors::polylimit_error_free(err);
            }
            return;
        }
    };
    let d = decision.as_ref().map_or(std::ptr::null(), |d| d as *const _);
    let (t, len) = text
        .as_ref()
        .map_or((std::ptr::null(), 0), |t| (t.as_ptr().cast::<c_char>(), t.len()));
    // SAFETY: as above; `d` and `t` live until the callback returns.
    unsafe { callback(ctx, Status::POLYLIMIT_OK as i32, d, t, len, std::ptr::null()) }
}
