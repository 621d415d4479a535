//! Completion: a request's charge settled once its response status is known.

use super::Limiter;
use crate::error::Result;

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
        let live = self.live();
        live.http.complete(&live.engine, token, status).await
    }
}
