//! Checks of a key: charge, peek or forget it under every policy.

use super::Limiter;
use crate::decision::{CheckResult, Decision};
use crate::engine::CheckOptions;
use crate::error::Result;

impl Limiter {
    /// Checks `key` with cost 1 on the store's clock. With several policies,
    /// returns the one closest to denying.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        self.check_with(key, CheckOptions::default()).await
    }

    /// Checks `key` with options.
    pub async fn check_with(&self, key: &str, options: CheckOptions) -> Result<Decision> {
        // The hot path decides under the read lock, with nothing to clone.
        let engine = {
            let live = self.shared.live.read();
            if let Some(decision) = live.engine.check_one_now(key, options) {
                return decision;
            }
            live.engine.clone()
        };
        super::concurrency::refuse_concurrency(&engine)?;
        let result = engine.check_all(key, options).await?;
        Ok(result.decision())
    }

    /// Checks `key` against every policy in one atomic decision: allowed only
    /// if all allow, and then all are charged; otherwise none is.
    pub async fn check_all(&self, key: &str, options: CheckOptions) -> Result<CheckResult> {
        self.engine().check_all(key, options).await
    }

    /// Peeks `key` with cost 1 on the store's clock: the decision
    /// [`Limiter::check`] would return now, charging nothing and recording
    /// no penalty. Not counted in the request metrics.
    pub async fn peek(&self, key: &str) -> Result<Decision> {
        self.peek_with(key, CheckOptions::default()).await
    }

    /// Peeks `key` with options (a cost, a time): the decision
    /// [`Limiter::check_with`] would return, charging nothing.
    pub async fn peek_with(&self, key: &str, options: CheckOptions) -> Result<Decision> {
        Ok(self.engine().peek_all(key, options).await?.decision())
    }

    /// Forgets `key` under every policy (in the store and the local fallback).
    pub async fn reset(&self, key: &str) -> Result<()> {
        self.engine().reset(key).await
    }
}
