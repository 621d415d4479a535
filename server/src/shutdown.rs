//! A graceful shutdown with a bound: the calls in flight finish, but a client
//! that never finishes its request (or never reads its answer) cannot hold
//! the process forever.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::log;

/// How long a listener waits, once asked to stop, for its connections.
pub const GRACE: Duration = Duration::from_secs(10);

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn requested(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Runs `serving` (a server with graceful shutdown on `stop`) to its end, or
/// until [`GRACE`] after `stop`, when the connections still open are dropped.
pub async fn bounded<E>(
    what: &str,
    serving: impl Future<Output = Result<(), E>>,
    stop: watch::Receiver<bool>,
) -> Result<(), E> {
    tokio::select! {
        done = serving => done,
        () = async { requested(stop).await; tokio::time::sleep(GRACE).await } => {
            log::warn(
                "connections still open after the shutdown grace: closed",
                &[("server", what.into()), ("grace_s", GRACE.as_secs().into())],
            );
            Ok(())
        }
    }
}
