//! A queue of finished calls handed to JavaScript in one call per wake-up, the
//! shape both completion channels share: the decision records of `check`
//! (`batch.rs`) and the outcomes and errors of requests (`outcome.rs`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::{Function, JsValuesTupleIntoVec};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Result, Status};

/// What a queue holds between two wake-ups.
pub trait Batch: Default + 'static {
    fn is_empty(&self) -> bool;
}

impl Batch for Vec<f64> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

/// Results of type `B` queued on the runtime, handed to `handler(args)` on the JS thread.
pub struct Queue<B, Args: 'static + JsValuesTupleIntoVec> {
    batch: Arc<Mutex<B>>,
    tsfn: Arc<ThreadsafeFunction<(), (), Args, Status, false, true>>,
    /// Results were queued since the JS thread last took the batch: `flush` wakes it.
    wake: Arc<AtomicBool>,
}

impl<B, Args: 'static + JsValuesTupleIntoVec> Clone for Queue<B, Args> {
    fn clone(&self) -> Self {
        Queue {
            batch: self.batch.clone(),
            tsfn: self.tsfn.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<B: Batch, Args: 'static + JsValuesTupleIntoVec> Queue<B, Args> {
    /// `handler` is called on the JS thread with what `hand_over` makes of the batch
    /// queued since the last call; a weak (unref'd) threadsafe function, so it never
    /// keeps the process alive.
    pub fn new(
        handler: Function<'_, Args, ()>,
        mut hand_over: impl FnMut(B) -> Result<Args> + 'static,
    ) -> Result<Self> {
        let batch: Arc<Mutex<B>> = Arc::default();
        let drain = batch.clone();
        let tsfn = handler
            .build_threadsafe_function::<()>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(move |_ctx| {
                hand_over(std::mem::take(&mut *drain.lock().unwrap_or_else(|e| e.into_inner())))
            })?;
        Ok(Queue {
            batch,
            tsfn: Arc::new(tsfn),
            wake: Arc::default(),
        })
    }

    /// Wakes the JS thread (once) if results were queued since it last took them.
    pub fn flush(&self) {
        if self.wake.swap(false, Ordering::AcqRel) {
            self.tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }

    /// Adds a result to the batch (`add`); the next `flush` wakes the JS thread.
    pub fn push(&self, add: impl FnOnce(&mut B)) {
        let was_empty = {
            let mut batch = self.batch.lock().unwrap_or_else(|e| e.into_inner());
            let was_empty = batch.is_empty();
            add(&mut batch);
            was_empty
        };
        if was_empty {
            self.wake.store(true, Ordering::Release);
        }
    }
}
