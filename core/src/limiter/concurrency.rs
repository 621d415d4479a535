//! Concurrency limits on the public [`Limiter`]: acquiring a lease before a
//! request is handled and releasing it after (SPEC: concurrency policies).
//! A check of a concurrency policy acquires; what it acquired comes back as
//! [`Lease`]s, which [`Limiter::release`] gives back.

use crate::decision::{Decision, Lease};
use crate::engine::{CheckOptions, Engine};
use crate::error::{Error, Result};
use crate::policy::Algorithm;

use super::Limiter;

/// The leases one [`Limiter::acquire`] took. Dropping the guard releases
/// them (on the tokio runtime it is dropped in; without one, only the
/// process-local store's, and Redis's end with their lease);
/// [`LeaseGuard::release`] does it and reports how many were live.
#[must_use = "dropping the guard releases its leases at once"]
pub struct LeaseGuard {
    /// The engine that took them (a reload since changes nothing for them).
    engine: Engine,
    leases: Vec<Lease>,
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard").field("leases", &self.leases).finish()
    }
}

impl LeaseGuard {
    /// The leases held.
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// Releases the leases now; how many were still live.
    pub async fn release(mut self) -> Result<usize> {
        let leases = std::mem::take(&mut self.leases);
        self.engine.release(&leases, None).await
    }

    /// The leases, no longer released by this guard: for a caller that
    /// releases them later itself ([`Limiter::release`]), from another task
    /// or after the response is sent.
    pub fn into_leases(mut self) -> Vec<Lease> {
        std::mem::take(&mut self.leases)
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.leases.is_empty() {
            return;
        }
        let leases = std::mem::take(&mut self.leases);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let engine = self.engine.clone();
                let running = engine.background().start();
                runtime.spawn(async move {
                    let _running = running;
                    let _ = engine.release(&leases, None).await;
                });
            }
            Err(_) => self.engine.release_local(&leases, None),
        }
    }
}

impl Limiter {
    /// Acquires `key` with cost 1 on the store's clock: a check of every
    /// policy that, for a `concurrency` policy, takes a slot until released.
    /// Returns the decision (as [`Limiter::check`] does) and, when allowed,
    /// a guard holding the leases taken (`None` when denied, or when no
    /// policy is a concurrency one). Hold the guard while the request runs.
    ///
    /// ```no_run
    /// # async fn handle(limiter: polylimit::Limiter) -> polylimit::Result<()> {
    /// let (decision, guard) = limiter.acquire("user:42").await?;
    /// if !decision.allowed {
    ///     return Ok(()); // 429, Retry-After: decision.retry_after_ms
    /// }
    /// // ... serve the request ...
    /// if let Some(guard) = guard {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, key: &str) -> Result<(Decision, Option<LeaseGuard>)> {
        self.acquire_with(key, CheckOptions::default()).await
    }

    /// [`Limiter::acquire`] with options (`cost` slots; `now_ms` for tests
    /// and simulations: a lease taken at `now_ms` ends at `now_ms + lease`).
    pub async fn acquire_with(&self, key: &str, options: CheckOptions) -> Result<(Decision, Option<LeaseGuard>)> {
        let engine = self.engine();
        let result = engine.check_all(key, options).await?;
        let decision = result.decision();
        let guard = (!result.leases.is_empty()).then(|| LeaseGuard {
            engine,
            leases: result.leases,
        });
        Ok((decision, guard))
    }

    /// Releases leases a check took ([`crate::CheckResult::leases`],
    /// [`crate::Outcome::leases`]): their slots are free again. Idempotent:
    /// an unknown, released or ended lease is left as it is. Returns how many
    /// were live. Never fails because the store is down: that is counted in
    /// `polylimit_store_errors_total`, and those leases end with their lease.
    /// Works after [`Limiter::close`] too, so requests in flight can finish.
    /// Fails only for a lease whose policy is no concurrency policy of this
    /// limiter (a config error naming `leases[i].policy`).
    pub async fn release(&self, leases: &[Lease]) -> Result<usize> {
        self.engine().release(leases, None).await
    }

    /// [`Limiter::release`] at `now_ms` instead of the store's clock (tests
    /// and simulations): a lease is live if it ends after `now_ms`.
    pub async fn release_at(&self, leases: &[Lease], now_ms: i64) -> Result<usize> {
        self.engine().release(leases, Some(now_ms)).await
    }
}

/// [`Limiter::check`] returns one decision and no lease: on a limiter
/// with a concurrency policy it would take a slot nobody releases.
pub(super) fn refuse_concurrency(engine: &crate::engine::Engine) -> Result<()> {
    match engine.policies().find(|p| p.algorithm() == Algorithm::Concurrency) {
        None => Ok(()),
        Some(p) => Err(Error::config(
            "policy",
            format!("{:?}", p.name()),
            "is a concurrency policy: check would take a slot and lose its lease; use \
             acquire (or check_all) and release the leases it returns",
        )),
    }
}
