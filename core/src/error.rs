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

    /// The error's kind, which every binding maps one-to-one.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Config { .. } => ErrorKind::Config,
            Error::StoreUnavailable { .. } => ErrorKind::StoreUnavailable,
            Error::Store { .. } => ErrorKind::Store,
            Error::Closed => ErrorKind::Closed,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }
}

/// The kinds of [`Error`]. Deliberately exhaustive: a binding matches every
/// kind, so a new one is a compile error there, not a silent `internal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// [`Error::Config`].
    Config,
    /// [`Error::StoreUnavailable`].
    StoreUnavailable,
    /// [`Error::Store`].
    Store,
    /// [`Error::Closed`].
    Closed,
    /// [`Error::Internal`].
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order bindings list them (the C ABI's
    /// `polylimit_error_kind_status`). A binding's tests walk this list to
    /// check that each kind has its own error class.
    pub const ALL: [ErrorKind; 5] = [
        ErrorKind::Config,
        ErrorKind::StoreUnavailable,
        ErrorKind::Store,
        ErrorKind::Closed,
        ErrorKind::Internal,
    ];

    /// This kind's place in [`ErrorKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The stable name every binding shows (`config`, `store_unavailable`,
    /// `store`, `closed`, `internal`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Config => "config",
            ErrorKind::StoreUnavailable => "store_unavailable",
            ErrorKind::Store => "store",
            ErrorKind::Closed => "closed",
            ErrorKind::Internal => "internal",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Where each kind belongs in [`ErrorKind::ALL`]. A new kind is a compile
    /// error here: add it to `ALL` too.
    fn position(kind: ErrorKind) -> usize {
        match kind {
            ErrorKind::Config => 0,
            ErrorKind::StoreUnavailable => 1,
            ErrorKind::Store => 2,
            ErrorKind::Closed => 3,
            ErrorKind::Internal => 4,
        }
    }

    #[test]
    fn every_kind_is_listed_once_at_its_index() {
        for (i, kind) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
            assert_eq!(position(*kind), i, "{kind:?}");
        }
        let names: std::collections::HashSet<_> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
    }

    #[test]
    fn each_error_has_its_kind() {
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
        let kinds: Vec<ErrorKind> = errors.iter().map(Error::kind).collect();
        assert_eq!(kinds, ErrorKind::ALL);
    }
}
