//! The tokio runtime every call runs on (Redis connections live on it),
//! built on first use. The async forms spawn on it and hand uniffi the join
//! handle, so a pending check holds no JVM thread.

use std::sync::OnceLock;

use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

pub(crate) fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        // POLYLIMIT_WORKER_THREADS overrides tokio's default (one per core), as in the other bindings.
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
