//! The sans-I/O path of a check (`polylimit::Limiter::sans_io_start`): the
//! caller's own socket to the Redis server carries the exact call the core
//! would send, and the core decodes the reply, with no hop to the runtime's
//! thread and back. The core decides which checks it covers (one common
//! policy on standalone plain-TCP Redis without AUTH/SELECT, breaker closed,
//! a live connection, a fresh clock estimate); for the others
//! `polylimit_limiter_sans_io_start` writes no call and the caller takes the
//! usual path (`polylimit_limiter_try_check`).
//!
//! A call's life: `polylimit_limiter_sans_io_start` (the bytes to send and a
//! `polylimit_sans_io_call_t`), then exactly one of
//! `polylimit_sans_io_finish` (the reply's bytes; repeat while it answers
//! `POLYLIMIT_SANS_IO_INCOMPLETE`), `polylimit_sans_io_unanswered` (sent,
//! then the socket failed or stayed silent past the timeout: decided by the
//! policy's `on_store_error`, never sent again) or
//! `polylimit_sans_io_call_free` (never sent).

use std::ffi::c_char;

use polylimit::{sans_io_reply_len, Limiter, SansIoCall};

use crate::decision::polylimit_decision_t;
use crate::errors::{polylimit_error_t, FfiError};
use crate::limiter::{handle, options, polylimit_limiter_t};
use crate::{c_string, guard, str_arg, Status};

/// `polylimit_sans_io_finish`'s `*out_state`: the reply is not whole yet;
/// call again with more of it (the call is kept).
pub const POLYLIMIT_SANS_IO_INCOMPLETE: i32 = 0;
/// `polylimit_sans_io_finish`'s `*out_state`: decided, in `*out`.
pub const POLYLIMIT_SANS_IO_DECIDED: i32 = 1;
/// `polylimit_sans_io_finish`'s and `polylimit_sans_io_unanswered`'s
/// `*out_state`: nothing was charged (a server error): decide the check
/// the usual way. A reload since does not matter: a call finishes on the
/// policies it started with.
pub const POLYLIMIT_SANS_IO_USUAL: i32 = 2;

/// A check sent (or about to be sent) on the caller's socket. It keeps its
/// limiter alive (a closed limiter's call in flight still finishes); it is
/// consumed by `polylimit_sans_io_finish` (unless the reply is incomplete),
/// `polylimit_sans_io_unanswered` or `polylimit_sans_io_call_free`.
pub struct polylimit_sans_io_call_t {
    limiter: Limiter,
    call: SansIoCall,
}

/// Where the caller's own plain-TCP socket may carry checks: `*out_host`
/// (free with `polylimit_string_free`), `*out_port` and each call's timeout
/// `*out_timeout_ms`; or `*out_host` NULL: every check goes the usual way.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out_host`, `out_port`,
/// `out_timeout_ms` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_sans_io_address(
    limiter: *const polylimit_limiter_t,
    out_host: *mut *mut c_char,
    out_port: *mut u16,
    out_timeout_ms: *mut u64,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        if out_host.is_null() || out_port.is_null() || out_timeout_ms.is_null() {
            return Err(FfiError::invalid("out_host, out_port or out_timeout_ms is NULL"));
        }
        let (host, port, timeout) = match limiter.sans_io_address() {
            Some((host, port, timeout)) => (c_string(host), port, timeout.as_millis() as u64),
            None => (std::ptr::null_mut(), 0, 0),
        };
        // SAFETY: checked above.
        unsafe { (*out_host, *out_port, *out_timeout_ms) = (host, port, timeout) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Starts the check of `key` with `cost` at `now_ms` (negative: the store's
/// clock) on the caller's socket: writes the bytes to send into `out`
/// (`*out_len` of its `out_cap` bytes) and the call to `*call`. Or writes
/// `*call` NULL (nothing to send): decide it with
/// `polylimit_limiter_try_check` (the core does not cover it, or its bytes
/// do not fit in `out_cap`). Its reply is the next one on the socket.
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL (with `key_len` 0) or
/// points to `key_len` readable bytes; `out` is NULL (with `out_cap` 0) or
/// points to `out_cap` writable bytes; `out_len`, `call` and `err` are NULL
/// or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn polylimit_limiter_sans_io_start(
    limiter: *const polylimit_limiter_t,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ms: i64,
    out: *mut u8,
    out_cap: usize,
    out_len: *mut usize,
    call: *mut *mut polylimit_sans_io_call_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        // SAFETY: the caller passes `key_len` readable bytes at `key`, or NULL.
        let key = unsafe { str_arg(key, key_len, "key") }?;
        if out_len.is_null() || call.is_null() || (out.is_null() && out_cap != 0) {
            return Err(FfiError::invalid("out_len or call is NULL"));
        }
        // SAFETY: checked above.
        unsafe { (*out_len, *call) = (0, std::ptr::null_mut()) };
        let mut bytes = Vec::with_capacity(out_cap.min(512));
        let Some(started) = limiter.sans_io_start(key, options(cost, now_ms), &mut bytes) else {
            return Ok(Status::POLYLIMIT_OK as i32);
        };
        if bytes.len() > out_cap {
            return Ok(Status::POLYLIMIT_OK as i32);
        }
        // SAFETY: `out` has `out_cap` writable bytes, which do not overlap `bytes`.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), out, bytes.len()) };
        let started = Box::new(polylimit_sans_io_call_t {
            limiter: limiter.clone(),
            call: started,
        });
        // SAFETY: checked above.
        unsafe { (*out_len, *call) = (bytes.len(), Box::into_raw(started)) };
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Reads `call`'s reply from the bytes received so far (`reply_len` at
/// `reply`). `*out_state` is `POLYLIMIT_SANS_IO_INCOMPLETE` (the reply is
/// not whole: `call` is kept, call again with more), else `call` is consumed
/// (also on an error) and `*out_state` is `POLYLIMIT_SANS_IO_DECIDED` (the
/// decision in `*out`; `*out_used` bytes of `reply` were its reply: more
/// means the socket is out of step) or `POLYLIMIT_SANS_IO_USUAL` (nothing
/// was charged: decide it with `polylimit_limiter_try_check`).
///
/// # Safety
/// `call` is NULL or a live call; `reply` is NULL (with `reply_len` 0) or
/// points to `reply_len` readable bytes; `out`, `out_state`, `out_used` and
/// `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_sans_io_finish(
    call: *mut polylimit_sans_io_call_t,
    reply: *const u8,
    reply_len: usize,
    out: *mut polylimit_decision_t,
    out_state: *mut i32,
    out_used: *mut usize,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if call.is_null() || out.is_null() || out_state.is_null() || out_used.is_null() {
            return Err(FfiError::invalid("call, out, out_state or out_used is NULL"));
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
        unsafe { *out_used = used };
        match owned.limiter.sans_io_finish(&owned.call, &bytes[..used]) {
            Some(decided) => {
                let d = decided?;
                // SAFETY: checked above.
                unsafe { (*out, *out_state) = ((&d).into(), POLYLIMIT_SANS_IO_DECIDED) };
            }
            // SAFETY: checked above.
            None => unsafe { *out_state = POLYLIMIT_SANS_IO_USUAL },
        }
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Decides `call`, sent, that got no reply (the socket failed, or stayed
/// silent past the timeout): by the policy's `on_store_error`, the breaker
/// told of a failure (it may have been charged: never send it again).
/// Consumes `call`. `*out_state` is `POLYLIMIT_SANS_IO_DECIDED` (in `*out`)
/// or `POLYLIMIT_SANS_IO_USUAL` (the core cannot say: decide it with
/// `polylimit_limiter_try_check`).
///
/// # Safety
/// `call` is NULL or a live call; `out`, `out_state` and `err` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_sans_io_unanswered(
    call: *mut polylimit_sans_io_call_t,
    out: *mut polylimit_decision_t,
    out_state: *mut i32,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if call.is_null() || out.is_null() || out_state.is_null() {
            return Err(FfiError::invalid("call, out or out_state is NULL"));
        }
        // SAFETY: a live call, consumed here.
        let owned = unsafe { Box::from_raw(call) };
        match owned.limiter.sans_io_unanswered(&owned.call) {
            // SAFETY: checked above.
            Some(d) => unsafe { (*out, *out_state) = ((&d).into(), POLYLIMIT_SANS_IO_DECIDED) },
            // SAFETY: checked above.
            None => unsafe { *out_state = POLYLIMIT_SANS_IO_USUAL },
        }
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// Frees a call that was never sent (nothing decided: decide the check with
/// `polylimit_limiter_try_check`). NULL is ignored.
///
/// # Safety
/// `call` is NULL or a live call, not used after this.
#[no_mangle]
pub unsafe extern "C" fn polylimit_sans_io_call_free(call: *mut polylimit_sans_io_call_t) {
    if !call.is_null() {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: `call` came from `Box::into_raw` in this crate.
            drop(unsafe { Box::from_raw(call) })
        }));
    }
}
