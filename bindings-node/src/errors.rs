//! One mapping from `polylimit::Error` to a JS error: an `Error` whose
//! `message` is the core's plain message, with `code` (stable per kind) and,
//! for config errors, `field` and `value` as properties. `errors.js` gives it
//! its class. Off the JS thread, errors travel in packed records
//! (`polylimit::wire::packed`) and JavaScript builds the error the same way.

use napi::bindgen_prelude::JsObjectValue;
use napi::{Env, Error, Status};
use polylimit::ErrorKind;
use serde_json::{json, Value};

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

/// The codes of every core error kind, in the core's order (`ErrorKind::ALL`):
/// the tests check that `errors.js` has a class for each.
#[napi_derive::napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn error_codes() -> Vec<&'static str> {
    ErrorKind::ALL.iter().map(|&k| code(k)).collect()
}

/// The properties of the JS error for `e`: `code`, `message`, and for a
/// config error `field` and `value`.
fn record(e: &polylimit::Error) -> Value {
    let mut out = json!({ "code": code(e.kind()), "message": e.to_string() });
    if let polylimit::Error::Config { field, value, .. } = e {
        out["field"] = Value::String(field.clone());
        out["value"] = Value::String(value.clone());
    }
    out
}

/// Throws the JS error of `e` on `env` and returns the napi error that tells
/// napi an exception is already pending (so it throws nothing else).
pub fn throw(env: &Env, e: polylimit::Error) -> Error {
    let message = e.to_string();
    let built = (|| -> napi::Result<()> {
        let mut error = env.create_error(Error::new(Status::GenericFailure, message.clone()))?;
        if let Value::Object(props) = record(&e) {
            for (name, value) in props {
                if let Value::String(text) = value {
                    error.set_named_property(&name, env.create_string(&text)?)?;
                }
            }
        }
        env.throw(error)
    })();
    match built {
        Ok(()) => Error::new(Status::PendingException, message),
        // Could not build the object: a plain error with the message.
        Err(_) => Error::new(Status::GenericFailure, message),
    }
}

/// A config error raised by the binding itself (bad argument type).
pub fn config(env: &Env, field: &str, value: impl std::fmt::Display, message: &str) -> Error {
    throw(env, polylimit::Error::config(field, value, message))
}

/// Maps a panic to an internal error so it never crosses the FFI boundary.
pub fn guard<T>(env: &Env, f: impl FnOnce() -> napi::Result<T>) -> napi::Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            Err(throw(env, polylimit::Error::Internal(what)))
        }
    }
}
