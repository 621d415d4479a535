//! `on_anomaly=`: the core's alerts of adaptive policies, handed in order to
//! a Python callable (or coroutine function) on the limiter's alert thread. The package's
//! `_deliver_anomaly` calls it; an exception is counted by the core
//! (`polylimit_anomaly_callback_errors_total`), never raised into a request.

use polylimit::adaptive::AnomalyEvent;
use polylimit::Limiter;
use pyo3::prelude::*;

use crate::convert::to_py;

/// Counts a failed callback on its limiter (not holding it, so the limiter
/// and its alert thread end when the last reference goes); the package calls it.
#[pyclass(frozen, module = "polylimit._polylimit", name = "_AnomalyErrors")]
pub struct PyAnomalyErrors(std::sync::Arc<std::sync::atomic::AtomicU64>);

#[pymethods]
impl PyAnomalyErrors {
    fn __call__(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Sends `limiter`'s alerts to `callback` (with the running event loop, if
/// any, for coroutine functions).
pub(crate) fn install(py: Python<'_>, limiter: &Limiter, callback: Py<PyAny>) -> PyResult<()> {
    let package = py.import("polylimit")?;
    let deliver: Py<PyAny> = package.getattr("_deliver_anomaly")?.unbind();
    let event_loop: Py<PyAny> = py
        .import("asyncio")?
        .call_method0("get_running_loop")
        .map(|l| l.unbind())
        .unwrap_or_else(|_| py.None());
    let errors: Py<PyAny> = Py::new(py, PyAnomalyErrors(limiter.anomaly_callback_errors()))?.into_any();
    let deliver_one = move |event: AnomalyEvent| {
        // On the alert thread: the request never waits for the GIL or the callback.
        Python::attach(|py| {
            let delivered = to_py(py, &event.to_json()).and_then(|event| {
                deliver.call1(
                    py,
                    (
                        callback.clone_ref(py),
                        event,
                        event_loop.clone_ref(py),
                        errors.clone_ref(py),
                    ),
                )
            });
            if delivered.is_err() {
                let _ = errors.call0(py);
            }
        })
    };
    let sink = polylimit::adaptive::on_a_thread("polylimit-alerts", deliver_one, limiter.anomaly_callback_errors())
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    limiter.set_anomaly_sink(Some(sink));
    Ok(())
}
