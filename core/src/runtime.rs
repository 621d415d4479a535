//! The tokio runtime a binding runs checks on, built the same way in every
//! language.

/// A multi-threaded runtime whose threads are named `polylimit`:
/// `POLYLIMIT_WORKER_THREADS` workers when that is a whole number above 0,
/// else `default_workers` (`None`: tokio's default, one per core).
pub fn build_runtime(default_workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let workers = std::env::var("POLYLIMIT_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .or(default_workers);
    if let Some(n) = workers {
        builder.worker_threads(n);
    }
    builder.thread_name("polylimit").enable_all().build()
}
