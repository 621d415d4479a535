//! The rest of the standard calls without uniffi's per-call objects, as
//! `fast.rs` does for `check`: `peek`, `reset` and `complete` (and their
//! suspend forms), and the suspend `checkRequest` / `peekRequest` of a packed
//! request (`fast_request.rs`'s layout). Each takes a `ticket`: 0 decides on
//! the calling thread, waiting for a remote store there (the blocking form);
//! otherwise a result ready in the first poll (the memory store) is returned
//! at once, and a pending one goes on on the runtime and reaches the
//! completion callback `fast.rs` registered (the suspend and future forms).
//! Same core calls; any error returns a non-zero code and the Kotlin side
//! calls the generated method, which raises the proper exception.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::fast::{
    arguments, fields, run, CatchUnwind, BAD_OPTIONS, COMPLETION, FAILED, FIELDS, NONE, NO_CALLBACK, OK, PANICKED,
    PENDING,
};
use crate::lease::Lease;
use crate::limiter::check_options;
use crate::runtime::runtime;

/// What a started call came to on the calling thread.
pub(crate) enum Started<T> {
    /// Done: the value.
    Ready(T),
    /// Nothing done or the core failed: the code.
    Failed(i32),
    /// Going on: `deliver` will get the result.
    Pending,
}

/// Runs `future`: to the end on this thread when `ticket` is 0; else polls it
/// once here and, if it is not ready, spawns the rest on the runtime, where
/// `deliver` gets the completion callback, the result (or the error's code).
pub(crate) fn go<T, F, D>(ticket: i64, future: F, deliver: D) -> Started<T>
where
    T: Send + 'static,
    F: Future<Output = polylimit::Result<T>> + Send + 'static,
    D: FnOnce(crate::fast::Completion, Result<T, i32>) + Send + 'static,
{
    if ticket == 0 {
        return match run(future) {
            Ok(v) => Started::Ready(v),
            Err(_) => Started::Failed(FAILED),
        };
    }
    let Some(&completion) = COMPLETION.get() else {
        return Started::Failed(NO_CALLBACK);
    };
    let mut work = CatchUnwind(Box::pin(future));
    let rt = runtime();
    let ready = {
        let _enter = rt.enter();
        Pin::new(&mut work).poll(&mut Context::from_waker(Waker::noop()))
    };
    match ready {
        Poll::Ready(Ok(Ok(v))) => Started::Ready(v),
        Poll::Ready(Ok(Err(_))) => Started::Failed(FAILED),
        Poll::Ready(Err(())) => Started::Failed(PANICKED),
        Poll::Pending => {
            rt.spawn(async move {
                let result = match work.await {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(_)) => Err(FAILED),
                    Err(()) => Err(PANICKED),
                };
                deliver(completion, result);
            });
            Started::Pending
        }
    }
}

/// The code of a call with no value: `OK`, `PENDING` or the error's.
fn code(started: Started<()>) -> i32 {
    match started {
        Started::Ready(()) => OK,
        Started::Failed(code) => code,
        Started::Pending => PENDING,
    }
}

/// Completes `ticket` with only a code.
fn deliver_code(completion: crate::fast::Completion, ticket: i64, result: Result<(), i32>) {
    let code = result.err().unwrap_or(OK);
    completion(ticket, code, 0, 0, 0, 0, 0, 0, 0);
}

/// `peek`: the decision `check` would return, charging nothing; arguments
/// and `out` as `polylimit_jvm_check_fast`'s, `ticket` as the module says
/// (0: blocking). Returns `OK` (`out` holds the decision), `PENDING` (the
/// callback gets `ticket` and the seven fields) or an error code.
///
/// # Safety
/// As `polylimit_jvm_check_fast`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_peek(
    handle: u64,
    key: *const u8,
    key_len: i32,
    cost: i64,
    now_ms: i64,
    ticket: i64,
    out: *mut i64,
) -> i32 {
    let body = || {
        // SAFETY: the caller's promises, passed on.
        let (limiter, key, options) = match unsafe { arguments(handle, key, key_len, cost, now_ms, out) } {
            Ok(args) => args,
            Err(code) => return code,
        };
        let core = limiter.core().clone();
        let key = key.to_string();
        let work = async move { core.peek_with(&key, options).await };
        match go(ticket, work, move |completion, result| {
            let (code, f) = match result {
                Ok(d) => (OK, fields(&d)),
                Err(code) => (code, [0; FIELDS]),
            };
            completion(ticket, code, f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
        }) {
            Started::Ready(d) => {
                // SAFETY: the caller passes 7 writable i64 at `out`.
                unsafe { std::ptr::copy_nonoverlapping(fields(&d).as_ptr(), out, FIELDS) };
                OK
            }
            Started::Failed(code) => code,
            Started::Pending => PENDING,
        }
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// `reset`: forgets every policy's state for `key` (`key_len` UTF-8 bytes);
/// `ticket` as the module says. Returns `OK`, `PENDING` (the callback gets
/// `ticket` and a code) or an error code.
///
/// # Safety
/// `handle` as in `polylimit_jvm_check_fast`; `key` points to `key_len`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_reset(handle: u64, key: *const u8, key_len: i32, ticket: i64) -> i32 {
    let body = || {
        let mut unused = 0i64;
        // SAFETY: the caller's promises; `out` is a local never written.
        let (limiter, key, _) = match unsafe { arguments(handle, key, key_len, NONE, NONE, &mut unused) } {
            Ok(args) => args,
            Err(code) => return code,
        };
        let core = limiter.core().clone();
        let key = key.to_string();
        let work = async move { core.reset(&key).await };
        code(go(ticket, work, move |completion, result| {
            deliver_code(completion, ticket, result)
        }))
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// `complete`: settles a request by its completion token (`token_len` UTF-8
/// bytes) with `status` (`i32::MIN`: no status, as null); `ticket` as the
/// module says. Returns `OK`, `PENDING` (the callback gets `ticket` and a
/// code) or an error code (a status that is not a u16: `BAD_OPTIONS`).
///
/// # Safety
/// `handle` as in `polylimit_jvm_check_fast`; `token` points to
/// `token_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_complete(
    handle: u64,
    token: *const u8,
    token_len: i32,
    status: i32,
    ticket: i64,
) -> i32 {
    let body = || {
        let mut unused = 0i64;
        // SAFETY: the caller's promises; `out` is a local never written.
        let (limiter, token, _) = match unsafe { arguments(handle, token, token_len, NONE, NONE, &mut unused) } {
            Ok(args) => args,
            Err(code) => return code,
        };
        let status = match status {
            i32::MIN => None,
            s => match u16::try_from(s) {
                Ok(s) => Some(s),
                Err(_) => return BAD_OPTIONS,
            },
        };
        let core = limiter.core().clone();
        let token = token.to_string();
        let work = async move { core.complete(&token, status).await.map(|_| ()) };
        code(go(ticket, work, move |completion, result| {
            deliver_code(completion, ticket, result)
        }))
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// The uniffi handle of a new `Lease` (0: none), as uniffi lowers one.
fn lease_handle(acquired: crate::lease::Acquired) -> i64 {
    acquired
        .lease
        .map_or(0, |l| uniffi::Handle::from_arc(l).as_raw() as i64)
}

/// `acquire`: arguments as `polylimit_jvm_check_fast`'s, `ticket` as the
/// module says, `out` 8 i64: the decision's seven fields, then the uniffi
/// handle of the `Lease` taken (0: none; the caller owns it). Returns `OK`
/// (`out` written), `PENDING` (the callback gets `ticket`, a code and the
/// address of the 8 values, readable during the callback) or an error code.
///
/// # Safety
/// As `polylimit_jvm_check_fast`, with 8 writable i64 at `out`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_acquire(
    handle: u64,
    key: *const u8,
    key_len: i32,
    cost: i64,
    now_ms: i64,
    ticket: i64,
    out: *mut i64,
) -> i32 {
    let body = || {
        // SAFETY: the caller's promises, passed on.
        let (limiter, key, options) = match unsafe { arguments(handle, key, key_len, cost, now_ms, out) } {
            Ok(args) => args,
            Err(code) => return code,
        };
        // SAFETY: uniffi's handle of an `Arc<Limiter>` is the Arc's pointer
        // (`Handle::from_arc`); the caller holds it alive for the call, and
        // the pending work keeps its own count.
        let owner = unsafe {
            let ptr = handle as *const crate::Limiter;
            std::sync::Arc::increment_strong_count(ptr);
            std::sync::Arc::from_raw(ptr)
        };
        let core = limiter.core().clone();
        let key = key.to_string();
        let work = async move {
            let (d, guard) = core.acquire_with(&key, options).await?;
            let f = fields(&d);
            let lease = lease_handle(owner.acquired(d, guard));
            Ok([f[0], f[1], f[2], f[3], f[4], f[5], f[6], lease])
        };
        match go(ticket, work, move |completion, result| match result {
            Ok(all) => completion(ticket, OK, all.as_ptr() as i64, 0, 0, 0, 0, 0, 0),
            Err(code) => completion(ticket, code, 0, 0, 0, 0, 0, 0, 0),
        }) {
            Started::Ready(all) => {
                // SAFETY: the caller passes 8 writable i64 at `out`.
                unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), out, all.len()) };
                OK
            }
            Started::Failed(code) => code,
            Started::Pending => PENDING,
        }
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// `Lease.release`: gives back the slots of the lease behind the uniffi
/// handle `lease` at `now_ms` (`i64::MIN`: the store's clock); `ticket` as
/// the module says. Returns `OK` (`out[0]`: how many were live), `PENDING`
/// (the callback gets `ticket`, a code and the count) or an error code; on
/// an error the lease still holds its slots (the generated release throws).
///
/// # Safety
/// `lease` is a live `Lease` handle kept alive by the caller for the call;
/// `out` points to 1 writable i64.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_release(lease: u64, now_ms: i64, ticket: i64, out: *mut i64) -> i32 {
    let body = || {
        if lease == 0 || out.is_null() {
            return crate::fast::BAD_ARGUMENT;
        }
        let Ok(options) = check_options(None, (now_ms != NONE).then_some(now_ms)) else {
            return BAD_OPTIONS;
        };
        // SAFETY: as `polylimit_jvm_acquire`'s limiter handle.
        let lease = unsafe {
            let ptr = lease as *const Lease;
            std::sync::Arc::increment_strong_count(ptr);
            std::sync::Arc::from_raw(ptr)
        };
        let (limiter, leases) = lease.held();
        let work = async move {
            let n = crate::lease::release(limiter, leases, options.now_ms).await?;
            lease.forget();
            Ok(n)
        };
        match go(ticket, work, move |completion, result| match result {
            Ok(n) => completion(ticket, OK, n, 0, 0, 0, 0, 0, 0),
            Err(code) => completion(ticket, code, 0, 0, 0, 0, 0, 0, 0),
        }) {
            Started::Ready(n) => {
                // SAFETY: the caller passes 1 writable i64 at `out`.
                unsafe { *out = n };
                OK
            }
            Started::Failed(code) => code,
            Started::Pending => PENDING,
        }
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}
