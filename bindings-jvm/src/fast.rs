//! A check without uniffi's per-call objects: plain C arguments in, seven
//! `long`s out, for a JNA direct-mapped call (`FastCheck.kt`). A uniffi call
//! costs 11-50 µs of JVM CPU (a `RustCallStatus` structure, a `RustBuffer`
//! per string or optional argument, a clone of the handle: each its own
//! native call tracked by JNA's cleaner); this one is a single call with
//! primitive arguments. Same core call, same decision: only the transport
//! differs. Any error returns a non-zero code and the Kotlin side calls the
//! uniffi `check`, which raises the proper exception.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};

use polylimit::CheckOptions;

use crate::limiter::{check_options, Limiter};
use crate::runtime::runtime;

/// The decision's fields written to `out`, in this order.
pub(crate) const FIELDS: usize = 7;
/// An argument left out (`cost`: the default, `now_ms`: the store's
/// clock), and `retry_after_ms` null.
pub(crate) const NONE: i64 = i64::MIN;

/// Decided: `out` holds the decision.
pub(crate) const OK: i32 = 0;
/// A null pointer or a key that is not UTF-8: nothing was decided.
pub(crate) const BAD_ARGUMENT: i32 = 1;
/// `cost`/`now_ms` rejected by the core's rule: nothing was decided.
pub(crate) const BAD_OPTIONS: i32 = 2;
/// The core returned an error.
pub(crate) const FAILED: i32 = 3;
/// A panic was caught.
pub(crate) const PANICKED: i32 = 4;
/// Not decided yet: the completion callback will get the ticket.
pub(crate) const PENDING: i32 = 5;
/// No completion callback was registered.
pub(crate) const NO_CALLBACK: i32 = 6;

fn long(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn fields(d: &polylimit::Decision) -> [i64; FIELDS] {
    [
        i64::from(d.allowed),
        long(d.limit),
        long(d.remaining),
        long(d.reset_after_ms),
        d.retry_after_ms.map_or(NONE, long),
        long(d.delay_ms),
        d.source.index() as i64,
    ]
}

/// Polls `future` once on the runtime (a memory store decides in that poll,
/// on the calling thread), else waits for it there (a remote store).
pub(crate) fn run<F: Future>(future: F) -> F::Output {
    let rt = runtime();
    let mut future = pin!(future);
    let ready = {
        let _enter = rt.enter();
        future.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    };
    match ready {
        Poll::Ready(out) => out,
        Poll::Pending => rt.block_on(future),
    }
}

/// The limiter, key and options of a fast call, or the code refusing them.
///
/// # Safety
/// As `polylimit_jvm_check_fast`'s.
pub(crate) unsafe fn arguments<'a>(
    handle: u64,
    key: *const u8,
    key_len: i32,
    cost: i64,
    now_ms: i64,
    out: *mut i64,
) -> Result<(&'a Limiter, &'a str, CheckOptions), i32> {
    let len = usize::try_from(key_len).map_err(|_| BAD_ARGUMENT)?;
    if handle == 0 || out.is_null() || (key.is_null() && len > 0) {
        return Err(BAD_ARGUMENT);
    }
    // SAFETY: uniffi's handle of an `Arc<Limiter>` is the Arc's pointer
    // (`Handle::from_arc`); the caller holds it alive for the call.
    let limiter = unsafe { &*(handle as *const Limiter) };
    let bytes = if len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        unsafe { std::slice::from_raw_parts(key, len) }
    };
    let key = std::str::from_utf8(bytes).map_err(|_| BAD_ARGUMENT)?;
    let given = |n: i64| (n != NONE).then_some(n);
    let options = check_options(given(cost), given(now_ms)).map_err(|_| BAD_OPTIONS)?;
    Ok((limiter, key, options))
}

/// Checks `key` (`key_len` UTF-8 bytes) on the limiter behind the uniffi
/// handle `handle`, charging `cost` (`i64::MIN`: the default; checked by the
/// core's rule, as the uniffi `check`'s) at `now_ms` (`i64::MIN`: the store's clock). On 0,
/// `out` holds allowed (0/1), limit, remaining, reset_after_ms,
/// retry_after_ms (`i64::MIN`: none), delay_ms, and the source's index in
/// `polylimit::Source::ALL`.
///
/// # Safety
/// `handle` is a live `Limiter` handle, kept alive by the caller for the
/// call; `key` points to `key_len` readable bytes; `out` to 7 writable i64.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_check_fast(
    handle: u64,
    key: *const u8,
    key_len: i32,
    cost: i64,
    now_ms: i64,
    out: *mut i64,
) -> i32 {
    let body = || {
        // SAFETY: the caller's promises, passed on (see the function's doc).
        let (limiter, key, options) = match unsafe { arguments(handle, key, key_len, cost, now_ms, out) } {
            Ok(args) => args,
            Err(code) => return code,
        };
        match run(limiter.core().check_with(key, options)) {
            Ok(d) => {
                // SAFETY: the caller passes 7 writable i64 at `out`.
                unsafe { std::ptr::copy_nonoverlapping(fields(&d).as_ptr(), out, FIELDS) };
                OK
            }
            Err(_) => FAILED,
        }
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// The names of `polylimit::Source::ALL`, comma-separated, into `buf`
/// (`cap` bytes); returns the length needed (written only when it fits).
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_source_names(buf: *mut u8, cap: i32) -> i32 {
    let names: Vec<&str> = polylimit::Source::ALL.iter().map(|s| s.as_str()).collect();
    let text = names.join(",");
    let cap = usize::try_from(cap).unwrap_or(0);
    if !buf.is_null() && text.len() <= cap {
        // SAFETY: the caller passes `cap` writable bytes at `buf`.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len()) };
    }
    i32::try_from(text.len()).unwrap_or(i32::MAX)
}

/// Called once per pending check, on a runtime thread: the ticket given to
/// `polylimit_jvm_check_start`, a code (`OK`, else an error) and the seven
/// fields (zeros unless `OK`).
pub type Completion = extern "C" fn(i64, i32, i64, i64, i64, i64, i64, i64, i64);

pub(crate) static COMPLETION: OnceLock<Completion> = OnceLock::new();

/// Registers the completion callback of `polylimit_jvm_check_start` (the
/// first registration stays; returns 0 when it is `callback`, else 1).
#[no_mangle]
pub extern "C" fn polylimit_jvm_fast_completion(callback: Completion) -> i32 {
    i32::from(*COMPLETION.get_or_init(|| callback) as usize != callback as usize)
}

/// Polls the inner future, a panic becoming `Err`.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

/// `polylimit_jvm_check_fast` without waiting: a decision ready in the first
/// poll (the memory store) is written to `out` (returns 0); otherwise the
/// check goes on on the runtime and the registered completion callback gets
/// `ticket` and the decision (returns `PENDING`). Other codes: nothing was
/// started.
///
/// # Safety
/// As `polylimit_jvm_check_fast`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_check_start(
    handle: u64,
    key: *const u8,
    key_len: i32,
    cost: i64,
    now_ms: i64,
    ticket: i64,
    out: *mut i64,
) -> i32 {
    let body = || {
        let Some(&completion) = COMPLETION.get() else {
            return NO_CALLBACK;
        };
        // SAFETY: the caller's promises, passed on (see the function's doc).
        let (limiter, key, options) = match unsafe { arguments(handle, key, key_len, cost, now_ms, out) } {
            Ok(args) => args,
            Err(code) => return code,
        };
        let core = limiter.core().clone();
        let key = key.to_string();
        let mut work = CatchUnwind(Box::pin(async move { core.check_with(&key, options).await }));
        let rt = runtime();
        let ready = {
            let _enter = rt.enter();
            Pin::new(&mut work).poll(&mut Context::from_waker(Waker::noop()))
        };
        match ready {
            Poll::Ready(Ok(Ok(d))) => {
                // SAFETY: the caller passes 7 writable i64 at `out`.
                unsafe { std::ptr::copy_nonoverlapping(fields(&d).as_ptr(), out, FIELDS) };
                OK
            }
            Poll::Ready(Ok(Err(_))) => FAILED,
            Poll::Ready(Err(())) => PANICKED,
            Poll::Pending => {
                rt.spawn(async move {
                    let (code, f) = match work.await {
                        Ok(Ok(d)) => (OK, fields(&d)),
                        Ok(Err(_)) => (FAILED, [0; FIELDS]),
                        Err(()) => (PANICKED, [0; FIELDS]),
                    };
                    completion(ticket, code, f[0], f[1], f[2], f[3], f[4], f[5], f[6]);
                });
                PENDING
            }
        }
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}
