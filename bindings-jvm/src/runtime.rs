//! The tokio runtime every call runs on (Redis connections live on it),
//! built on first use. The async forms spawn on it and hand uniffi the join
//! handle, so a pending check holds no JVM thread.

use std::sync::OnceLock;

use tokio::runtime::Runtime;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

pub(crate) fn runtime() -> &'static Runtime {
    RUNTIME.get_or_init(|| {
        polylimit::build_runtime(None).unwrap_or_else(|e| panic!("polylimit: cannot build the tokio runtime: {e}"))
    })
}
