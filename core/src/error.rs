//! The one error type every binding maps one-to-one.

use std::fmt;

/// Everything that can go wrong in polylimit.
///
/// A check never returns [`Error::StoreUnavailable`] because the store is down:
/// the policy's `on_store_error` answers instead. Errors reach callers only for
/// programmer mistakes (bad configuration, bad cost, closed limiter) and for
/// faults tied to one key (a Redis key holding the wrong type).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is wrong. `field` is the path to it
    /// (`policies.api.rate`), `value` what was given.
    #[error("{field}: {}{message}", value_then_space(.value))]
    Config {
        /// Path of the offending field, e.g. `policies.api.rate`.
        field: String,
        /// The offending value as the user wrote it (JSON syntax).
        value: String,
        /// What is wrong with it.
        message: String,
    },
    /// The store could not be reached or did not answer in time.
    #[error("store unavailable: {message}")]
    StoreUnavailable {
        /// What happened.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The store answered with an error that concerns one key (wrong type,
    /// corrupted state); other keys are unaffected.
    #[error("store error for key {key:?}: {message}")]
    Store {
        /// The store key concerned.
        key: String,
        /// The store's message.
        message: String,
    },
    /// The limiter was closed.
    #[error("limiter is closed")]
    Closed,
    /// A bug in polylimit; please report it.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// A configuration error for `field` holding `value` (rendered as JSON).
    pub fn config(field: impl Into<String>, value: impl fmt::Display, message: impl Into<String>) -> Self {
        Error::Config {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }

    /// A short stable name of the error kind (`config`, `store_unavailable`,
    /// `store`, `closed`, `internal`), shared by every binding.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Config { .. } => "config",
            Error::StoreUnavailable { .. } => "store_unavailable",
            Error::Store { .. } => "store",
            Error::Closed => "closed",
            Error::Internal(_) => "internal",
        }
    }
}

fn value_then_space(value: &str) -> String {
    if value.is_empty() {
        String::new()
    } else {
        format!("{value} ")
    }
}

/// polylimit's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
