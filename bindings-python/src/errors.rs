//! One Python exception class per core error kind, under `PolylimitError`.

use polylimit::wire::packed::ErrorRecord;
use polylimit::ErrorKind;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _polylimit,
    PolylimitError,
    PyException,
    "Base class of every polylimit error."
);
create_exception!(
    _polylimit,
    ConfigError,
    PolylimitError,
    "A configuration value is wrong; `field` names it and `value` is what was given."
);
create_exception!(
    _polylimit,
    StoreUnavailableError,
    PolylimitError,
    "The store could not be reached (never raised by a check: `on_store_error` answers)."
);
create_exception!(
    _polylimit,
    StoreError,
    PolylimitError,
    "The store answered with an error for one key."
);
create_exception!(_polylimit, ClosedError, PolylimitError, "The limiter was closed.");
create_exception!(
    _polylimit,
    InternalError,
    PolylimitError,
    "A bug in polylimit; please report it."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PolylimitError", py.get_type::<PolylimitError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("StoreUnavailableError", py.get_type::<StoreUnavailableError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    Ok(())
}

/// A `ConfigError` for `field` holding `value` (attributes set on the instance).
pub(crate) fn config_error(field: &str, value: &str, message: &str) -> PyErr {
    to_py_err(polylimit::Error::config(field, value, message))
}

/// Maps a core error to its Python exception (see [`record_err`]).
pub(crate) fn to_py_err(error: polylimit::Error) -> PyErr {
    record_err(ErrorRecord::from(&error))
}

/// Maps an error as a bridge record carries it to its Python exception, with
/// `kind` (and `field`, `value` for config errors, `key` for store errors) as
/// attributes.
pub(crate) fn record_err(record: ErrorRecord) -> PyErr {
    let ErrorRecord {
        kind,
        message,
        field,
        value,
        key,
    } = record;
    // Exhaustive over the core's kinds: a new kind is a compile error here.
    let err = match kind {
        ErrorKind::Config => ConfigError::new_err(message),
        ErrorKind::StoreUnavailable => StoreUnavailableError::new_err(message),
        ErrorKind::Store => StoreError::new_err(message),
        ErrorKind::Closed => ClosedError::new_err(message),
        ErrorKind::Internal => InternalError::new_err(message),
    };
    Python::attach(|py| {
        let instance = err.value(py);
        let _ = instance.setattr("kind", kind.as_str());
        let attributes = [("field", field), ("value", value), ("key", key)];
        for (name, text) in attributes {
            if let Some(text) = text {
                let _ = instance.setattr(name, text);
            }
        }
    });
    err
}

/// `Result<T, polylimit::Error>` → `PyResult<T>`.
pub(crate) trait IntoPyResult<T> {
    fn into_py_result(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for polylimit::Result<T> {
    fn into_py_result(self) -> PyResult<T> {
        self.map_err(to_py_err)
    }
}
