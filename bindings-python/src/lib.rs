//! The native half of the `polylimit` Python package (`polylimit._polylimit`).
//!
//! Thin: every method converts Python values, clones the core object, calls
//! the core, and maps the error. The FastAPI/Starlette adapters live in the
//! pure-Python package (`python/polylimit`).

mod anomaly;
mod args;
mod breaker;
mod client;
mod convert;
mod decision;
mod errors;
mod host;
mod lease;
mod limiter;
mod reader;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _polylimit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<decision::PyDecision>()?;
    m.add_class::<decision::PyOutcome>()?;
    m.add_class::<limiter::PyLimiter>()?;
    m.add_class::<limiter::PyRouteRule>()?;
    m.add_class::<lease::PyLease>()?;
    m.add_class::<breaker::PyCircuitBreaker>()?;
    m.add_class::<breaker::PyPermit>()?;
    m.add_class::<anomaly::PyAnomalyErrors>()?;
    m.add_class::<client::PyRetryOptions>()?;
    m.add_function(wrap_pyfunction!(client::parse_retry_after, m)?)?;
    m.add_function(wrap_pyfunction!(client::retry_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(limiter::effective_config, m)?)?;
    m.add_function(wrap_pyfunction!(limiter::ended_status, m)?)?;
    m.add_function(wrap_pyfunction!(reader::_read_records, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    Ok(())
}

/// Registered with `os.register_at_fork(after_in_child=...)` by the package:
/// the child builds its own runtime and event-loop dispatcher on first use.
#[pyfunction]
fn _after_fork_in_child(py: Python<'_>) {
    runtime::forget_after_fork();
    host::forget_after_fork(py);
}
