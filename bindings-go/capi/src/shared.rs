//! A C-ABI handle on a limiter built elsewhere: the JVM binding builds its
//! limiter through uniffi and makes its direct calls (check, peek, packed
//! requests, complete, reset) through this crate's functions, on the same
//! core `Limiter` (its store, state, metrics and `close`), not a copy.

use polylimit::Limiter;

use crate::limiter::polylimit_limiter_t;

/// A new handle on `core` (a clone: the same limiter), freed once with
/// `polylimit_limiter_free`.
pub fn from_core(core: Limiter) -> *mut polylimit_limiter_t {
    Box::into_raw(Box::new(polylimit_limiter_t { inner: core }))
}

/// 1 when deciding a request may read its header `name` (`name_len` bytes
/// of UTF-8, any case; the core's `Limiter::reads_header`), else 0: a
/// middleware packs only those headers. `POLYLIMIT_INVALID_ARGUMENT` (as a
/// negative number) for a NULL limiter or a name that is not UTF-8.
///
/// # Safety
/// `limiter` is NULL or a live handle; `name` is NULL (with `name_len` 0)
/// or points to `name_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_reads_header(
    limiter: *const polylimit_limiter_t,
    name: *const u8,
    name_len: usize,
) -> i32 {
    let invalid = -(crate::Status::POLYLIMIT_INVALID_ARGUMENT as i32);
    let body = || {
        // SAFETY: the caller's promises, passed on.
        let (Ok(limiter), Ok(name)) = (unsafe { crate::limiter::handle(limiter) }, unsafe {
            crate::str_arg(name, name_len, "name")
        }) else {
            return invalid;
        };
        i32::from(limiter.reads_header(name))
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(invalid)
}

/// 1 when deciding a request may read its route template (a rule matches on
/// `route`, or keys or tiers by it; the core's `Limiter::reads_route`), else
/// 0: a middleware finds the route only then. `POLYLIMIT_INVALID_ARGUMENT`
/// (as a negative number) for a NULL limiter.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_reads_route(limiter: *const polylimit_limiter_t) -> i32 {
    let invalid = -(crate::Status::POLYLIMIT_INVALID_ARGUMENT as i32);
    let body = || {
        // SAFETY: the caller's promise, passed on.
        match unsafe { crate::limiter::handle(limiter) } {
            Ok(limiter) => i32::from(limiter.reads_route()),
            Err(_) => invalid,
        }
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(invalid)
}

/// How many reloads (`polylimit_limiter_reload` or the `watch` option) have
/// swapped rules into the limiter (the core's `Limiter::rules_generation`):
/// a binding that remembers what the rules read (route, header names) asks
/// again when it moves. `POLYLIMIT_INVALID_ARGUMENT` (as a negative number)
/// for a NULL limiter.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn polylimit_limiter_rules_generation(limiter: *const polylimit_limiter_t) -> i64 {
    let invalid = -(crate::Status::POLYLIMIT_INVALID_ARGUMENT as i64);
    let body = || {
        // SAFETY: the caller's promise, passed on.
        match unsafe { crate::limiter::handle(limiter) } {
            Ok(limiter) => i64::try_from(limiter.rules_generation()).unwrap_or(i64::MAX),
            Err(_) => invalid,
        }
    };
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(invalid)
}
