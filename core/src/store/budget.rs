//! One budget per check (SPEC §5): the deadline every store call of one
//! check ends by. Here, beside the store, because the Redis store bounds
//! each call by it; the limiter sets it around a check.

use std::future::Future;
use std::time::Duration;

tokio::task_local! {
    /// The deadline of the check this task is deciding: every store call
    /// it makes (its own, a sync's second one, a regional lender's, each
    /// slot group's on a cluster) ends by then. Set by [`within_budget`].
    static DEADLINE: tokio::time::Instant;
}

/// The deadline of the check running on this task, if one is.
pub(crate) fn deadline() -> Option<tokio::time::Instant> {
    DEADLINE.try_with(|d| *d).ok()
}

/// Runs a check's `decide` with one budget of `timeout` for all of its
/// store calls (SPEC §5): a call made later gets what is left. A check
/// inside another (a lender's, decided for a borrow) keeps the outer budget.
pub(crate) async fn within_budget<F: Future>(timeout: Duration, decide: F) -> F::Output {
    if deadline().is_some() {
        return decide.await;
    }
    DEADLINE.scope(tokio::time::Instant::now() + timeout, decide).await
}
