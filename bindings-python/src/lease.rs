//! `polylimit.Lease`: the slots of a concurrency policy one `acquire` took
//! (as the core's `LeaseGuard` holds them). Released by `release` /
//! `release_sync`, on leaving `with` / `async with` (exceptions included), or
//! when collected; idempotent: only the first release gives the slots back.

use std::sync::Mutex;

use polylimit::wire::packed::Reply;
use polylimit::{Lease, Limiter};
use pyo3::prelude::*;
use pyo3::{intern, IntoPyObjectExt};

use crate::args::check_options;
use crate::decision::PyDecision;
use crate::{host, runtime};

/// The leases of one allowed `acquire`.
#[pyclass(frozen, module = "polylimit._polylimit", name = "Lease")]
pub struct PyLease {
    limiter: Limiter,
    /// `None` once released.
    leases: Mutex<Option<Vec<Lease>>>,
}

impl PyLease {
    /// The lease of `leases`, none when there are none (denied, or no
    /// concurrency policy).
    pub(crate) fn new(limiter: &Limiter, leases: Vec<Lease>) -> Option<Self> {
        (!leases.is_empty()).then(|| PyLease {
            limiter: limiter.clone(),
            leases: Mutex::new(Some(leases)),
        })
    }

    /// The leases still held, taken (a second release finds none).
    fn take(&self) -> Vec<Lease> {
        let mut leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        leases.take().unwrap_or_default()
    }
}

/// What `Limiter.acquire` resolves to: `(Decision, Lease or None)`.
pub(crate) fn acquired(py: Python<'_>, reply: Reply, limiter: Option<&Limiter>) -> PyResult<Py<PyAny>> {
    match (reply, limiter) {
        (Reply::Acquired(decision, leases), Some(limiter)) => {
            let lease = PyLease::new(limiter, leases).map(|l| Py::new(py, l)).transpose()?;
            (PyDecision(decision), lease).into_py_any(py)
        }
        (reply, _) => crate::reader::value(py, reply, limiter),
    }
}

/// Releases `leases` (at `now_ms`, else on the store's clock): how many were live.
async fn release(limiter: Limiter, leases: Vec<Lease>, now_ms: Option<i64>) -> polylimit::Result<usize> {
    if leases.is_empty() {
        return Ok(0);
    }
    match now_ms {
        Some(now) => limiter.release_at(&leases, now).await,
        None => limiter.release(&leases).await,
    }
}

#[pymethods]
impl PyLease {
    /// Gives the slots back; an awaitable resolving to how many leases were
    /// still live (0 when released before or ended). `now_ms` for tests.
    #[pyo3(signature = (now_ms=None))]
    fn release<'py>(&self, py: Python<'py>, now_ms: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let now_ms = check_options(None, now_ms)?.now_ms;
        let (limiter, leases) = (self.limiter.clone(), self.take());
        host::submit(py, async move {
            let live = release(limiter, leases, now_ms).await?;
            Ok(Reply::Count(live as u64))
        })
    }

    /// `release`, blocking with the GIL released.
    #[pyo3(signature = (now_ms=None))]
    fn release_sync(&self, py: Python<'_>, now_ms: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let now_ms = check_options(None, now_ms)?.now_ms;
        let (limiter, leases) = (self.limiter.clone(), self.take());
        runtime::block_on(py, release(limiter, leases, now_ms))
    }

    /// Whether the lease was released (by this object; it also ends by itself after the policy's `lease`).
    #[getter]
    fn released(&self) -> bool {
        self.leases.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.release_sync(py, None)?;
        Ok(false)
    }

    fn __aenter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, PyAny>> {
        let py = slf.py();
        let event_loop = py
            .import(intern!(py, "asyncio"))?
            .call_method0(intern!(py, "get_running_loop"))?;
        let done = event_loop.call_method0(intern!(py, "create_future"))?;
        done.call_method1(intern!(py, "set_result"), (slf,))?;
        Ok(done)
    }

    /// Releases; resolves to None, so an exception of the block propagates.
    #[pyo3(signature = (*_exc))]
    fn __aexit__<'py>(&self, py: Python<'py>, _exc: &Bound<'py, pyo3::types::PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        let (limiter, leases) = (self.limiter.clone(), self.take());
        host::submit(
            py,
            async move { release(limiter, leases, None).await.map(|_| Reply::Unit) },
        )
    }

    fn __repr__(&self) -> String {
        let leases = self.leases.lock().unwrap_or_else(|e| e.into_inner());
        match leases.as_ref() {
            Some(l) => format!("<Lease of {} slot(s), held>", l.len()),
            None => "<Lease, released>".to_string(),
        }
    }
}

impl Drop for PyLease {
    /// A lease collected unreleased gives its slots back on the runtime.
    fn drop(&mut self) {
        let leases = self.leases.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(leases) = leases {
            let limiter = self.limiter.clone();
            runtime::runtime().spawn(async move {
                let _ = limiter.release(&leases).await;
            });
        }
    }
}
