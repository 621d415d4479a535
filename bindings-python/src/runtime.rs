//! The tokio runtime every awaitable and every blocking call runs on: built
//! lazily on first use; the awaitables' calls run on it (`host.rs`).
//!
//! Fork safety: a child process inherits the runtime but not its worker
//! threads, so `polylimit` registers [`forget_after_fork`] with
//! `os.register_at_fork` and the child builds its own on first use (gunicorn
//! `--preload` forks workers after the app, and maybe a check, ran).

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;

use tokio::runtime::Runtime;

static RUNTIME: AtomicPtr<Runtime> = AtomicPtr::new(std::ptr::null_mut());
static BUILDING: Mutex<()> = Mutex::new(());

/// The shared multi-thread runtime (Redis connections live on it).
pub(crate) fn runtime() -> &'static Runtime {
    let current = RUNTIME.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: set once per process from a leaked Box, never freed.
        return unsafe { &*current };
    }
    let _building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let current = RUNTIME.load(Ordering::Acquire);
    if !current.is_null() {
        // SAFETY: as above.
        return unsafe { &*current };
    }
    let built: &'static Runtime = Box::leak(Box::new(build()));
    RUNTIME.store(built as *const Runtime as *mut Runtime, Ordering::Release);
    built
}

/// Runs `work` on the shared runtime and blocks until it is done, with the
/// GIL released: the body of every `_sync` method.
pub(crate) fn block_on<T: Send>(
    py: pyo3::Python<'_>,
    work: impl std::future::Future<Output = polylimit::Result<T>> + Send,
) -> pyo3::PyResult<T> {
    use crate::errors::IntoPyResult;
    py.detach(|| runtime().block_on(work)).into_py_result()
}

/// In a forked child: leave the parent's runtime behind (its threads are
/// gone; dropping it would wait for them) and build a new one on next use.
pub(crate) fn forget_after_fork() {
    RUNTIME.store(std::ptr::null_mut(), Ordering::Release);
}

fn build() -> Runtime {
    polylimit::build_runtime(None).unwrap_or_else(|e| panic!("polylimit: cannot build the tokio runtime: {e}"))
}
