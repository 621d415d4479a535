//! The Retry-After arithmetic of `polylimit.client`: the core's `client`
//! module (the transports, sleeps and clock stay in Python).

use polylimit::client::{RetryInput, RetryOptions};
use polylimit::options::Naming;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The checked options of a `RetryPolicy` (durations in seconds, as given).
#[pyclass(name = "RetryOptions", module = "polylimit._polylimit", frozen)]
pub struct PyRetryOptions(RetryOptions);

#[pymethods]
impl PyRetryOptions {
    /// Checks the options; a `ValueError` naming the field and value (the
    /// core's text) when one is wrong.
    #[new]
    #[pyo3(signature = (max_retries, max_wait, budget, jitter, statuses, retry_non_idempotent=false))]
    fn new(
        max_retries: f64,
        max_wait: f64,
        budget: f64,
        jitter: f64,
        statuses: Vec<i64>,
        retry_non_idempotent: bool,
    ) -> PyResult<Self> {
        let input = RetryInput {
            max_retries: Some(max_retries),
            max_wait: Some(max_wait),
            budget: Some(budget),
            jitter: Some(jitter),
            statuses: Some(statuses),
            retry_non_idempotent: Some(retry_non_idempotent),
        };
        RetryOptions::from_naming(Naming::Snake, &input)
            .map(PyRetryOptions)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The wait in ms before the next attempt after a response with
    /// `status` to a `method` request (`started_ms`: the first attempt's
    /// clock, `now_ms`: the clock now), or None to give up.
    #[allow(clippy::too_many_arguments)]
    fn wait_ms(
        &self,
        method: &str,
        status: i64,
        retry_after: Option<&str>,
        retries: i64,
        started_ms: i64,
        now_ms: i64,
        random: f64,
    ) -> Option<u64> {
        let (Ok(status), Ok(retries)) = (u16::try_from(status), u32::try_from(retries)) else {
            return None;
        };
        self.0
            .wait_since(method, status, retry_after, retries, started_ms, now_ms, random)
    }
}

/// The wait in ms a `Retry-After` value asks for from `now_ms`; None when
/// missing or unreadable.
#[pyfunction]
#[pyo3(signature = (value, now_ms))]
pub fn parse_retry_after(value: Option<&str>, now_ms: i64) -> Option<u64> {
    polylimit::client::parse_retry_after(value, now_ms)
}

/// The core's defaults of a `RetryPolicy` (durations in seconds), so
/// `polylimit.client` restates none: `max_retries`, `max_wait`, `budget`,
/// `jitter`, `statuses`, `retry_non_idempotent`.
#[pyfunction]
pub fn retry_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = RetryOptions::defaults_in(Naming::Snake);
    let out = PyDict::new(py);
    out.set_item("max_retries", d.max_retries.map(|n| n as i64))?;
    out.set_item("max_wait", d.max_wait)?;
    out.set_item("budget", d.budget)?;
    out.set_item("jitter", d.jitter)?;
    out.set_item("statuses", d.statuses)?;
    out.set_item("retry_non_idempotent", d.retry_non_idempotent)?;
    Ok(out)
}
