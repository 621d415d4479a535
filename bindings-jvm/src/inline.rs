//! One poll on the calling thread before anything is spawned or waited for:
//! a call the store answers without I/O (the memory store, a cached block, a
//! local decision) completes right there, so the async forms hand uniffi a
//! future that is ready at its first poll (no task, no wake-up from a runtime
//! thread, no JNA upcall from a thread the JVM must attach), and the blocking
//! forms skip `block_on`. Only a call that waits for I/O goes to the runtime.
//! The Go binding's C ABI does the same (`try_now` in bindings-go/capi).

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use crate::runtime::runtime;

/// Polls `future` once inside the runtime's context (Redis connections need
/// it) with a no-op waker: whoever polls it next (the runtime) registers its
/// own. A panic is returned as its payload.
pub(crate) fn poll_once<F: Future + ?Sized>(future: Pin<&mut F>) -> Result<Poll<F::Output>, Box<dyn Any + Send>> {
    let _enter = runtime().enter();
    catch_unwind(AssertUnwindSafe(|| {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::errors::spawn;
    use crate::limiter::Limiter;

    fn first_poll<F: Future>(future: F) -> Poll<F::Output> {
        let mut future = std::pin::pin!(future);
        future.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    fn memory() -> Arc<Limiter> {
        Limiter::new(r#"{"policy": {"algorithm": "token_bucket", "rate": "10/s", "burst": 2}}"#.into()).unwrap()
    }

    #[test]
    fn a_memory_check_async_is_ready_at_its_first_poll() {
        // What uniffi does first with the future it is handed: a memory-store
        // decision is there, with no task spawned and no wake-up to wait for.
        let limiter = memory();
        for remaining in [1, 0] {
            match first_poll(limiter.check_async("k".into(), None, Some(1_000))) {
                Poll::Ready(Ok(d)) => {
                    assert!(d.allowed);
                    assert_eq!(d.remaining, remaining);
                }
                Poll::Ready(Err(e)) => panic!("check failed: {e}"),
                Poll::Pending => panic!("a memory check was left pending at the first poll"),
            }
        }
        match first_poll(limiter.check_async("k".into(), None, Some(1_000))) {
            Poll::Ready(Ok(d)) => assert!(!d.allowed),
            _ => panic!("the third check was not decided at the first poll"),
        }
    }

    #[test]
    fn a_call_still_pending_after_the_first_poll_finishes_on_the_runtime() {
        let pending_once = async {
            tokio::task::yield_now().await;
            Ok::<_, polylimit::Error>(7)
        };
        assert!(matches!(first_poll(spawn(pending_once)), Poll::Pending));
        let pending_once = async {
            tokio::task::yield_now().await;
            Ok::<_, polylimit::Error>(7)
        };
        assert_eq!(runtime().block_on(spawn(pending_once)).unwrap(), 7);
    }

    #[test]
    fn a_panic_at_the_first_poll_becomes_internal() {
        let panics = async {
            if true {
                panic!("boom");
            }
            Ok::<i32, polylimit::Error>(0)
        };
        match runtime().block_on(spawn(panics)) {
            Err(crate::PolylimitError::Internal { text }) => assert!(text.contains("boom"), "{text}"),
            other => panic!("expected Internal, got {other:?}"),
        }
    }
}
