//! Status codes and the error object: one code per core error kind.

use std::any::Any;
use std::ffi::c_char;
use std::panic::catch_unwind;

use polylimit::ErrorKind;

use crate::{c_string, polylimit_string_free};

/// What a function returns (as `int32_t`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum polylimit_status_t {
    /// Done; the out-pointers are written.
    POLYLIMIT_OK = 0,
    /// Started: the callback will be called exactly once with the result.
    POLYLIMIT_PENDING = 1,
    /// Bad configuration or argument value (the error has `field` and `value`).
    POLYLIMIT_CONFIG = 2,
    /// The store could not be reached.
    POLYLIMIT_STORE_UNAVAILABLE = 3,
    /// The store answered with an error for one key.
    POLYLIMIT_STORE = 4,
    /// The limiter is closed.
    POLYLIMIT_CLOSED = 5,
    /// A bug in polylimit (a caught panic included).
    POLYLIMIT_INTERNAL = 6,
    /// A NULL pointer or invalid UTF-8 where a value was required.
    POLYLIMIT_INVALID_ARGUMENT = 7,
}

/// An error; owned by the caller, freed with `polylimit_error_free`.
#[repr(C)]
pub struct polylimit_error_t {
    /// A `polylimit_status_t` other than OK and PENDING.
    pub code: i32,
    /// The message (`rate: "ten/s" is not …`); never NULL.
    pub message: *mut c_char,
    /// Config errors: the path of the field (`policies.api.rate`); else NULL.
    pub field: *mut c_char,
    /// Config errors: the offending value in JSON syntax (may be empty); else NULL.
    pub value: *mut c_char,
}

/// An error on its way to C.
#[derive(Debug)]
pub(crate) enum FfiError {
    Core(polylimit::Error),
    Invalid(String),
}

impl From<polylimit::Error> for FfiError {
    fn from(e: polylimit::Error) -> Self {
        FfiError::Core(e)
    }
}

impl FfiError {
    pub(crate) fn invalid(message: impl Into<String>) -> FfiError {
        FfiError::Invalid(message.into())
    }

    pub(crate) fn panic(payload: Box<dyn Any + Send>) -> FfiError {
        let text = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        FfiError::Core(polylimit::Error::Internal(format!("panic: {text}")))
    }

    pub(crate) fn status(&self) -> polylimit_status_t {
        use polylimit_status_t::*;
        match self {
            FfiError::Invalid(_) => POLYLIMIT_INVALID_ARGUMENT,
            FfiError::Core(e) => match e.kind() {
                ErrorKind::Config => POLYLIMIT_CONFIG,
                ErrorKind::StoreUnavailable => POLYLIMIT_STORE_UNAVAILABLE,
                ErrorKind::Store => POLYLIMIT_STORE,
                ErrorKind::Closed => POLYLIMIT_CLOSED,
                ErrorKind::Internal => POLYLIMIT_INTERNAL,
            },
        }
    }

    pub(crate) fn into_raw(self) -> *mut polylimit_error_t {
        let code = self.status() as i32;
        let (message, field, value) = match self {
            FfiError::Invalid(m) => (m, None, None),
            FfiError::Core(e) => {
                let message = e.to_string();
                match e {
                    polylimit::Error::Config { field, value, .. } => (message, Some(field), Some(value)),
                    _ => (message, None, None),
                }
            }
        };
        Box::into_raw(Box::new(polylimit_error_t {
            code,
            message: c_string(message),
            field: field.map(c_string).unwrap_or(std::ptr::null_mut()),
            value: value.map(c_string).unwrap_or(std::ptr::null_mut()),
        }))
    }
}

/// Frees an error. NULL is ignored.
///
/// # Safety
/// `err` is NULL or an error written by this library, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn polylimit_error_free(err: *mut polylimit_error_t) {
    if err.is_null() {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: `err` came from `FfiError::into_raw`.
        let err = unsafe { Box::from_raw(err) };
        // SAFETY: each string came from `c_string`, or is NULL.
        unsafe {
            polylimit_string_free(err.message);
            polylimit_string_free(err.field);
            polylimit_string_free(err.value);
        }
    });
}
