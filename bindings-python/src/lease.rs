//! `polylimit.Lease`: the slots of a concurrency policy one `acquire` took
//! (the core's `LeaseGuard`). Released by `release` / `release_sync`, on
//! leaving `with` / `async with` (exceptions included), or when collected;
//! idempotent: only the first release gives the slots back.

use std::sync::Mutex;

use polylimit::{Lease, LeaseGuard, Limiter};
use pyo3::intern;
use pyo3::prelude::*;

use crate::limiter::check_options;
use crate::{future, runtime};

/// The leases of one allowed `acquire`.
#[pyclass(frozen, module = "polylimit._polylimit", name = "Lease")]
pub struct PyLease {
    limiter: Limiter,
    guard: Mutex<Option<LeaseGuard>>,
}

impl PyLease {
    pub(crate) fn new(limiter: Limiter, guard: LeaseGuard) -> Self {
        PyLease {
            limiter,
            guard: Mutex::new(Some(guard)),
        }
    }

    /// The leases still held, taken (a second release finds none).
    fn take(&self) -> Vec<Lease> {
        let mut guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
        guard.take().map(LeaseGuard::into_leases).unwrap_or_default()
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
        future::spawn(py, async move {
            release(limiter, leases, now_ms).await.map(future::Done::Count)
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
        self.guard.lock().unwrap_or_else(|e| e.into_inner()).is_none()
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
        future::spawn(py, async move { release(limiter, leases, None).await.map(|_| ()) })
    }

    fn __repr__(&self) -> String {
        let guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(g) => format!("<Lease of {} slot(s), held>", g.leases().len()),
            None => "<Lease, released>".to_string(),
        }
    }
}

impl Drop for PyLease {
    /// A lease collected unreleased gives its slots back on the runtime.
    fn drop(&mut self) {
        let guard = self.guard.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(guard) = guard {
            let _enter = runtime::runtime().enter();
            drop(guard);
        }
    }
}
