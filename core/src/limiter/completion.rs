//! Completion: a request's charge settled once its response status is known.

use super::Limiter;
use crate::error::Result;
use crate::http::CompleteOptions;
use serde_json::Value;

impl Limiter {
    /// Completes a request whose [`Outcome`](crate::Outcome) carried a
    /// `completion` token, once its response `status` is known (`None` or 0:
    /// no response at all — a handler error, a client that went away — which
    /// counts as failed): gives back the charge of every target whose rule's
    /// `count` does not count that status, and releases the concurrency
    /// leases the request took. Returns how many charges were given back.
    /// A token completes once: a later completion gives nothing back and
    /// returns 0 (its leases are released again, which changes nothing).
    /// A charge goes back only to the state it went to (see the module).
    /// Never fails because the store is down (the charge is then kept, a
    /// lease ends by its TTL, and the error is metered); fails on a token
    /// that is not one, or one naming a policy this limiter does not have.
    pub async fn complete(&self, token: &str, status: Option<u16>) -> Result<usize> {
        self.complete_with(token, status, CompleteOptions::default()).await
    }

    /// [`Limiter::complete`] reporting the request's actual cost, learned
    /// from the response (an LLM call's tokens): for every charge the status
    /// counts, a smaller actual cost gives the difference back (the exact
    /// inverse of that part of the admission, under the same rules as a
    /// refund), a larger one charges the difference whatever the limit (a
    /// forced debit at the completion's clock: a token bucket goes into
    /// debt, a window counts past its limit), the request's total capped at
    /// the `max_cost` of its rules (1000 when they say nothing). Charges the
    /// status does not count are given back whole, whatever the cost.
    /// Returns how many charges were given back or charged. The overshoot
    /// bound: N requests of one key admitted at once, each reserving `r` and
    /// costing up to `m`, take the key at most `N * (m - r)` past its limit,
    /// which later requests wait off.
    pub async fn complete_with(&self, token: &str, status: Option<u16>, options: CompleteOptions) -> Result<usize> {
        let live = self.live();
        live.http.complete(&live.engine, token, status, options).await
    }

    /// [`Limiter::complete_with`] from a binding's loosely typed arguments
    /// ([`CompleteOptions::from_values`]): what every binding's `complete`
    /// and every middleware's settlement call. A cost it refuses (negative,
    /// fractional, not a number: a handler's bad report) is a `Config`
    /// error naming `cost`, returned after the request is completed without
    /// it, as if nothing was reported: its leases are released and the
    /// charges its status does not count given back, so a bad number never
    /// keeps a concurrency slot or a refund until the lease ends. A bad
    /// `now_ms` (tests only) is refused before anything is done.
    pub async fn complete_values(
        &self,
        token: &str,
        status: Option<u16>,
        cost: Option<&Value>,
        now_ms: Option<&Value>,
    ) -> Result<usize> {
        let clock = CompleteOptions::from_values(None, now_ms)?;
        match CompleteOptions::from_values(cost, now_ms) {
            Ok(options) => self.complete_with(token, status, options).await,
            Err(refused) => {
                self.complete_with(token, status, clock).await?;
                Err(refused)
            }
        }
    }
}
