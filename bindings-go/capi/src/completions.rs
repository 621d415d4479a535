//! Completions through a queue instead of a callback: the runtime thread that
//! finishes a pending operation pushes its result here and, only when the
//! reader has said it is about to sleep, writes one byte to the reader's pipe.
//! The reader (Go: one goroutine reading the pipe through its own poller, so
//! no OS thread waits) takes the finished operations in batches with
//! `polylimit_completions_take`. No runtime thread ever calls into the
//! caller's language: a callback from a foreign thread has to find a free Go
//! processor first, and while it waits for one the runtime thread stops
//! serving every other Redis reply.

use std::io::Write;
use std::mem::ManuallyDrop;
use std::os::fd::FromRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use crate::decision::polylimit_decision_t;
use crate::errors::{polylimit_error_free, polylimit_error_t, FfiError};
use crate::pending::{callback_parts, polylimit_pending_t, CatchUnwind};
use crate::{runtime, Status};
use polylimit::wire::packed::Reply;

/// One finished operation, as `polylimit_completions_take` lends it: the
/// `ctx` given to `polylimit_pending_start_queued`, `status` (`POLYLIMIT_OK`
/// or an error code), and what the callback of `polylimit_pending_start`
/// would have received: `decision` when `has_decision` (checks, acquires),
/// `text`/`text_len` (a request's packed outcome, an acquire's leases; NULL
/// when none), `error` on failure. Everything stays valid until the next
/// `polylimit_completions_take`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct polylimit_completion_t {
    /// The caller's value from `polylimit_pending_start_queued`.
    pub ctx: usize,
    /// `POLYLIMIT_OK` or an error code.
    pub status: i32,
    /// Whether `decision` is set.
    pub has_decision: bool,
    /// The decision of a check or an acquire.
    pub decision: polylimit_decision_t,
    /// The bytes of a request's outcome or an acquire's leases; NULL when none.
    pub text: *const u8,
    /// How many bytes `text` holds.
    pub text_len: usize,
    /// On failure, the error; else NULL. Not to be freed by the caller.
    pub error: *const polylimit_error_t,
}

/// A finished operation waiting to be taken (then lent until the next take).
struct Finished {
    ctx: usize,
    status: i32,
    decision: Option<polylimit_decision_t>,
    text: Option<Vec<u8>>,
    error: *mut polylimit_error_t,
}

// SAFETY: `error` is owned by this entry alone (made by `into_raw`, freed once in Drop).
unsafe impl Send for Finished {}

impl Drop for Finished {
    fn drop(&mut self) {
        if !self.error.is_null() {
            // SAFETY: made by `FfiError::into_raw` for this entry, freed only here.
            unsafe { polylimit_error_free(self.error) };
        }
    }
}

impl Finished {
    fn new(ctx: usize, result: Result<Reply, FfiError>) -> Finished {
        match result {
            Ok(reply) => {
                let (decision, text) = callback_parts(reply);
                Finished {
                    ctx,
                    status: Status::POLYLIMIT_OK as i32,
                    decision,
                    text,
                    error: std::ptr::null_mut(),
                }
            }
            Err(e) => Finished {
                ctx,
                status: e.status() as i32,
                decision: None,
                text: None,
                error: e.into_raw(),
            },
        }
    }

    fn lend(&self) -> polylimit_completion_t {
        polylimit_completion_t {
            ctx: self.ctx,
            status: self.status,
            has_decision: self.decision.is_some(),
            decision: self.decision.unwrap_or_default(),
            text: self.text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr()),
            text_len: self.text.as_ref().map_or(0, Vec::len),
            error: self.error,
        }
    }
}

struct Queue {
    /// Finished, not yet taken.
    ready: Vec<Finished>,
    /// Taken by the last `polylimit_completions_take`, lent until the next.
    lent: Vec<Finished>,
    /// The reader found nothing and is about to wait on its pipe: the next
    /// push writes a byte to `wake_fd`.
    armed: bool,
    /// The write end of the reader's pipe; -1 before `polylimit_completions_open`.
    wake_fd: i32,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    ready: Vec::new(),
    lent: Vec::new(),
    armed: false,
    wake_fd: -1,
});

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    // A panic never happens while the lock is held (pushes and takes only move entries).
    QUEUE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn push(finished: Finished) {
    let wake = {
        let mut q = queue();
        q.ready.push(finished);
        if q.armed {
            q.armed = false;
            q.wake_fd
        } else {
            -1
        }
    };
    if wake >= 0 {
        // SAFETY: `wake` is the open write end the reader gave; ManuallyDrop never closes it.
        let mut pipe = ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(wake) });
        // A full pipe already holds a byte the reader will read: nothing is lost.
        let _ = pipe.write(&[1]);
    }
}

/// Queues `text` as a finished entry with `ctx` (status OK, no decision):
/// how an adaptive policy's alert reaches a reader that asked for its alerts
/// through the queue (`polylimit_limiter_on_anomaly_queued`). Never blocks.
pub(crate) fn push_json(ctx: usize, json: serde_json::Value) {
    push(Finished::new(ctx, Ok(Reply::Json(json))));
}

/// Whether `polylimit_completions_open` was called.
pub(crate) fn is_open() -> bool {
    queue().wake_fd >= 0
}

/// Makes `wake_fd` (the write end of a pipe the reader waits on; the caller
/// keeps it open for the life of the process) the queue's wake-up. Call once,
/// before `polylimit_pending_start_queued`. Returns `POLYLIMIT_OK`, or
/// `POLYLIMIT_INVALID_ARGUMENT` for a negative fd.
#[no_mangle]
pub extern "C" fn polylimit_completions_open(wake_fd: i32) -> i32 {
    if wake_fd < 0 {
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    queue().wake_fd = wake_fd;
    Status::POLYLIMIT_OK as i32
}

/// Runs a pending operation on the polylimit runtime; when it completes, its
/// result goes to the completion queue with `ctx` (taken by
/// `polylimit_completions_take`), exactly once. Consumes `pending`. Returns
/// `POLYLIMIT_PENDING`, or `POLYLIMIT_INVALID_ARGUMENT` (freeing `pending`,
/// queueing nothing) when `pending` is NULL or the queue was never opened.
///
/// # Safety
/// `pending` is NULL or a pending operation from this library not yet started or freed.
#[no_mangle]
pub unsafe extern "C" fn polylimit_pending_start_queued(pending: *mut polylimit_pending_t, ctx: usize) -> i32 {
    if pending.is_null() {
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    // SAFETY: `pending` came from `Box::into_raw` in this crate and is consumed once.
    let pending = unsafe { Box::from_raw(pending) };
    let spawned = catch_unwind(AssertUnwindSafe(move || {
        if queue().wake_fd < 0 {
            return Status::POLYLIMIT_INVALID_ARGUMENT;
        }
        let work = pending.work;
        runtime().spawn(async move {
            let result = CatchUnwind(work).await;
            let _ = catch_unwind(AssertUnwindSafe(|| {
                push(Finished::new(ctx, result.map_err(FfiError::Core)))
            }));
        });
        Status::POLYLIMIT_PENDING
    }));
    spawned.unwrap_or(Status::POLYLIMIT_INTERNAL) as i32
}

/// Takes up to `cap` finished operations into `out` (`*out_n` of them, in
/// the order they finished) and releases those of the previous take. When
/// there are none, `*out_n` is 0 and the next operation to finish writes a
/// byte to the wake-up pipe: wait on it, then take again. One reader only.
/// Returns `POLYLIMIT_OK`, or `POLYLIMIT_INVALID_ARGUMENT` when `out` or
/// `out_n` is NULL.
///
/// # Safety
/// `out` points to `cap` writable entries; `out_n` is writable. Only one
/// thread takes at a time.
#[no_mangle]
pub unsafe extern "C" fn polylimit_completions_take(
    out: *mut polylimit_completion_t,
    cap: usize,
    out_n: *mut usize,
) -> i32 {
    if out.is_null() || out_n.is_null() {
        return Status::POLYLIMIT_INVALID_ARGUMENT as i32;
    }
    let taken = catch_unwind(AssertUnwindSafe(|| {
        let released = {
            let mut q = queue();
            let n = q.ready.len().min(cap);
            let lent: Vec<Finished> = q.ready.drain(..n).collect();
            for (i, f) in lent.iter().enumerate() {
                // SAFETY: the caller passes `cap` writable entries and `i < n <= cap`.
                unsafe { *out.add(i) = f.lend() };
            }
            q.armed = n == 0;
            // SAFETY: the caller passes a writable `out_n`.
            unsafe { *out_n = n };
            // The previous take's entries, freed below outside the lock.
            std::mem::replace(&mut q.lent, lent)
        };
        drop(released);
        Status::POLYLIMIT_OK
    }));
    taken.unwrap_or(Status::POLYLIMIT_INTERNAL) as i32
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    fn take(out: &mut [polylimit_completion_t]) -> usize {
        let mut n = usize::MAX;
        // SAFETY: `out` holds `out.len()` writable entries; this test is the only reader.
        let rc = unsafe { polylimit_completions_take(out.as_mut_ptr(), out.len(), &mut n) };
        assert_eq!(rc, Status::POLYLIMIT_OK as i32);
        n
    }

    #[test]
    fn finished_operations_come_back_in_order_with_their_ctx_and_wake_the_sleeping_reader() {
        let (reader, writer) = UnixStream::pair().unwrap();
        reader.set_nonblocking(true).unwrap();
        assert_eq!(
            polylimit_completions_open(writer.as_raw_fd()),
            Status::POLYLIMIT_OK as i32
        );
        let mut out = [polylimit_completion_t {
            ctx: 0,
            status: 0,
            has_decision: false,
            decision: Default::default(),
            text: std::ptr::null(),
            text_len: 0,
            error: std::ptr::null(),
        }; 2];
        while take(&mut out) != 0 {}
        // The reader found nothing: the next push writes one byte, the one after none.
        let core = polylimit::Decision {
            allowed: true,
            limit: 5,
            remaining: 4,
            reset_after_ms: 0,
            retry_after_ms: None,
            delay_ms: 0,
            source: polylimit::Source::Store,
        };
        let d = polylimit_decision_t::from(&core);
        push(Finished::new(7, Ok(Reply::Decision(core))));
        push(Finished::new(8, Ok(Reply::Count(123))));
        push(Finished::new(9, Err(FfiError::invalid("boom"))));
        let mut byte = [0u8; 8];
        assert_eq!((&reader).read(&mut byte).unwrap(), 1);
        assert!((&reader).read(&mut byte).is_err(), "one byte per sleep");
        assert_eq!(take(&mut out), 2);
        assert_eq!((out[0].ctx, out[0].has_decision, out[0].decision), (7, true, d));
        assert_eq!((out[1].ctx, out[1].has_decision), (8, false));
        // SAFETY: lent until the next take.
        assert_eq!(
            // SAFETY: lent until the next take.
            unsafe { std::slice::from_raw_parts(out[1].text, out[1].text_len) },
            b"123"
        );
        assert_eq!(take(&mut out), 1);
        assert_eq!(out[0].ctx, 9);
        assert_eq!(out[0].status, Status::POLYLIMIT_INVALID_ARGUMENT as i32);
        assert!(!out[0].error.is_null());
        assert_eq!(take(&mut out), 0);
        // SAFETY: NULL arguments are refused, nothing is written.
        unsafe {
            assert_eq!(
                polylimit_completions_take(std::ptr::null_mut(), 1, &mut 0),
                Status::POLYLIMIT_INVALID_ARGUMENT as i32
            );
            assert_eq!(
                polylimit_pending_start_queued(std::ptr::null_mut(), 1),
                Status::POLYLIMIT_INVALID_ARGUMENT as i32
            );
        }
        assert_eq!(
            polylimit_completions_open(-1),
            Status::POLYLIMIT_INVALID_ARGUMENT as i32
        );
        std::mem::forget(writer); // the queue keeps its fd for the rest of the process
    }
}
