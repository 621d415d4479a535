//! Operations that may wait for the store: each `polylimit_limiter_try_*`
//! polls its call once on the calling thread, answers at once when it is
//! done (the memory store, a local decision), else hands back a
//! `polylimit_pending_t` to submit to a bridge (`bridge.rs`). Every call
//! returns a `wire::packed::Reply`, the form its record carries.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::{Context, Poll, Waker};

use polylimit::bridge::Call;
use polylimit::wire::packed::{write_record, Reply};

use crate::errors::{panic_error, FfiError};
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

/// Runs a pending operation (from any `polylimit_limiter_try_*`) to its end
/// on the calling thread, which waits for the store, and writes its packed
/// record (`ctx` 0; the record `polylimit_pending_submit` would hand back:
/// a decision, outcome, acquired, count, unit, or an error) to `out` when it
/// fits `out_cap` bytes (`*out_owned` NULL), else to bytes of this library
/// in `*out_owned` (free them with `polylimit_bytes_free`); `*out_len` is its
/// length. For a caller whose thread blocks for the answer anyway (a servlet
/// filter): the store's answer wakes that thread itself, with no bridge
/// thread in between. Consumes `pending`. Returns `POLYLIMIT_OK`, or
/// `POLYLIMIT_INVALID_ARGUMENT` (freeing `pending`, writing nothing) when an
/// argument is NULL. A panic in the operation is its `POLYLIMIT_INTERNAL`
/// error record.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet
/// submitted or freed; `out` is NULL (with `out_cap` 0) or has `out_cap`
/// writable bytes; `out_len` and `out_owned` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_pending_wait(
    pending: *mut polylimit_pending_t,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    out_owned: *mut *mut u8,
) -> i32 {
    if pending.is_null() {
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    // SAFETY: `pending` came from `Box::into_raw` in this crate and is consumed once.
    let pending = unsafe { Box::from_raw(pending) };
    if out_len.is_null() || out_owned.is_null() || (out.is_null() && out_cap != 0) {
        drop_quietly(pending);
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    let work = pending.work;
    let result = catch_unwind(AssertUnwindSafe(move || {
        if tokio::runtime::Handle::try_current().is_ok() {
            // A thread of a runtime cannot block on one: wait on a thread of its own.
            std::thread::scope(|s| s.spawn(|| runtime().block_on(work)).join())
                .unwrap_or_else(|panic| Err(panic_error(panic)))
        } else {
            runtime().block_on(work)
        }
    }))
    .unwrap_or_else(|panic| Err(panic_error(panic)));
    let written = catch_unwind(AssertUnwindSafe(|| {
        let mut record = Vec::with_capacity(64);
        write_record(&mut record, 0, &result);
        if record.len() <= out_cap {
            // SAFETY: `out` has `out_cap` writable bytes, which do not overlap `record`.
            unsafe { std::ptr::copy_nonoverlapping(record.as_ptr(), out, record.len()) };
            // SAFETY: checked above.
            unsafe { (*out_len, *out_owned) = (record.len(), std::ptr::null_mut()) };
        } else {
            let len = record.len();
            let owned = Box::into_raw(record.into_boxed_slice()).cast::<u8>();
            // SAFETY: checked above.
            unsafe { (*out_len, *out_owned) = (len, owned) };
        }
    }));
    match written {
        Ok(()) => Status::POLYLIMIT_OK as i32,
        Err(_) => Status::POLYLIMIT_INTERNAL as i32,
    }
}

/// Drops a pending operation, a panic in its drop swallowed.
fn drop_quietly(pending: Box<polylimit_pending_t>) {
    let _ = catch_unwind(AssertUnwindSafe(move || drop(pending)));
}
