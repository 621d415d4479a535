//! The work a limiter runs off the request's path (the refund of a check cut
//! short, the lookup that says overrides are ignored, an alert on its way to
//! `on_anomaly`), counted so that a caller can wait until it has finished
//! instead of polling for its effects.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// How many pieces of background work are running; wakes its waiters when
/// the last one ends. Shared by a limiter and the tasks it starts.
#[derive(Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// One piece of background work: counted from [`Background::start`] until
/// this is dropped (the task ended, the alert was delivered or dropped).
pub(crate) struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Counts a piece of work until the returned value is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> Running {
        self.running.fetch_add(1, Ordering::AcqRel);
        Running(self.clone())
    }

    /// Returns once no work is running (at once when none is).
    pub(crate) async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Registered before the count is read: an end in between still wakes it.
            idle.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    #[tokio::test]
    async fn settles_when_the_last_work_ends() {
        let background = Arc::new(Background::default());
        assert!(background.settled().now_or_never().is_some(), "nothing runs");
        let (first, second) = (background.start(), background.start());
        let mut settled = Box::pin(background.settled());
        assert!((&mut settled).now_or_never().is_none());
        drop(first);
        assert!((&mut settled).now_or_never().is_none(), "one piece still runs");
        std::thread::spawn(move || drop(second)).join().unwrap();
        assert!(
            settled.now_or_never().is_some(),
            "woken by the last end, on another thread"
        );
    }
}
