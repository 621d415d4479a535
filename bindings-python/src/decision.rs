//! `Decision` (SPEC §3) and `Outcome` (SPEC §6) as frozen Python objects.

use polylimit::{Decision, Outcome};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::to_py;

/// The answer to one check. Immutable; truthy when allowed.
#[pyclass(frozen, eq, module = "polylimit._polylimit", name = "Decision")]
#[derive(Clone, PartialEq, Eq)]
pub struct PyDecision(pub(crate) Decision);

#[pymethods]
impl PyDecision {
    /// Whether the request may go ahead (also the decision's truth value).
    #[getter]
    fn allowed(&self) -> bool {
        self.0.allowed
    }
    /// The policy's limit: the burst, or the window's count.
    #[getter]
    fn limit(&self) -> u64 {
        self.0.limit
    }
    /// How many more requests of cost 1 would be allowed now.
    #[getter]
    fn remaining(&self) -> u64 {
        self.0.remaining
    }
    /// Milliseconds until the key is back to its full limit.
    #[getter]
    fn reset_after_ms(&self) -> u64 {
        self.0.reset_after_ms
    }
    /// When denied, milliseconds until a retry can succeed; None when allowed.
    #[getter]
    fn retry_after_ms(&self) -> Option<u64> {
        self.0.retry_after_ms
    }
    /// For a policy in delay mode, how long to wait before going ahead (0 otherwise).
    #[getter]
    fn delay_ms(&self) -> u64 {
        self.0.delay_ms
    }
    /// What answered: the store, a local cache, a fallback, a penalty, an allow/deny list or adaptive.
    #[getter]
    fn source(&self) -> &'static str {
        self.0.source.as_str()
    }
    fn __bool__(&self) -> bool {
        self.0.allowed
    }
    /// The decision as a plain dict (for logging or JSON).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("allowed", self.0.allowed)?;
        d.set_item("limit", self.0.limit)?;
        d.set_item("remaining", self.0.remaining)?;
        d.set_item("reset_after_ms", self.0.reset_after_ms)?;
        d.set_item("retry_after_ms", self.0.retry_after_ms)?;
        d.set_item("delay_ms", self.0.delay_ms)?;
        d.set_item("source", self.0.source.as_str())?;
        Ok(d)
    }
    fn __repr__(&self) -> String {
        let d = &self.0;
        let retry = d.retry_after_ms.map_or("None".to_string(), |r| r.to_string());
        format!(
            "Decision(allowed={}, limit={}, remaining={}, reset_after_ms={}, retry_after_ms={retry}, delay_ms={}, source='{}')",
            if d.allowed { "True" } else { "False" },
            d.limit,
            d.remaining,
            d.reset_after_ms,
            d.delay_ms,
            d.source.as_str()
        )
    }
}

/// What the HTTP layer answers for one request: `status` is None when the
/// request may pass; set every header in `headers`; wait `delay_ms` first.
#[pyclass(frozen, module = "polylimit._polylimit", name = "Outcome")]
pub struct PyOutcome(pub(crate) Outcome);

#[pymethods]
impl PyOutcome {
    /// The status to refuse with (429; 503 when the store fails closed; 403 for a denied key), or None when the request may go ahead.
    #[getter]
    fn status(&self) -> Option<u16> {
        self.0.status
    }
    /// The rate-limit headers to add to the response, as (name, value) pairs.
    #[getter]
    fn headers(&self) -> Vec<(String, String)> {
        self.0.headers.to_vec()
    }
    /// The body to answer with when limited, or None (a gRPC call's status message).
    #[getter]
    fn body(&self) -> Option<String> {
        self.0.body.clone()
    }
    /// A gRPC call's trailing metadata, as (name, value) pairs: `retry-after` on a refusal; empty for HTTP.
    #[getter]
    fn trailers(&self) -> Vec<(String, String)> {
        self.0.trailers.to_vec()
    }
    /// How long to wait before handling the request (delay mode), else 0.
    #[getter]
    fn delay_ms(&self) -> u64 {
        self.0.delay_ms
    }
    /// The token to settle an allowed request after its response
    /// (`Limiter.complete(token, status)`), when a rule counts only some
    /// responses; None otherwise. Server-side only.
    #[getter]
    fn completion(&self) -> Option<String> {
        self.0.completion.clone()
    }
    /// Each policy's decision: dicts with rule, policy, the decision fields and shadow.
    #[getter]
    fn decisions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0.to_value()["decisions"])
    }
    /// The outcome as a plain dict.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0.to_value())
    }
    fn __repr__(&self) -> String {
        format!(
            "Outcome(status={:?}, headers={:?}, body={:?}, delay_ms={})",
            self.0.status, self.0.headers, self.0.body, self.0.delay_ms
        )
    }
}
