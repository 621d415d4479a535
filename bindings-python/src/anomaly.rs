//! `on_anomaly=`: the core's alerts of adaptive policies, handed to a Python
//! callable (or coroutine function) off the deciding task. The package's
//! `_deliver_anomaly` calls it; an exception is counted by the core
//! (`polylimit_anomaly_callback_errors_total`), never raised into a request.

use std::sync::Arc;

use polylimit::adaptive::AnomalyEvent;
use polylimit::Limiter;
use pyo3::prelude::*;

use crate::convert::to_py;
use crate::runtime::runtime;

/// Counts a failed callback on its limiter; the package calls it.
#[pyclass(frozen, module = "polylimit._polylimit", name = "_AnomalyErrors")]
pub struct PyAnomalyErrors(Limiter);

#[pymethods]
impl PyAnomalyErrors {
    fn __call__(&self) {
        self.0.count_anomaly_callback_error();
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
    let errors: Py<PyAny> = Py::new(py, PyAnomalyErrors(limiter.clone()))?.into_any();
    let callback = Arc::new(callback);
    let sink = move |event: &AnomalyEvent| {
        let json = event.to_json();
        let (deliver, callback, event_loop, errors) = Python::attach(|py| {
            (
                deliver.clone_ref(py),
                callback.clone_ref(py),
                event_loop.clone_ref(py),
                errors.clone_ref(py),
            )
        });
        // Off the deciding task: the request never waits for the GIL or the callback.
        runtime().spawn_blocking(move || {
            Python::attach(|py| {
                let delivered = to_py(py, &json)
                    .and_then(|event| deliver.call1(py, (callback, event, event_loop, errors.clone_ref(py))));
                if delivered.is_err() {
                    let _ = errors.call0(py);
                }
            })
        });
    };
    limiter.on_anomaly(Some(Arc::new(sink)));
    Ok(())
}
