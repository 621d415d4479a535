//! Status codes and the error object: one code per core error kind.

use std::any::Any;
use std::ffi::{c_char, CString};
use std::panic::catch_unwind;
use std::sync::OnceLock;

use polylimit::wire::packed::ErrorRecord;
use polylimit::ErrorKind;

use crate::decision::static_name;
use crate::{c_string, polylimit_string_free};

/// What a function returns (as `int32_t`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum polylimit_status_t {
    /// Done; the out-pointers are written.
    POLYLIMIT_OK = 0,
    /// Started: the result comes back exactly once (a record on the bridge).
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

impl From<ErrorKind> for polylimit_status_t {
    /// Exhaustive: a new core error kind is a compile error here, not a
    /// silent `POLYLIMIT_INTERNAL`.
    fn from(kind: ErrorKind) -> Self {
        use polylimit_status_t::*;
        match kind {
            ErrorKind::Config => POLYLIMIT_CONFIG,
            ErrorKind::StoreUnavailable => POLYLIMIT_STORE_UNAVAILABLE,
            ErrorKind::Store => POLYLIMIT_STORE,
            ErrorKind::Closed => POLYLIMIT_CLOSED,
            ErrorKind::Internal => POLYLIMIT_INTERNAL,
        }
    }
}

/// The status of the core's error kind number `index` (0, 1, …, in the
/// core's order), or `POLYLIMIT_OK` past the last kind: a binding walks the
/// kinds with it to check that each has its own error.
#[no_mangle]
pub extern "C" fn polylimit_error_kind_status(index: usize) -> i32 {
    ErrorKind::ALL
        .get(index)
        .map_or(polylimit_status_t::POLYLIMIT_OK, |&k| k.into()) as i32
}

/// The core's names of the error kinds, NUL-terminated, in `ErrorKind::ALL` order.
fn kind_names() -> &'static [CString] {
    static NAMES: OnceLock<Vec<CString>> = OnceLock::new();
    NAMES.get_or_init(|| ErrorKind::ALL.iter().map(|k| static_name(k.as_str())).collect())
}

/// The name of a status, a static string: the core's name of its error kind
/// (`config`, `store_unavailable`, `store`, `closed`, `internal`), or `ok`,
/// `pending`, `invalid_argument`; `unknown` for a value that is no
/// `polylimit_status_t`.
#[no_mangle]
pub extern "C" fn polylimit_status_name(status: i32) -> *const c_char {
    use polylimit_status_t::*;
    let named = catch_unwind(|| match status {
        s if s == POLYLIMIT_OK as i32 => Some(c"ok".as_ptr()),
        s if s == POLYLIMIT_PENDING as i32 => Some(c"pending".as_ptr()),
        s if s == POLYLIMIT_INVALID_ARGUMENT as i32 => Some(c"invalid_argument".as_ptr()),
        s => ErrorKind::ALL
            .iter()
            .position(|&k| polylimit_status_t::from(k) as i32 == s)
            .map(|i| kind_names()[i].as_ptr()),
    });
    named.ok().flatten().unwrap_or(c"unknown".as_ptr())
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
    /// Store errors: the store key concerned; else NULL.
    pub key: *mut c_char,
}

/// The `Internal` error of a caught panic.
pub(crate) fn panic_error(payload: Box<dyn Any + Send>) -> polylimit::Error {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    polylimit::Error::Internal(format!("panic: {text}"))
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
        FfiError::Core(panic_error(payload))
    }

    pub(crate) fn status(&self) -> polylimit_status_t {
        use polylimit_status_t::*;
        match self {
            FfiError::Invalid(_) => POLYLIMIT_INVALID_ARGUMENT,
            FfiError::Core(e) => e.kind().into(),
        }
    }

    pub(crate) fn into_raw(self) -> *mut polylimit_error_t {
        let code = self.status() as i32;
        let record = match self {
            FfiError::Invalid(message) => ErrorRecord {
                kind: ErrorKind::Internal,
                message,
                field: None,
                value: None,
                key: None,
            },
            FfiError::Core(e) => ErrorRecord::from(&e),
        };
        let text = |s: Option<String>| s.map(c_string).unwrap_or(std::ptr::null_mut());
        Box::into_raw(Box::new(polylimit_error_t {
            code,
            message: c_string(record.message),
            field: text(record.field),
            value: text(record.value),
            key: text(record.key),
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
            polylimit_string_free(err.key);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::ffi::CStr;

    fn name(status: i32) -> &'static str {
        // SAFETY: polylimit_status_name returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(polylimit_status_name(status)) }
            .to_str()
            .unwrap()
    }

    #[test]
    fn every_error_kind_has_its_own_status_and_name() {
        use polylimit_status_t::*;
        let mut statuses = HashSet::new();
        for (i, &kind) in ErrorKind::ALL.iter().enumerate() {
            let status = polylimit_status_t::from(kind);
            assert!(
                ![POLYLIMIT_OK, POLYLIMIT_PENDING, POLYLIMIT_INVALID_ARGUMENT].contains(&status),
                "{kind:?}"
            );
            assert!(statuses.insert(status as i32), "{kind:?}: {status:?} is taken");
            assert_eq!(polylimit_error_kind_status(i), status as i32);
            assert_eq!(name(status as i32), kind.as_str());
        }
        assert_eq!(polylimit_error_kind_status(ErrorKind::ALL.len()), POLYLIMIT_OK as i32);
        assert_eq!(polylimit_error_kind_status(usize::MAX), POLYLIMIT_OK as i32);
        for (status, want) in [
            (POLYLIMIT_OK, "ok"),
            (POLYLIMIT_PENDING, "pending"),
            (POLYLIMIT_INVALID_ARGUMENT, "invalid_argument"),
        ] {
            assert_eq!(name(status as i32), want);
        }
        for status in [-1, 8, i32::MAX] {
            assert_eq!(name(status), "unknown");
        }
    }

    #[test]
    fn a_core_error_gets_its_kinds_status() {
        let errors = [
            polylimit::Error::config("f", "1", "bad"),
            polylimit::Error::StoreUnavailable {
                message: "down".into(),
                source: None,
            },
            polylimit::Error::Store {
                key: "k".into(),
                message: "m".into(),
            },
            polylimit::Error::Closed,
            polylimit::Error::Internal("bug".into()),
        ];
        for e in errors {
            let kind = e.kind();
            assert_eq!(FfiError::from(e).status(), polylimit_status_t::from(kind));
        }
    }
}
