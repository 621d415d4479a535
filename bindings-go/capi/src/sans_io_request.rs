//! The sans-I/O path of a request (`polylimit::Limiter::sans_io_request_start`):
//! the caller's own socket to the Redis server carries the one store call
//! the core plans for an HTTP request (as `polylimit_limiter_try_check_request`
//! would send it), and the core turns the reply into the same packed outcome.
//! The core decides which requests it covers (one enforced (policy, key)
//! target of a common shape, no completion token, no `now_ms`); for the
//! others `polylimit_limiter_sans_io_request_start` writes no call and the
//! caller takes the usual path (`polylimit_limiter_try_check_request`).
//!
//! The socket is the one of `polylimit_limiter_sans_io_address`; its replies
//! come back in the order the calls were sent, so several calls may be in
//! flight on it (pipelined). A call's life: `_start` (the bytes to send and a
//! `polylimit_sans_io_request_t`), then exactly one of
//! `polylimit_sans_io_request_finish` (its reply's bytes; repeat while it
//! answers `POLYLIMIT_SANS_IO_INCOMPLETE`), `polylimit_sans_io_request_unanswered`
//! (sent, then the socket failed or stayed silent past the timeout: decided
//! by the policy's `on_store_error`, never sent again) or
//! `polylimit_sans_io_request_free` (never sent).

use polylimit::{sans_io_reply_len, Limiter, Outcome, SansIoRequest};

use crate::errors::{polylimit_error_t, FfiError};
use crate::limiter::{handle, polylimit_limiter_t};
use crate::sans_io::{POLYLIMIT_SANS_IO_DECIDED, POLYLIMIT_SANS_IO_INCOMPLETE, POLYLIMIT_SANS_IO_USUAL};
use crate::{guard, packed, Status};

/// A request's call sent (or about to be sent) on the caller's socket. It
/// keeps its limiter alive; it is consumed by
/// `polylimit_sans_io_request_finish` (unless the reply is incomplete),
/// `polylimit_sans_io_request_unanswered` or `polylimit_sans_io_request_free`.
pub struct polylimit_sans_io_request_t {
    limiter: Limiter,
    call: SansIoRequest,
    with_decisions: bool,
}

/// Starts deciding the packed request (`request_len` bytes at `request`,
/// with `cost`, `now_ms` and `flags` as for
/// `polylimit_limiter_try_check_request`) on the caller's socket: writes the
/// bytes to send into `out` (`*out_len` of its `out_cap` bytes) and the call
/// to `*call`. Or writes `*call` NULL (nothing to send): decide it with
/// `polylimit_limiter_try_check_request` (the core does not cover it, a
/// peek, or its bytes do not fit in `out_cap`). Its reply is the one after
/// those of the calls sent before it on the socket. A malformed request or
/// a bad cost is an error, as for `polylimit_limiter_try_check_request`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `request` is NULL (with
/// `request_len` 0) or points to `request_len` readable bytes; `out` is NULL
/// (with `out_cap` 0) or points to `out_cap` writable bytes; `out_len`,
/// `call` and `err` are NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn polylimit_limiter_sans_io_request_start(
    limiter: *const polylimit_limiter_t,
    request: *const u8,
    request_len: usize,
    cost: u64,
    now_ms: i64,
    flags: u32,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    call: *mut *mut polylimit_sans_io_request_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        if out_len.is_null() || call.is_null() || (out.is_null() && out_cap != 0) {
            return Err(FfiError::invalid("out_len or call is NULL"));
        }
        // SAFETY: checked above.
        unsafe { (*out_len, *call) = (0, std::ptr::null_mut()) };
        let bytes: &[u8] = if request.is_null() {
            if request_len != 0 {
                return Err(FfiError::invalid("request is NULL"));
            }
            &[]
        } else {
            // SAFETY: the caller passes `request_len` readable bytes at `request`.
            unsafe { std::slice::from_raw_parts(request, request_len) }
        };
        if flags & packed::POLYLIMIT_PEEK != 0 {
            return Ok(Status::POLYLIMIT_OK as i32);
        }
        let now_ms = (flags & packed::POLYLIMIT_HAS_NOW_MS != 0).then_some(now_ms);
        let request = packed::request(bytes, cost, now_ms, flags, |name| limiter.reads_header(name))?;
        let mut sent = Vec::with_capacity(out_cap.min(512));
        let Some(started) = limiter.sans_io_request_start(&request, None, &mut sent) else {
            return Ok(Status::POLYLIMIT_OK as i32);
        };
        if sent.len() > out_cap {
            return Ok(Status::POLYLIMIT_OK as i32);
        }
        // SAFETY: `out` has `out_cap` writable bytes, which do not overlap `sent`.
        unsafe { std::ptr::copy_nonoverlapping(sent.as_ptr(), out, sent.len()) };
        let started = Box::new(polylimit_sans_io_request_t {
            limiter: limiter.clone(),
            call: started,
            with_decisions: flags & packed::POLYLIMIT_WITH_DECISIONS != 0,
        });
        // SAFETY: checked above.
        unsafe { (*out_len, *call) = (sent.len(), Box::into_raw(started)) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Writes `o` packed into `out` (`*out_len` bytes, `*out_owned` NULL) when it
/// fits in `out_cap` bytes, else into `*out_owned` (free with `polylimit_bytes_free`).
///
/// # Safety
/// As the callers': `out` has `out_cap` writable bytes (or is NULL with 0);
/// `out_len` and `out_owned` are writable.
unsafe fn write_outcome(
    o: &Outcome,
    with_decisions: bool,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    out_owned: *mut *mut u8,
) {
    let b = packed::outcome(o, with_decisions);
    if b.len() <= out_cap {
        // SAFETY: `out` has `out_cap` writable bytes, which do not overlap `b`.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out, b.len()) };
        // SAFETY: the caller's.
        unsafe { (*out_len, *out_owned) = (b.len(), std::ptr::null_mut()) };
    } else {
        let len = b.len();
        let owned = Box::into_raw(b.into_boxed_slice()).cast::<u8>();
        // SAFETY: the caller's.
        unsafe { (*out_len, *out_owned) = (len, owned) };
    }
}

/// Reads `call`'s reply from the bytes received (`reply_len` at `reply`,
/// starting with its reply). `*out_state` is `POLYLIMIT_SANS_IO_INCOMPLETE`
/// (the reply is not whole: `call` is kept, call again with more), else
/// `call` is consumed (also on an error), `*out_used` bytes of `reply` were
/// its reply, and `*out_state` is `POLYLIMIT_SANS_IO_DECIDED` (the packed
/// outcome as `polylimit_limiter_try_check_request` writes it: in `out`,
/// `*out_len` bytes, when it fits in `out_cap`, else in `*out_owned`, free
/// with `polylimit_bytes_free`) or `POLYLIMIT_SANS_IO_USUAL` (nothing was
/// charged: decide the request with `polylimit_limiter_try_check_request`).
/// A reload since does not matter: a call finishes on the rules it started
/// with.
///
/// # Safety
/// `call` is NULL or a live call; `reply` is NULL (with `reply_len` 0) or
/// points to `reply_len` readable bytes; `out` is NULL (with `out_cap` 0) or
/// points to `out_cap` writable bytes; `out_len`, `out_owned`, `out_state`,
/// `out_used` and `err` are NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn polylimit_sans_io_request_finish(
    call: *mut polylimit_sans_io_request_t,
    reply: *const u8,
    reply_len: usize,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    out_owned: *mut *mut u8,
    out_state: *mut i32,
    out_used: *mut usize,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if call.is_null()
            || out_len.is_null()
            || out_owned.is_null()
            || out_state.is_null()
            || out_used.is_null()
            || (out.is_null() && out_cap != 0)
        {
            return Err(FfiError::invalid(
                "call, out_len, out_owned, out_state or out_used is NULL",
            ));
        }
        let bytes: &[u8] = if reply.is_null() {
            &[]
        } else {
            // SAFETY: the caller passes `reply_len` readable bytes at `reply`.
            unsafe { std::slice::from_raw_parts(reply, reply_len) }
        };
        let Some(used) = sans_io_reply_len(bytes) else {
            // SAFETY: checked above.
            unsafe { (*out_state, *out_used) = (POLYLIMIT_SANS_IO_INCOMPLETE, 0) };
            return Ok(Status::POLYLIMIT_OK as i32);
        };
        // SAFETY: a live call, consumed here (the caller no longer uses it).
        let owned = unsafe { Box::from_raw(call) };
        // SAFETY: checked above.
        unsafe { (*out_used, *out_len, *out_owned) = (used, 0, std::ptr::null_mut()) };
        let polylimit_sans_io_request_t {
            limiter,
            call,
            with_decisions,
        } = *owned;
        match limiter.sans_io_request_finish(call, &bytes[..used]) {
            Some(decided) => {
                let o = decided?;
                // SAFETY: checked above.
                unsafe { write_outcome(&o, with_decisions, out, out_cap, out_len, out_owned) };
                // SAFETY: checked above.
                unsafe { *out_state = POLYLIMIT_SANS_IO_DECIDED };
            }
            // SAFETY: checked above.
            None => unsafe { *out_state = POLYLIMIT_SANS_IO_USUAL },
        }
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Decides `call`, sent, that got no reply (the socket failed, or stayed
/// silent past the timeout): by its policy's `on_store_error`, the breaker
/// told of a failure (it may have been charged: never send it again).
/// Consumes `call`. `*out_state` is `POLYLIMIT_SANS_IO_DECIDED` (the packed
/// outcome in `out` or `*out_owned`, as `polylimit_sans_io_request_finish`
/// writes it) or `POLYLIMIT_SANS_IO_USUAL` (the core cannot say: decide it
/// with `polylimit_limiter_try_check_request`).
///
/// # Safety
/// `call` is NULL or a live call; `out` is NULL (with `out_cap` 0) or points
/// to `out_cap` writable bytes; `out_len`, `out_owned`, `out_state` and
/// `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_sans_io_request_unanswered(
    call: *mut polylimit_sans_io_request_t,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    out_owned: *mut *mut u8,
    out_state: *mut i32,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if call.is_null()
            || out_len.is_null()
            || out_owned.is_null()
            || out_state.is_null()
            || (out.is_null() && out_cap != 0)
        {
            return Err(FfiError::invalid("call, out_len, out_owned or out_state is NULL"));
        }
        // SAFETY: a live call, consumed here.
        let owned = unsafe { Box::from_raw(call) };
        // SAFETY: checked above.
        unsafe { (*out_len, *out_owned) = (0, std::ptr::null_mut()) };
        let polylimit_sans_io_request_t {
            limiter,
            call,
            with_decisions,
        } = *owned;
        match limiter.sans_io_request_unanswered(call) {
            Some(o) => {
                // SAFETY: checked above.
                unsafe { write_outcome(&o, with_decisions, out, out_cap, out_len, out_owned) };
                // SAFETY: checked above.
                unsafe { *out_state = POLYLIMIT_SANS_IO_DECIDED };
            }
            // SAFETY: checked above.
            None => unsafe { *out_state = POLYLIMIT_SANS_IO_USUAL },
        }
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Frees a request's call that was never sent (nothing decided: decide the
/// request with `polylimit_limiter_try_check_request`). NULL is ignored.
///
/// # Safety
/// `call` is NULL or a live call, not used after this.
#[no_mangle]
pub unsafe extern "C" fn polylimit_sans_io_request_free(call: *mut polylimit_sans_io_request_t) {
    if !call.is_null() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `call` came from `Box::into_raw` in this crate.
            drop(unsafe { Box::from_raw(call) })
        }));
    }
}
