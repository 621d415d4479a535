//! One mapping from `polylimit::Error` to a JS error. The message carries a
//! JSON record (`{"polylimit": code, field, value, message}`) that `index.js`
//! turns into an `Error` subclass with a stable `code`.

use napi::{Error, Status};
use polylimit::ErrorKind;
use serde_json::json;

/// The stable JS code of an error kind.
pub fn code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Config => "POLYLIMIT_CONFIG",
        ErrorKind::StoreUnavailable => "POLYLIMIT_STORE_UNAVAILABLE",
        ErrorKind::Store => "POLYLIMIT_STORE",
        ErrorKind::Closed => "POLYLIMIT_CLOSED",
        ErrorKind::Internal => "POLYLIMIT_INTERNAL",
    }
}

/// Converts a core error to a napi error (see the module doc).
pub fn to_napi(e: polylimit::Error) -> Error {
    let (field, value) = match &e {
        polylimit::Error::Config { field, value, .. } => (Some(field.clone()), Some(value.clone())),
        _ => (None, None),
    };
    let record = json!({
        "polylimit": code(e.kind()),
        "field": field,
        "value": value,
        "message": e.to_string(),
    });
    Error::new(Status::GenericFailure, record.to_string())
}

/// A config error raised by the binding itself (bad argument type).
pub fn config(field: &str, value: impl std::fmt::Display, message: &str) -> Error {
    to_napi(polylimit::Error::config(field, value, message))
}

/// Maps a panic to an internal error so it never crosses the FFI boundary.
pub fn guard<T>(f: impl FnOnce() -> napi::Result<T>) -> napi::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Err(to_napi(polylimit::Error::Internal(what)))
        }
    }
}
