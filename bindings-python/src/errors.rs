//! One Python exception class per core error kind, under `PolylimitError`.

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

/// Maps a core error to its Python exception, with `kind` (and `field`,
/// `value` for config errors, `key` for store errors) as attributes.
pub(crate) fn to_py_err(error: polylimit::Error) -> PyErr {
    let text = error.to_string();
    // Exhaustive over the core's kinds: a new kind is a compile error here.
    let err = match error.kind() {
        ErrorKind::Config => ConfigError::new_err(text),
        ErrorKind::StoreUnavailable => StoreUnavailableError::new_err(text),
        ErrorKind::Store => StoreError::new_err(text),
        ErrorKind::Closed => ClosedError::new_err(text),
        ErrorKind::Internal => InternalError::new_err(text),
    };
    Python::attach(|py| {
        let value = err.value(py);
        let _ = value.setattr("kind", error.kind().as_str());
        match &error {
            polylimit::Error::Config { field, value: v, .. } => {
                let _ = value.setattr("field", field.as_str());
                let _ = value.setattr("value", v.as_str());
            }
            polylimit::Error::Store { key, .. } => {
                let _ = value.setattr("key", key.as_str());
            }
            _ => {}
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
