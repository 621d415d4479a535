//! `checkRequest` without uniffi's per-call objects: the request packed in
//! one byte array in the core's layout (`polylimit::wire::packed`, the Go C
//! ABI's), the outcome packed back into a byte array the caller owns. The
//! uniffi call lowers an `HttpRequest` record (a `RustBuffer`, a JSON object
//! built and read again), lifts an `Outcome` record, and allocates a
//! `RustCallStatus`: the Spring filter paid 78 µs of CPU per request for it.
//! Same core call, same outcome, the headers formatted by the core; any
//! error returns a negative code and the Kotlin side calls the uniffi
//! `checkRequest`, which raises the proper exception.

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use polylimit::wire::packed;
use polylimit::RequestInfo;

use crate::fast::PANICKED as PANICKED_START;
use crate::fast_calls::{go, Started};
use crate::limiter::{check_options, Limiter};

/// `flags` bit: put every policy's decision in the outcome.
const WITH_DECISIONS: i32 = 1;
/// `flags` bit: the router matches paths case-insensitively.
const CASE_INSENSITIVE: i32 = 2;
/// `flags` bit: the router ignores one trailing slash.
const IGNORE_TRAILING_SLASH: i32 = 4;
/// `cost`/`now_ms` left out.
const NONE: i64 = i64::MIN;

/// A null pointer, a negative length or a malformed packed request.
const BAD_ARGUMENT: i32 = -1;
/// `cost`/`now_ms` rejected by the core's rule: nothing was decided.
const BAD_OPTIONS: i32 = -2;
/// The core returned an error.
const FAILED: i32 = -3;
/// A panic was caught.
const PANICKED: i32 = -4;
/// Not decided yet: the completion callback will get the ticket.
const PENDING: i32 = -5;
/// `flags` bit: peek (`peekRequest`) instead of checking.
const PEEK: i32 = 8;

thread_local! {
    /// The last outcome that did not fit the caller's buffer, for
    /// `polylimit_jvm_take_outcome` on the same thread.
    static LEFT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// # Safety
/// `ptr` is NULL with `len` 0, or points to `len` readable bytes.
unsafe fn slice<'a>(ptr: *const u8, len: i32) -> Option<&'a [u8]> {
    let len = usize::try_from(len).ok()?;
    if len == 0 {
        return Some(&[]);
    }
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    Some(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Decides the request packed in `request` (`request_len` bytes, the core's
/// layout) on the limiter behind the uniffi handle `handle`, charging `cost`
/// (`i64::MIN`: the default) at `now_ms` (`i64::MIN`: the store's clock),
/// with the router's `flags` (2 case-insensitive, 4 ignore one trailing
/// slash; 1 puts every policy's decision in the outcome). Blocks while a
/// remote store answers. Returns the packed outcome's length, written to
/// `out` when it fits in `out_cap` bytes (else kept for
/// `polylimit_jvm_take_outcome` on this thread), or a negative code:
/// nothing was decided.
///
/// # Safety
/// `handle` is a live `Limiter` handle kept alive by the caller for the
/// call; `request` points to `request_len` readable bytes, `out` to
/// `out_cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_check_request_packed(
    handle: u64,
    request: *const u8,
    request_len: i32,
    cost: i64,
    now_ms: i64,
    flags: i32,
    out: *mut u8,
    out_cap: i32,
) -> i32 {
    // SAFETY: the caller's promises, passed on.
    unsafe { polylimit_jvm_check_request_start(handle, request, request_len, cost, now_ms, flags, 0, out, out_cap) }
}

/// `polylimit_jvm_check_request_packed` with a `ticket` (`fast_calls.rs`):
/// 0 blocks as it does; otherwise an outcome not ready in the first poll
/// (a remote store) goes on on the runtime and returns `PENDING`, and the
/// completion callback gets `ticket`, a code (0: decided) and the packed
/// outcome's address and length, readable during the callback. The `flags`
/// bit 8 peeks (`peekRequest`: nothing charged) instead of checking.
///
/// # Safety
/// As `polylimit_jvm_check_request_packed`.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // the C signature: primitives only
pub unsafe extern "C" fn polylimit_jvm_check_request_start(
    handle: u64,
    request: *const u8,
    request_len: i32,
    cost: i64,
    now_ms: i64,
    flags: i32,
    ticket: i64,
    out: *mut u8,
    out_cap: i32,
) -> i32 {
    let body = || {
        // SAFETY: the caller's promise.
        let Some(bytes) = (unsafe { slice(request, request_len) }) else {
            return BAD_ARGUMENT;
        };
        let Ok(cap) = usize::try_from(out_cap) else {
            return BAD_ARGUMENT;
        };
        if handle == 0 || (out.is_null() && cap > 0) {
            return BAD_ARGUMENT;
        }
        // SAFETY: uniffi's handle of an `Arc<Limiter>` is the Arc's pointer;
        // the caller holds it alive for the call.
        let limiter = unsafe { &*(handle as *const Limiter) };
        let core = limiter.core().clone();
        let Ok(req) = packed::read_request_keeping(bytes, |h| core.reads_header(h)) else {
            return BAD_ARGUMENT;
        };
        let given = |n: i64| (n != NONE).then_some(n);
        let Ok(options) = check_options(given(cost), given(now_ms)) else {
            return BAD_OPTIONS;
        };
        // As `RequestInfo::from_value` sets them from the uniffi record.
        let req = RequestInfo {
            cost: given(cost).map(|_| options.cost),
            now_ms: options.now_ms,
            case_insensitive: flags & CASE_INSENSITIVE != 0,
            ignore_trailing_slash: flags & IGNORE_TRAILING_SLASH != 0,
            ..req
        };
        let with_decisions = flags & WITH_DECISIONS != 0;
        let work = async move {
            let outcome = if flags & PEEK != 0 {
                core.peek_request(&req).await
            } else {
                core.check_request(&req).await
            };
            outcome.map(|o| packed::outcome(&o, with_decisions))
        };
        let started = go(ticket, work, move |completion, result| match result {
            Ok(packed) => completion(ticket, 0, packed.as_ptr() as i64, packed.len() as i64, 0, 0, 0, 0, 0),
            Err(_) => completion(ticket, FAILED, 0, 0, 0, 0, 0, 0, 0),
        });
        let packed = match started {
            Started::Ready(packed) => packed,
            Started::Failed(PANICKED_START) => return PANICKED,
            Started::Failed(_) => return FAILED,
            Started::Pending => return PENDING,
        };
        let Ok(len) = i32::try_from(packed.len()) else {
            return FAILED;
        };
        if packed.len() <= cap {
            // SAFETY: the caller passes `out_cap` writable bytes at `out`.
            unsafe { std::ptr::copy_nonoverlapping(packed.as_ptr(), out, packed.len()) };
        } else {
            LEFT.with(|left| *left.borrow_mut() = packed);
        }
        len
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// Copies the outcome `polylimit_jvm_check_request_packed` kept on this
/// thread (it did not fit) to `out` when it fits in `out_cap` bytes, and
/// forgets it; returns its length (0: none kept).
///
/// # Safety
/// `out` points to `out_cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_take_outcome(out: *mut u8, out_cap: i32) -> i32 {
    let body = || {
        LEFT.with(|left| {
            let left = std::mem::take(&mut *left.borrow_mut());
            let cap = usize::try_from(out_cap).unwrap_or(0);
            if !out.is_null() && left.len() <= cap {
                // SAFETY: the caller passes `out_cap` writable bytes at `out`.
                unsafe { std::ptr::copy_nonoverlapping(left.as_ptr(), out, left.len()) };
            }
            i32::try_from(left.len()).unwrap_or(i32::MAX)
        })
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}

/// 1 when deciding a request may read its header `name` (`name_len` UTF-8
/// bytes; any case): the core's `Limiter::reads_header`. A middleware packs
/// only those headers (the others cannot change the outcome); 0 otherwise,
/// -1 for a bad argument.
///
/// # Safety
/// `handle` as in `polylimit_jvm_check_request_packed`; `name` points to
/// `name_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_jvm_reads_header(handle: u64, name: *const u8, name_len: i32) -> i32 {
    let body = || {
        // SAFETY: the caller's promise.
        let Some(bytes) = (unsafe { slice(name, name_len) }) else {
            return BAD_ARGUMENT;
        };
        if handle == 0 {
            return BAD_ARGUMENT;
        }
        // SAFETY: as in `polylimit_jvm_check_request_packed`.
        let limiter = unsafe { &*(handle as *const Limiter) };
        i32::from(limiter.core().reads_header(&String::from_utf8_lossy(bytes)))
    };
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PANICKED)
}
