//! Operations that may wait for the store: each `polylimit_limiter_try_*`
//! polls its call once on the calling thread, answers at once when it is
//! done (the memory store, a local decision), else hands back a
//! `polylimit_pending_t` to submit to a bridge (`bridge.rs`). Every call
//! returns a `wire::packed::Reply`, the form its record carries.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll, Waker};

use polylimit::bridge::Call;
use polylimit::wire::packed::Reply;

use crate::errors::FfiError;
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
