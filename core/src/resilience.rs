//! The guarded store call: a circuit breaker around the store (whose call is
//! bounded by the limiter's `timeout` in `store/redis/`), and each policy's
//! `on_store_error` fallback while the store cannot answer.

use std::future::Future;
use std::time::Instant;

use std::sync::Arc;

use crate::breaker::{BreakerConfig, BreakerState, CircuitBreaker, Clock};
use crate::decision::{CheckResult, Decision, Source};
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::policy::OnStoreError;
use crate::store::budget::deadline;

/// One policy on one key: (policy index, key, `true` for a shadow check,
/// whose denial blocks nothing).
pub(crate) type Target<'a> = (usize, &'a str, bool);

/// The breaker and the fallback of one limiter's store.
pub(crate) struct Resilience {
    breaker: CircuitBreaker,
}

impl Resilience {
    pub(crate) fn new(config: BreakerConfig) -> Resilience {
        Resilience {
            breaker: CircuitBreaker::new(config),
        }
    }

    /// The time on the breaker's clock.
    pub(crate) fn now(&self) -> std::time::Instant {
        self.breaker.now()
    }

    /// The breaker reads the time from `clock` from now on.
    pub(crate) fn set_clock(&self, clock: Arc<dyn Clock>) {
        self.breaker.set_clock(clock);
    }

    /// The breaker's state.
    pub(crate) fn state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Runs `call` if the breaker lets it through and reports how it went.
    /// `Ok(None)`: the store cannot answer (breaker open, timeout, connection
    /// lost), decide by [`Resilience::fallback`]. An [`Error::Store`] (the
    /// server answered, only this key is wrong) counts as a success of the
    /// store and is returned.
    pub(crate) async fn call<T, Fut>(&self, metrics: &Metrics, call: impl FnOnce() -> Fut) -> Result<Option<T>>
    where
        Fut: Future<Output = Result<T>>,
    {
        // The check's budget is spent: the store is not asked (and its
        // breaker not charged with a failure that is not the store's).
        if deadline().is_some_and(|d| d <= tokio::time::Instant::now()) {
            return Ok(None);
        }
        let Some(permit) = self.breaker.acquire() else {
            return Ok(None);
        };
        // The store bounds the call by `timeout` (or what is left of the
        // check's budget), a connect included. If
        // this future is dropped first, the permit reports a failure.
        let started = Instant::now();
        let outcome = call().await;
        metrics.store_latency(started.elapsed());
        match outcome {
            Ok(answer) => {
                permit.success();
                Ok(Some(answer))
            }
            Err(e @ Error::Store { .. }) => {
                // The server answered: it is up, only this key is wrong.
                permit.success();
                metrics.store_error();
                Err(e)
            }
            Err(_) => {
                permit.failure();
                metrics.store_error();
                Ok(None)
            }
        }
    }

    /// Reports a store call made outside [`Resilience::call`] (a host's own
    /// socket: the sans-I/O path) that the server answered in `elapsed`:
    /// its latency, and a success to the breaker, as `call` reports one.
    pub(crate) fn answered(&self, metrics: &Metrics, elapsed: std::time::Duration) {
        metrics.store_latency(elapsed);
        if let Some(permit) = self.breaker.acquire() {
            permit.success();
        }
    }

    /// Reports a store call made outside [`Resilience::call`] that got no
    /// answer (a host's socket failed or stayed silent past the timeout):
    /// a failure to the breaker and an error in the metrics, as `call`
    /// reports a timeout.
    pub(crate) fn unanswered(&self, metrics: &Metrics, elapsed: std::time::Duration) {
        metrics.store_latency(elapsed);
        if let Some(permit) = self.breaker.acquire() {
            permit.failure();
        }
        metrics.store_error();
    }

    /// Decides while the store cannot, per each policy's `on_store_error`.
    /// `policy(i)`: the mode and limit of policy `i`; `local(targets, charge)`:
    /// the local (memory) decision of the `local` targets, charged or not.
    pub(crate) fn fallback(
        &self,
        targets: &[Target<'_>],
        now: i64,
        policy: impl Fn(usize) -> (OnStoreError, u64),
        local: impl FnOnce(&[Target<'_>], bool) -> CheckResult,
    ) -> CheckResult {
        let mode = |i: usize| policy(i).0;
        let any_closed = targets
            .iter()
            .any(|&(i, _, shadow)| mode(i) == OnStoreError::FailClosed && !shadow);
        let local_targets: Vec<Target<'_>> = targets
            .iter()
            .copied()
            .filter(|&(i, _, _)| mode(i) == OnStoreError::Local)
            .collect();
        // Local policies are charged only if nothing else denies.
        let local_result = (!local_targets.is_empty()).then(|| local(&local_targets, !any_closed));
        let retry_ms = self.breaker.retry_in().as_millis().max(1000) as u64;
        let mut local_decisions = local_result.iter().flat_map(|r| r.decisions.iter().copied());
        let decisions: Vec<Decision> = targets
            .iter()
            .map(|&(i, _, _)| {
                let (mode, limit) = policy(i);
                match mode {
                    OnStoreError::Local => local_decisions.next().unwrap_or(Decision {
                        allowed: false,
                        limit,
                        remaining: 0,
                        reset_after_ms: 0,
                        retry_after_ms: None,
                        delay_ms: 0,
                        source: Source::Local,
                    }),
                    OnStoreError::FailOpen => Decision {
                        allowed: true,
                        limit,
                        remaining: limit,
                        reset_after_ms: 0,
                        retry_after_ms: None,
                        delay_ms: 0,
                        source: Source::FailOpen,
                    },
                    OnStoreError::FailClosed => Decision {
                        allowed: false,
                        limit,
                        remaining: 0,
                        reset_after_ms: 0,
                        retry_after_ms: Some(retry_ms),
                        delay_ms: 0,
                        source: Source::FailClosed,
                    },
                }
            })
            .collect();
        let allowed = targets.iter().zip(&decisions).all(|(t, d)| d.allowed || t.2);
        // Leases the local store took (it charged only if nothing denied).
        let leases = local_result.map(|r| r.leases).unwrap_or_default();
        CheckResult {
            allowed,
            now_ms: now,
            decisions,
            leases,
            overridden: Vec::new(),
            limited: Vec::new(),
        }
    }
}
