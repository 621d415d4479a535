//! `Lease`: the slots of a concurrency policy one `acquire` took (the core's
//! `LeaseGuard`). Released by `release` / `releaseAsync`, or by `close()`
//! (uniffi's `AutoCloseable`: Kotlin's `use`, Java's try-with-resources) and
//! when collected, both in the background; only the first release gives the
//! slots back.

use std::sync::{Arc, Mutex};

use polylimit::LeaseGuard;

use crate::args::check_options;
use crate::errors::{block, spawn, PolylimitError};
use crate::runtime::runtime;
use crate::types::Decision;

/// The slots one `acquire` took; give them back with `release`.
#[derive(uniffi::Object)]
pub struct Lease {
    limiter: polylimit::Limiter,
    guard: Mutex<Option<LeaseGuard>>,
}

/// What `acquire` answers: the decision and, when allowed on a limiter with a
/// concurrency policy, the lease to release after the work.
#[derive(uniffi::Record)]
pub struct Acquired {
    /// The decision, as `check` would return it.
    pub decision: Decision,
    /// The slots taken; null when denied or when no policy is a concurrency one.
    pub lease: Option<Arc<Lease>>,
}

impl Lease {
    pub(crate) fn new(limiter: polylimit::Limiter, guard: LeaseGuard) -> Arc<Lease> {
        Arc::new(Lease {
            limiter,
            guard: Mutex::new(Some(guard)),
        })
    }

    fn take(&self) -> Vec<polylimit::Lease> {
        let mut guard = self.guard.lock().unwrap_or_else(|e| e.into_inner());
        guard.take().map(LeaseGuard::into_leases).unwrap_or_default()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // The guard's own Drop releases on the runtime it is dropped in.
        let guard = self.guard.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        let _entered = runtime().enter();
        drop(guard);
    }
}

pub(crate) async fn release(
    limiter: polylimit::Limiter,
    leases: Vec<polylimit::Lease>,
    now_ms: Option<i64>,
) -> polylimit::Result<i64> {
    if leases.is_empty() {
        return Ok(0);
    }
    let n = match now_ms {
        Some(now) => limiter.release_at(&leases, now).await?,
        None => limiter.release(&leases).await?,
    };
    Ok(i64::try_from(n).unwrap_or(i64::MAX))
}

#[uniffi::export]
impl Lease {
    /// Gives the slots back (at `nowMs`, default the store's clock); how many
    /// were still live. A second release gives back nothing.
    #[uniffi::method(default(now_ms = None))]
    pub fn release(&self, now_ms: Option<i64>) -> Result<i64, PolylimitError> {
        let now_ms = check_options(None, now_ms)?.now_ms;
        block(release(self.limiter.clone(), self.take(), now_ms))
    }

    /// `release` as a suspend function.
    #[uniffi::method(default(now_ms = None))]
    pub async fn release_async(&self, now_ms: Option<i64>) -> Result<i64, PolylimitError> {
        let now_ms = check_options(None, now_ms)?.now_ms;
        spawn(release(self.limiter.clone(), self.take(), now_ms)).await
    }

    /// Whether the slots were given back.
    pub fn released(&self) -> bool {
        self.guard.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}
