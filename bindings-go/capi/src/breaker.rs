//! The circuit breaker offered to users for their own downstream calls.

use std::panic::{catch_unwind, AssertUnwindSafe};

use polylimit::breaker::Permit;
use polylimit::options::Naming;
use polylimit::{BreakerConfig, BreakerInput, BreakerState, CircuitBreaker, DurationInput};

use crate::errors::{polylimit_error_t, polylimit_status_t, FfiError};
use crate::guard;

/// A circuit breaker; thread-safe, freed with `polylimit_breaker_free`.
pub struct polylimit_breaker_t {
    inner: CircuitBreaker,
}

/// Permission to make one call, from `polylimit_breaker_acquire`; consumed by
/// `polylimit_breaker_success` or `polylimit_breaker_failure` (it reports to
/// the breaker that issued it, which it keeps alive).
pub struct polylimit_permit_t {
    permit: Permit,
}

/// A breaker's state.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum polylimit_breaker_state_t {
    /// Calls go through.
    POLYLIMIT_BREAKER_CLOSED = 0,
    /// Calls are refused until the cooldown ends.
    POLYLIMIT_BREAKER_OPEN = 1,
    /// A few probe calls are let through.
    POLYLIMIT_BREAKER_HALF_OPEN = 2,
}

/// A closed breaker in `*out`: opens after `threshold` consecutive
/// failures, lets `half_open_max` probes through after `cooldown_ns`. The
/// core checks the values (`POLYLIMIT_CONFIG` naming the field as Go's
/// `NewCircuitBreaker` does, `cooldown: 0 is not a positive duration`).
///
/// # Safety
/// `out` is writable; `err` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn polylimit_breaker_new(
    threshold: i64,
    cooldown_ns: i64,
    half_open_max: i64,
    out: *mut *mut polylimit_breaker_t,
    err: *mut *mut polylimit_error_t,
) -> i32 {
    guard(err, || {
        if out.is_null() {
            return Err(FfiError::invalid("out is NULL"));
        }
        let input = BreakerInput {
            threshold: Some(threshold as f64),
            cooldown: Some(DurationInput::Number(cooldown_ns as f64)),
            half_open_max: Some(half_open_max as f64),
        };
        let config = BreakerConfig::from_naming(Naming::Go, &input)?;
        let breaker = Box::new(polylimit_breaker_t {
            inner: CircuitBreaker::new(config),
        });
        // SAFETY: checked non-NULL; the caller promises a writable pointer.
        unsafe { *out = Box::into_raw(breaker) };
        Ok(polylimit_status_t::POLYLIMIT_OK as i32)
    })
}

/// Asks to make a call: a permit, or NULL when the breaker refuses.
///
/// # Safety
/// `breaker` is NULL or a live handle. A permit is given back once, to
/// `polylimit_breaker_success` or `polylimit_breaker_failure`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_breaker_acquire(breaker: *const polylimit_breaker_t) -> *mut polylimit_permit_t {
    // SAFETY: a live handle or NULL.
    let Some(b) = (unsafe { breaker.as_ref() }) else {
        return std::ptr::null_mut();
    };
    catch_unwind(AssertUnwindSafe(|| {
        b.inner
            .acquire()
            .map(|permit| Box::into_raw(Box::new(polylimit_permit_t { permit })))
            .unwrap_or(std::ptr::null_mut())
    }))
    .unwrap_or(std::ptr::null_mut())
}

/// # Safety
/// `permit` is NULL or from `polylimit_breaker_acquire`, not yet reported.
unsafe fn report(breaker: *const polylimit_breaker_t, permit: *mut polylimit_permit_t, ok: bool) {
    if permit.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the permit came from `polylimit_breaker_acquire`, consumed once.
        let permit = unsafe { Box::from_raw(permit) }.permit;
        // A freed breaker (NULL) only frees the permit: its report reaches no one.
        if breaker.is_null() || !ok {
            permit.failure()
        } else {
            permit.success()
        }
    }));
}

/// Reports a successful call and frees the permit.
///
/// # Safety
/// `permit` is NULL or from `polylimit_breaker_acquire`, not yet reported;
/// `breaker` is the handle it came from, or NULL.
#[no_mangle]
pub unsafe extern "C" fn polylimit_breaker_success(
    breaker: *const polylimit_breaker_t,
    permit: *mut polylimit_permit_t,
) {
    // SAFETY: the caller's promises, passed on.
    unsafe { report(breaker, permit, true) }
}

/// Reports a failed call and frees the permit.
///
/// # Safety
/// As `polylimit_breaker_success`.
#[no_mangle]
pub unsafe extern "C" fn polylimit_breaker_failure(
    breaker: *const polylimit_breaker_t,
    permit: *mut polylimit_permit_t,
) {
    // SAFETY: the caller's promises, passed on.
    unsafe { report(breaker, permit, false) }
}

/// The state, a `polylimit_breaker_state_t` (CLOSED for NULL).
///
/// # Safety
/// `breaker` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn polylimit_breaker_state(breaker: *const polylimit_breaker_t) -> i32 {
    // SAFETY: a live handle or NULL.
    let Some(b) = (unsafe { breaker.as_ref() }) else {
        return 0;
    };
    let state = catch_unwind(AssertUnwindSafe(|| b.inner.state())).unwrap_or(BreakerState::Closed);
    match state {
        BreakerState::Closed => polylimit_breaker_state_t::POLYLIMIT_BREAKER_CLOSED as i32,
        BreakerState::Open => polylimit_breaker_state_t::POLYLIMIT_BREAKER_OPEN as i32,
        BreakerState::HalfOpen => polylimit_breaker_state_t::POLYLIMIT_BREAKER_HALF_OPEN as i32,
    }
}

/// Frees the breaker. NULL is ignored. Permits still out may be reported after.
///
/// # Safety
/// `breaker` is NULL or from `polylimit_breaker_new`, not yet freed, and no
/// other call is using it.
#[no_mangle]
pub unsafe extern "C" fn polylimit_breaker_free(breaker: *mut polylimit_breaker_t) {
    if !breaker.is_null() {
        // SAFETY: from `polylimit_breaker_new`, freed once.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(breaker) })));
    }
}
