//! The tokio runtime every awaitable and every blocking call runs on: built
//! lazily on first use and awaitables resolve from it (`future.rs`).

use std::sync::OnceLock;

use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The shared multi-thread runtime (Redis connections live on it).
pub(crate) fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        // POLYLIMIT_WORKER_THREADS overrides tokio's default (one per core).
        if let Some(n) = std::env::var("POLYLIMIT_WORKER_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
        {
            builder.worker_threads(n);
        }
        builder
            .thread_name("polylimit-tokio")
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("polylimit: cannot build the tokio runtime: {e}"))
    })
}
