//! The event loop's side of the core's completion bridge
//! (`polylimit::bridge`): one `Bridge` per asyncio event loop, an asyncio
//! future per call, and the loop's wake-up.
//!
//! The bridge wakes the loop by writing one byte to a socket pair the loop
//! watches (`loop.add_reader`): no runtime thread ever takes the GIL (a
//! `call_soon_threadsafe` per result made a tokio worker wait for the GIL,
//! and every Redis reply it would have handled waited with it). The byte is
//! written by a `Wake::Call` that owns the socket's write end, rather than
//! `Wake::Fd`: the bridge outlives this host while calls already submitted
//! finish, and the fd must stay open (not closed and reused) until then.
//! The loop's `drain` then takes every finished record and settles its future.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use polylimit::bridge::{Bridge, Wake};
use polylimit::wire::packed::{read_record, ErrorRecord, Reply};
use polylimit::Limiter;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::reader::{self, Convert};
use crate::runtime::runtime;

/// A call whose record has not been read yet.
struct Waiter {
    future: Py<PyAny>,
    convert: Convert,
    /// The limiter the call ran on, when its reply holds something to give
    /// back if nobody takes it (a completion token, leases).
    limiter: Option<Limiter>,
}

#[derive(Default)]
struct Waiting {
    by_ctx: HashMap<u64, Waiter>,
    next_ctx: u64,
}

struct Host {
    event_loop: Py<PyAny>,
    bridge: Bridge,
    /// Watched by the loop; one byte means "records are ready".
    wake_read: UnixStream,
    waiting: Mutex<Waiting>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A reply nobody takes (its future was cancelled while the core ran, or
/// its loop is gone): an admitted request's completion token is settled as
/// "no response", so it keeps no concurrency slot until its lease ends and
/// no charge its `count` would not make; an acquire's leases are released.
fn abandon(reply: Reply, limiter: Option<Limiter>) {
    let Some(limiter) = limiter else { return };
    match reply {
        Reply::Outcome(outcome, _) => {
            if let Some(token) = outcome.completion {
                runtime().spawn(async move {
                    let _ = limiter.complete(&token, None).await;
                });
            }
        }
        Reply::Acquired(_, leases) if !leases.is_empty() => {
            runtime().spawn(async move {
                let _ = limiter.release(&leases).await;
            });
        }
        _ => {}
    }
}

impl Waiter {
    fn settle(self, py: Python<'_>, result: Result<Reply, ErrorRecord>) -> PyResult<()> {
        let future = self.future.bind(py);
        if future.call_method0(intern!(py, "done"))?.is_truthy()? {
            if let Ok(reply) = result {
                abandon(reply, self.limiter);
            }
            return Ok(());
        }
        match reader::result(py, result, self.convert, self.limiter.as_ref()) {
            Ok(value) => future.call_method1(intern!(py, "set_result"), (value,))?,
            Err(err) => future.call_method1(intern!(py, "set_exception"), (err.value(py),))?,
        };
        Ok(())
    }
}

impl Host {
    /// Stops watching the socket (if the loop is still open).
    fn unwatch(&self, py: Python<'_>) {
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

    /// This host's loop is replaced: the calls still running finish on the
    /// runtime, and what their replies hold is given back (nobody awaits them).
    fn retire(&self, py: Python<'_>) {
        self.unwatch(py);
        let waiting = std::mem::take(&mut lock(&self.waiting).by_ctx);
        let mut left: HashMap<u64, Option<Limiter>> = waiting.into_iter().map(|(ctx, w)| (ctx, w.limiter)).collect();
        if left.is_empty() {
            return;
        }
        let bridge = self.bridge.clone();
        runtime().spawn_blocking(move || {
            let mut buf = Vec::new();
            // Every call ends (the store's timeouts bound it); a minute of
            // nothing means the runtime is stuck: give up.
            while !left.is_empty() && bridge.take_wait(&mut buf, Duration::from_secs(60)) > 0 {
                let mut bytes = &buf[..];
                while let Ok((ctx, result)) = read_record(&mut bytes) {
                    if let (Some(limiter), Ok(reply)) = (left.remove(&ctx), result) {
                        abandon(reply, limiter);
                    }
                }
            }
        });
    }
}

/// The loop callback that settles every finished call (weak: no cycle with its host).
#[pyclass(frozen, module = "polylimit._polylimit")]
struct Drain(Weak<Host>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        let Some(host) = self.0.upgrade() else { return };
        let mut byte = [0u8; 64];
        while let Ok(n) = (&host.wake_read).read(&mut byte) {
            if n < byte.len() {
                break;
            }
        }
        // Until a take finds nothing: that one arms the next wake-up.
        let mut buf = Vec::new();
        while host.bridge.try_take(&mut buf) > 0 {
            let mut bytes = &buf[..];
            let mut done = Vec::new();
            {
                let mut waiting = lock(&host.waiting);
                while !bytes.is_empty() {
                    // The bridge wrote these bytes: malformed is a bug in it.
                    let Ok((ctx, result)) = read_record(&mut bytes) else {
                        break;
                    };
                    if let Some(waiter) = waiting.by_ctx.remove(&ctx) {
                        done.push((waiter, result));
                    }
                }
            }
            // Settled outside the lock: Python code may run and submit again.
            for (waiter, result) in done {
                let future = waiter.future.clone_ref(py);
                if let Err(e) = waiter.settle(py, result) {
                    e.write_unraisable(py, Some(future.bind(py)));
                }
            }
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Host>>> = const { RefCell::new(None) };
}

/// In a forked child: stop using the host inherited from the parent (its
/// socket is shared with the parent, its calls ran on the parent's runtime).
pub(crate) fn forget_after_fork(py: Python<'_>) {
    if let Some(old) = CURRENT.with(|c| c.borrow_mut().take()) {
        old.unwatch(py);
    }
}

/// The host of the running loop, made on its first call.
fn host(py: Python<'_>) -> PyResult<Arc<Host>> {
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get = GET_RUNNING_LOOP.get_or_try_init(py, || {
        py.import("asyncio")?.getattr("get_running_loop").map(Bound::unbind)
    })?;
    let event_loop = get.call0(py)?;
    if let Some(h) = CURRENT.with(|c| c.borrow().clone()) {
        if h.event_loop.is(&event_loop) {
            return Ok(h);
        }
    }
    let (wake_read, wake_write) = UnixStream::pair()?;
    wake_read.set_nonblocking(true)?;
    // A full socket already holds a byte: nothing is lost.
    wake_write.set_nonblocking(true)?;
    let wake = Wake::Call(Box::new(move || {
        let _ = (&wake_write).write(&[1]);
    }));
    let h = Arc::new(Host {
        event_loop,
        bridge: Bridge::new(runtime().handle(), wake),
        wake_read,
        waiting: Mutex::default(),
    });
    let drain = Py::new(py, Drain(Arc::downgrade(&h)))?;
    h.event_loop
        .call_method1(py, "add_reader", (h.wake_read.as_raw_fd(), drain))?;
    if let Some(old) = CURRENT.with(|c| c.borrow_mut().replace(h.clone())) {
        old.retire(py);
    }
    Ok(h)
}

/// An asyncio future of the running loop, resolved with `call`'s reply as
/// `reader::value` converts it. Raises `RuntimeError` outside a running loop.
pub(crate) fn submit<'py>(
    py: Python<'py>,
    call: impl Future<Output = polylimit::Result<Reply>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    submit_with(py, call, reader::value, None)
}

/// [`submit`], the reply converted by `convert`, with the limiter the call
/// runs on (to give back what a reply nobody takes holds).
pub(crate) fn submit_with<'py>(
    py: Python<'py>,
    call: impl Future<Output = polylimit::Result<Reply>> + Send + 'static,
    convert: Convert,
    limiter: Option<Limiter>,
) -> PyResult<Bound<'py, PyAny>> {
    let h = host(py)?;
    let future = h.event_loop.call_method0(py, intern!(py, "create_future"))?;
    let ctx = {
        let mut waiting = lock(&h.waiting);
        let ctx = waiting.next_ctx;
        waiting.next_ctx += 1;
        let waiter = Waiter {
            future: future.clone_ref(py),
            convert,
            limiter,
        };
        waiting.by_ctx.insert(ctx, waiter);
        ctx
    };
    h.bridge.submit(ctx, call);
    Ok(future.into_bound(py))
}
