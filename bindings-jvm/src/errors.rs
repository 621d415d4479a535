//! One exception per core error kind, under one sealed class
//! (`PolylimitException` in Kotlin: `PolylimitException.Config`, …).

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};

use polylimit::{Error, ErrorKind};

use crate::runtime::runtime;

/// Every error polylimit raises. `message` is the core's text (for `Config`:
/// `<field>: <value> <what is wrong>`); the other fields are its parts.
#[derive(Debug, thiserror::Error, uniffi::Error)]
pub enum PolylimitError {
    /// A configuration value (or a call's argument) is wrong: `field` names
    /// it, `value` is what was given (JSON syntax).
    #[error("{text}")]
    Config {
        /// The core's message.
        text: String,
        /// Path of the offending field, e.g. `policies.api.rate`.
        field: String,
        /// The offending value as given.
        value: String,
    },
    /// The store could not be reached (a check never raises it: the policy's
    /// `on_store_error` answers instead).
    #[error("{text}")]
    StoreUnavailable {
        /// The core's message.
        text: String,
    },
    /// The store answered with an error for one key.
    #[error("{text}")]
    Store {
        /// The core's message.
        text: String,
        /// The store key concerned.
        key: String,
    },
    /// The limiter was closed.
    #[error("{text}")]
    Closed {
        /// The core's message.
        text: String,
    },
    /// A bug in polylimit (a caught panic included); please report it.
    #[error("{text}")]
    Internal {
        /// The core's message.
        text: String,
    },
}

impl From<Error> for PolylimitError {
    fn from(e: Error) -> Self {
        let text = e.to_string();
        // One arm per kind: a new kind in the core is a compile error here.
        match e.kind() {
            ErrorKind::Config => {
                let (field, value) = match &e {
                    Error::Config { field, value, .. } => (field.clone(), value.clone()),
                    _ => (String::new(), String::new()),
                };
                PolylimitError::Config { text, field, value }
            }
            ErrorKind::StoreUnavailable => PolylimitError::StoreUnavailable { text },
            ErrorKind::Store => {
                let key = match &e {
                    Error::Store { key, .. } => key.clone(),
                    _ => String::new(),
                };
                PolylimitError::Store { text, key }
            }
            ErrorKind::Closed => PolylimitError::Closed { text },
            ErrorKind::Internal => PolylimitError::Internal { text },
        }
    }
}

/// A configuration error the binding itself finds (bad JSON text).
pub(crate) fn config_error(field: &str, value: &str, message: &str) -> PolylimitError {
    Error::config(field, value, message).into()
}

fn panic_error(payload: Box<dyn Any + Send>) -> PolylimitError {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    Error::Internal(format!("panic: {text}")).into()
}

/// Runs `body`; a panic becomes `Internal`.
pub(crate) fn guard<T>(body: impl FnOnce() -> Result<T, PolylimitError>) -> Result<T, PolylimitError> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|p| Err(panic_error(p)))
}

/// Runs `future` to completion on the runtime, blocking the calling thread;
/// a panic becomes `Internal`.
pub(crate) fn block<T, F>(future: F) -> Result<T, PolylimitError>
where
    F: Future<Output = polylimit::Result<T>>,
{
    guard(|| runtime().block_on(future).map_err(Into::into))
}

/// Runs `future` on the runtime and waits for it without a thread: the join
/// handle is what uniffi polls. A panic becomes `Internal`.
pub(crate) async fn spawn<T, F>(future: F) -> Result<T, PolylimitError>
where
    T: Send + 'static,
    F: Future<Output = polylimit::Result<T>> + Send + 'static,
{
    match runtime().spawn(future).await {
        Ok(result) => result.map_err(Into::into),
        Err(e) if e.is_panic() => Err(panic_error(e.into_panic())),
        Err(e) => Err(Error::Internal(format!("task failed: {e}")).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_its_own_variant() {
        let errors = [
            Error::config("policies.api.rate", "\"x\"", "is not a rate"),
            Error::StoreUnavailable {
                message: "down".into(),
                source: None,
            },
            Error::Store {
                key: "k".into(),
                message: "WRONGTYPE".into(),
            },
            Error::Closed,
            Error::Internal("bug".into()),
        ];
        let names: Vec<&str> = errors
            .into_iter()
            .map(|e| match PolylimitError::from(e) {
                PolylimitError::Config { .. } => "config",
                PolylimitError::StoreUnavailable { .. } => "store_unavailable",
                PolylimitError::Store { .. } => "store",
                PolylimitError::Closed { .. } => "closed",
                PolylimitError::Internal { .. } => "internal",
            })
            .collect();
        let kinds: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, kinds);
    }

    #[test]
    fn config_keeps_field_value_and_text() {
        match PolylimitError::from(Error::config("policies.api.rate", "\"x\"", "is not a rate")) {
            PolylimitError::Config { text, field, value } => {
                assert_eq!(text, "policies.api.rate: \"x\" is not a rate");
                assert_eq!(field, "policies.api.rate");
                assert_eq!(value, "\"x\"");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_panic_becomes_internal() {
        let blocking = guard::<()>(|| panic!("boom"));
        assert!(
            matches!(&blocking, Err(PolylimitError::Internal { text }) if text == "internal error: panic: boom"),
            "{blocking:?}"
        );
        let spawned = runtime().block_on(spawn::<(), _>(async { panic!("bang") }));
        assert!(
            matches!(&spawned, Err(PolylimitError::Internal { text }) if text == "internal error: panic: bang"),
            "{spawned:?}"
        );
        let blocked = block::<(), _>(async { panic!("pow") });
        assert!(
            matches!(&blocked, Err(PolylimitError::Internal { text }) if text == "internal error: panic: pow"),
            "{blocked:?}"
        );
    }
}
