//! The limiter handle: build (and the effective configuration), check (ready
//! at once or pending, `pending.rs`), check a request, reset, metrics, close, free.

use std::ffi::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};

use polylimit::bridge::Call;
use polylimit::wire::packed::Reply;
use polylimit::{CheckOptions, Limiter, Naming, OverrideSpec};

use crate::decision::polylimit_decision_t;
use crate::errors::{polylimit_error_t, FfiError};
use crate::pending::{now_or_pending, polylimit_pending_t, unexpected};
use crate::{c_string, cstr_arg, guard, packed, runtime, str_arg, Status};

/// A limiter. Thread-safe; free it once with `polylimit_limiter_free` after
/// the last call that uses it has returned (pending operations keep what
/// they need alive).
pub struct polylimit_limiter_t {
    pub(crate) inner: Limiter,
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
/// negative value: the store's clock), waiting for the answer on the calling
/// thread (fine for the memory store, where a check takes well under a
/// microsecond; a remote store holds the thread until it answers).
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL (with `key_len` 0) or
/// points to `key_len` readable bytes; `out` and `err` are NULL or writable.
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
    guard(err, || {
        let mut pending = std::ptr::null_mut();
        // SAFETY: the caller's promises; `pending` is a local.
        let rc = unsafe { try_decision(limiter, key, key_len, cost, now_ms, false, out, &mut pending) }?;
        if rc == Status::POLYLIMIT_PENDING as i32 {
            // SAFETY: written by `try_decision` just now, consumed here.
            let work = unsafe { Box::from_raw(pending) }.work;
            match runtime().block_on(work)? {
                // SAFETY: `try_decision` checked `out`.
                Reply::Decision(d) => unsafe { *out = (&d).into() },
                other => return Err(unexpected(&other)),
            }
        }
        Ok(Status::POLYLIMIT_OK as i32)
    })
}

/// `polylimit_limiter_try_check`, peeking: the decision a check of `cost` at
/// `now_ms` would get, charging nothing and recording no penalty. Returns
/// `POLYLIMIT_OK` with `*out` written, or `POLYLIMIT_PENDING` with
/// `*pending` written (submit it with `polylimit_pending_submit`).
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

/// Checks `key` as `polylimit_limiter_check_blocking` does, without waiting: returns
/// `POLYLIMIT_OK` with `*out` written when the decision is ready at once
/// (memory store, a local decision), or `POLYLIMIT_PENDING` with
/// `*pending` written (submit it with `polylimit_pending_submit`). A decision
/// made at once costs no record, no handle and no thread switch.
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
    let work: Call = Box::pin(async move {
        let options = options(cost, now_ms);
        let d = if peek {
            limiter.peek_with(&key, options).await?
        } else {
            limiter.check_with(&key, options).await?
        };
        Ok(Reply::Decision(d))
    });
    let write = |reply: Reply| match reply {
        Reply::Decision(d) => {
            // SAFETY: checked above.
            unsafe { *out = (&d).into() };
            Ok(())
        }
        other => Err(unexpected(&other)),
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
/// Or returns `POLYLIMIT_PENDING` with `*pending` written: submit it with
/// `polylimit_pending_submit`; its record is the outcome.
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
        let work: Call = Box::pin(async move {
            let outcome = if peek {
                limiter.peek_request(&request).await?
            } else {
                limiter.check_request(&request).await?
            };
            Ok(Reply::Outcome(outcome, with_decisions))
        });
        let write = |reply: Reply| match reply {
            Reply::Outcome(o, with_decisions) => {
                let b = packed::outcome(&o, with_decisions);
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
            other => Err(unexpected(&other)),
        };
        // SAFETY: `pending` was checked above.
        unsafe { now_or_pending(work, pending, write) }
    })
}

/// Settles a request after its response: `token` is the completion token of
/// its packed outcome (`token_len` bytes), `status` the response's status (0:
/// no response, counted as failed). Gives back the charges whose rule's
/// `count` does not count `status`. Returns `POLYLIMIT_OK` when done at once
/// (memory store), or `POLYLIMIT_PENDING` with `*pending` written (submit it
/// with `polylimit_pending_submit`; its record is a unit). Never
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
    // SAFETY: the caller's guarantees, passed on.
    unsafe {
        complete(
            limiter,
            token,
            token_len,
            Ok((status != 0).then_some(status)),
            Reported::default(),
            pending,
            err,
        )
    }
}

/// `polylimit_limiter_try_complete` reporting the request's actual cost,
/// learned from the response: with `has_cost`, `cost` (a whole number of at
/// least 0; a negative one is `POLYLIMIT_CONFIG` naming `cost`, returned
/// once the request is completed without it) replaces the
/// reservation: the difference is given back, or charged whatever the limit,
/// capped at the rules' `max_cost`; with `has_now_ms`, `now_ms` is the clock
/// of that charge (tests; otherwise the process's clock).
///
/// # Safety
/// As `polylimit_limiter_try_complete`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn polylimit_limiter_try_complete_cost(
    limiter: *const polylimit_limiter_t,
    token: *const u8,
    token_len: usize,
    status: u16,
    has_cost: bool,
    cost: i64,
    has_now_ms: bool,
    now_ms: i64,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    let reported = Reported::new(has_cost, cost, has_now_ms, now_ms);
    let status = Ok((status != 0).then_some(status));
    // SAFETY: the caller's guarantees, passed on.
    unsafe { complete(limiter, token, token_len, status, reported, pending, err) }
}

/// Settles a gRPC call (a request of the gRPC kind) once it has ended:
/// `code` is the gRPC status code it ended with (0 is OK), or -1 when it
/// ended with no status at all (counted as failed). As
/// `polylimit_limiter_try_complete` otherwise; a code past 65535 is
/// `POLYLIMIT_INVALID_ARGUMENT`.
///
/// # Safety
/// As `polylimit_limiter_try_complete`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_try_complete_call(
    limiter: *const polylimit_limiter_t,
    token: *const u8,
    token_len: usize,
    code: i32,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    // SAFETY: the caller's guarantees, passed on.
    unsafe {
        complete(
            limiter,
            token,
            token_len,
            call_code(code),
            Reported::default(),
            pending,
            err,
        )
    }
}

/// `polylimit_limiter_try_complete_call` reporting the call's actual cost,
/// learned while serving it: `has_cost`, `cost`, `has_now_ms` and `now_ms`
/// as in `polylimit_limiter_try_complete_cost`.
///
/// # Safety
/// As `polylimit_limiter_try_complete`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn polylimit_limiter_try_complete_call_cost(
    limiter: *const polylimit_limiter_t,
    token: *const u8,
    token_len: usize,
    code: i32,
    has_cost: bool,
    cost: i64,
    has_now_ms: bool,
    now_ms: i64,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    let reported = Reported::new(has_cost, cost, has_now_ms, now_ms);
    // SAFETY: the caller's guarantees, passed on.
    unsafe { complete(limiter, token, token_len, call_code(code), reported, pending, err) }
}

/// A gRPC call's end as a completion's status: -1 is none at all.
fn call_code(code: i32) -> Result<Option<u16>, FfiError> {
    match code {
        -1 => Ok(None),
        _ => u16::try_from(code)
            .map(Some)
            .map_err(|_| FfiError::invalid(format!("code: {code} is not a gRPC status code or -1"))),
    }
}

/// What a completion reports besides its status, as the values the core's
/// `complete_values` checks (it completes without a cost it refuses).
#[derive(Default)]
struct Reported {
    cost: Option<serde_json::Value>,
    now_ms: Option<serde_json::Value>,
}

impl Reported {
    fn new(has_cost: bool, cost: i64, has_now_ms: bool, now_ms: i64) -> Reported {
        Reported {
            cost: has_cost.then(|| serde_json::Value::from(cost)),
            now_ms: has_now_ms.then(|| serde_json::Value::from(now_ms)),
        }
    }
}

/// The completions' one body: `status` None is no response at all.
///
/// # Safety
/// As `polylimit_limiter_try_complete`.
unsafe fn complete(
    limiter: *const polylimit_limiter_t,
    token: *const u8,
    token_len: usize,
    status: Result<Option<u16>, FfiError>,
    reported: Reported,
    pending: *mut *mut polylimit_pending_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        let status = status?;
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?.clone();
        // SAFETY: the caller passes `token_len` readable bytes at `token`, or NULL.
        let token = unsafe { str_arg(token, token_len, "token") }?.to_string();
        if pending.is_null() {
            return Err(FfiError::invalid("pending is NULL"));
        }
        let work: Call = Box::pin(async move {
            let Reported { cost, now_ms } = reported;
            limiter
                .complete_values(&token, status, cost.as_ref(), now_ms.as_ref())
                .await?;
            Ok(Reply::Unit)
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

/// Reloads the limiter's rules file (or options), `${NAME}` expanded anew,
/// and swaps the rules at once; calls in flight finish on the old ones. A
/// bad file is `POLYLIMIT_CONFIG` naming the field, and the old rules stay.
/// Reads a file and builds: nothing waits on the store.
///
/// # Safety
/// `limiter` is NULL or a live handle; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_reload(
    limiter: *const polylimit_limiter_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        // SAFETY: the caller passes NULL or a live handle.
        let limiter = unsafe { handle(limiter) }?;
        limiter.reload_blocking()?;
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
/// one was removed. Policy-wide limits cross here too, `key` ignored: `op` 3
/// sets the limit of `spec` (as 0), 4 reads it (as 1), 5 removes it (as 2);
/// the limit is `{policy, rate, burst, limit, expires_at_ms}`.
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
            3 => {
                let spec = OverrideSpec::from_value(&spec, Naming::Go)?;
                runtime()
                    .block_on(async move { limiter.set_limit(&spec).await })?
                    .to_value()
            }
            4 => runtime()
                .block_on(async move { limiter.get_limit(policy.as_deref(), now_ms).await })?
                .map_or(serde_json::Value::Null, |l| l.to_value()),
            5 => serde_json::Value::Bool(
                runtime().block_on(async move { limiter.remove_limit(policy.as_deref()).await })?,
            ),
            other => return Err(FfiError::invalid(format!("op {other} is not 0 to 5"))),
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

/// Every metric family, read now, as JSON in `*out` (free with
/// `polylimit_string_free`): `{"start_unix_nanos", "families": [{"name",
/// "help", "kind", "points"}]}`, what the Go OpenTelemetry producer reads.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `err` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_metrics_snapshot(
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
        unsafe { *out = c_string(limiter.metrics_snapshot().to_value().to_string()) };
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
