//! Awaitables resolved from the tokio runtime with one event-loop wake-up per
//! batch of completions.
//!
//! `pyo3-async-runtimes` wakes the loop with `call_soon_threadsafe` once per
//! future, which takes the GIL on a tokio worker: while the event loop is busy
//! that worker waits for the GIL (up to the 5 ms switch interval) and every
//! Redis reply it would have handled waits with it. Instead each event loop
//! gets a [`Dispatcher`]: a finished check pushes its result on a queue and,
//! if no drain is pending, writes one byte to a socket pair the loop watches
//! (`loop.add_reader`) — no GIL on the tokio side. The loop's `drain` callback
//! then sets every queued future's result.

use std::cell::RefCell;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;

use polylimit::{Decision, Outcome};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{intern, IntoPyObjectExt};

use crate::decision::{PyDecision, PyOutcome};
use crate::errors::to_py_err;
use crate::runtime::runtime;

/// What a core call produced, converted to Python on the loop's thread.
pub(crate) enum Done {
    Decision(Decision),
    Decisions(Vec<Decision>),
    Outcome(Outcome),
    /// A count (`reset_request`: the (policy, key) pairs forgotten;
    /// `Lease.release`: how many leases were live).
    Count(usize),
    Unit,
    /// `Limiter.acquire`: the decision and, when allowed, the lease.
    Acquired(Decision, Option<crate::lease::PyLease>),
    /// A plain value (a dict, a bool, None): per-key overrides.
    Value(serde_json::Value),
    /// A request's outcome, with the limiter to settle its completion token
    /// (charges, concurrency leases) as "no response" when nobody awaits it.
    Request(Outcome, polylimit::Limiter),
}

impl From<Decision> for Done {
    fn from(d: Decision) -> Self {
        Done::Decision(d)
    }
}
impl From<Vec<Decision>> for Done {
    fn from(d: Vec<Decision>) -> Self {
        Done::Decisions(d)
    }
}
impl From<Outcome> for Done {
    fn from(o: Outcome) -> Self {
        Done::Outcome(o)
    }
}
impl From<usize> for Done {
    fn from(n: usize) -> Self {
        Done::Count(n)
    }
}
impl From<serde_json::Value> for Done {
    fn from(v: serde_json::Value) -> Self {
        Done::Value(v)
    }
}
impl From<()> for Done {
    fn from(_: ()) -> Self {
        Done::Unit
    }
}

impl Done {
    fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Done::Decision(d) => PyDecision(d).into_py_any(py),
            Done::Decisions(ds) => ds.into_iter().map(PyDecision).collect::<Vec<_>>().into_py_any(py),
            Done::Outcome(o) => PyOutcome(o).into_py_any(py),
            Done::Count(n) => n.into_py_any(py),
            Done::Unit => Ok(py.None()),
            Done::Acquired(d, lease) => {
                let lease = lease.map(|l| Py::new(py, l)).transpose()?;
                (PyDecision(d), lease).into_py_any(py)
            }
            Done::Value(v) => Ok(crate::convert::to_py(py, &v)?.unbind()),
            Done::Request(o, _) => PyOutcome(o).into_py_any(py),
        }
    }

    /// The caller went away (its future was cancelled while the core ran):
    /// a request that was admitted and holds a completion token is settled
    /// as "no response", so it keeps no concurrency slot until its lease
    /// ends and no charge its `count` would not make.
    fn abandon(self) {
        if let Done::Request(outcome, limiter) = self {
            if let Some(token) = outcome.completion {
                runtime().spawn(async move {
                    let _ = limiter.complete(&token, None).await;
                });
            }
        }
    }
}

type Item = (Py<PyAny>, polylimit::Result<Done>);

struct Dispatcher {
    event_loop: Py<PyAny>,
    /// Watched by the loop; drained by `Drain`.
    wake_read: UnixStream,
    /// Written (one byte) by the tokio side to wake the loop.
    wake_write: UnixStream,
    pending: Mutex<Vec<Item>>,
    scheduled: AtomicBool,
}

impl Dispatcher {
    fn push(&self, item: Item) {
        match self.pending.lock() {
            Ok(mut q) => q.push(item),
            Err(poisoned) => poisoned.into_inner().push(item),
        }
        if !self.scheduled.swap(true, Ordering::AcqRel) {
            // WouldBlock means the loop has bytes to read already; any other
            // error means the loop is gone and nobody waits for the result.
            let _ = (&self.wake_write).write(&[1]);
        }
    }

    fn forget(&self, py: Python<'_>) {
        let closed = self
            .event_loop
            .call_method0(py, "is_closed")
            .and_then(|c| c.is_truthy(py))
            .unwrap_or(true);
        if !closed {
            let _ = self
                .event_loop
                .call_method1(py, "remove_reader", (self.wake_read.as_raw_fd(),));
        }
    }
}

/// The loop callback that resolves every queued future (weak: no cycle with its dispatcher).
#[pyclass(frozen, module = "polylimit._polylimit")]
struct Drain(Weak<Dispatcher>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) -> PyResult<()> {
        let Some(d) = self.0.upgrade() else { return Ok(()) };
        let mut buf = [0u8; 256];
        while let Ok(n) = (&d.wake_read).read(&mut buf) {
            if n < buf.len() {
                break;
            }
        }
        d.scheduled.store(false, Ordering::Release);
        let items = match d.pending.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for (future, result) in items {
            if let Err(e) = resolve(future.bind(py), result) {
                e.write_unraisable(py, Some(future.bind(py)));
            }
        }
        Ok(())
    }
}

fn resolve(future: &Bound<'_, PyAny>, result: polylimit::Result<Done>) -> PyResult<()> {
    let py = future.py();
    if future.call_method0(intern!(py, "done"))?.is_truthy()? {
        // Cancelled while the check ran: nobody gets the result.
        if let Ok(done) = result {
            done.abandon();
        }
        return Ok(());
    }
    match result.map_err(to_py_err).and_then(|done| done.into_py(py)) {
        Ok(value) => future.call_method1(intern!(py, "set_result"), (value,))?,
        Err(err) => future.call_method1(intern!(py, "set_exception"), (err.value(py),))?,
    };
    Ok(())
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Dispatcher>>> = const { RefCell::new(None) };
}

/// In a forked child: stop using the dispatcher inherited from the parent
/// (its wake-up socket is shared with the parent, its futures are the parent's).
pub(crate) fn forget_after_fork(py: Python<'_>) {
    if let Some(old) = CURRENT.with(|c| c.borrow_mut().take()) {
        old.forget(py);
    }
}

fn dispatcher(py: Python<'_>) -> PyResult<Arc<Dispatcher>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get = GET_RUNNING_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?.getattr("get_running_loop").map(Bound::unbind)
    })?;
    let event_loop = get.call0(py)?;
    if let Some(d) = CURRENT.with(|c| c.borrow().clone()) {
        if d.event_loop.is(&event_loop) {
            return Ok(d);
        }
    }
    let (wake_read, wake_write) = UnixStream::pair()?;
    wake_read.set_nonblocking(true)?;
    wake_write.set_nonblocking(true)?;
    let d = Arc::new(Dispatcher {
        event_loop,
        wake_read,
        wake_write,
        pending: Mutex::new(Vec::new()),
        scheduled: AtomicBool::new(false),
    });
    let drain = Py::new(py, Drain(Arc::downgrade(&d)))?;
    d.event_loop
        .call_method1(py, "add_reader", (d.wake_read.as_raw_fd(), drain))?;
    if let Some(old) = CURRENT.with(|c| c.borrow_mut().replace(d.clone())) {
        old.forget(py);
    }
    Ok(d)
}

/// An asyncio future of the running loop, resolved when `fut` finishes on the
/// tokio runtime. Raises `RuntimeError` outside a running loop.
pub(crate) fn spawn<'py, T, F>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    T: Into<Done> + Send + 'static,
    F: Future<Output = polylimit::Result<T>> + Send + 'static,
{
    let d = dispatcher(py)?;
    let future = d.event_loop.call_method0(py, intern!(py, "create_future"))?;
    let handle = future.clone_ref(py);
    let mut fut = Box::pin(fut);
    runtime().spawn(async move {
        // A panic in the core becomes InternalError instead of a future that never resolves.
        let result = std::future::poll_fn(|cx| {
            std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(cx)))
                .unwrap_or_else(|_| Poll::Ready(Err(polylimit::Error::Internal("panic in a check".into()))))
        })
        .await;
        d.push((handle, result.map(Into::into)));
    });
    Ok(future.into_bound(py))
}
