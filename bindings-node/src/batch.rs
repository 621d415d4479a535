//! Batched completions for `check` and `checkRequest`: instead of one threadsafe function and
//! one promise settlement per check (napi's `spawn_future`), finished
//! decisions are queued and handed to JavaScript in one call per wake-up, as
//! a `Float64Array` of fixed-size records. `index.js` settles the promises.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use polylimit::{CheckOptions, Limiter, RequestInfo};
use tokio::sync::mpsc;

use napi::bindgen_prelude::{Float64Array, Function};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Result, Status};

use crate::decision::record;
use crate::errors::to_napi;

type Tsfn = ThreadsafeFunction<(), (), Float64Array, Status, false, true>;

/// The queue of finished checks of one limiter and the function that drains it.
#[derive(Clone)]
pub struct Completions {
    queue: Arc<Mutex<Vec<f64>>>,
    tsfn: Arc<Tsfn>,
    /// Errors and request outcomes go through the text channel.
    pub text: RequestCompletions,
}

impl Completions {
    /// `handler(batch: Float64Array)` is called on the JS thread; a weak
    /// (unref'd) threadsafe function, so it never keeps the process alive.
    pub fn new(handler: Function<'_, Float64Array, ()>, text: RequestCompletions) -> Result<Completions> {
        let queue: Arc<Mutex<Vec<f64>>> = Arc::default();
        let drain = queue.clone();
        let tsfn = handler
            .build_threadsafe_function::<()>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(move |_ctx| {
                let batch = std::mem::take(&mut *drain.lock().unwrap_or_else(|e| e.into_inner()));
                Ok(Float64Array::new(batch))
            })?;
        Ok(Completions {
            queue,
            tsfn: Arc::new(tsfn),
            text,
        })
    }

    /// Queues the result of check `id`; wakes the JS thread if the queue was empty.
    pub fn complete(&self, id: u32, result: std::result::Result<polylimit::Decision, String>) {
        let record = match result {
            Ok(d) => record(id, &d),
            Err(message) => return self.text.complete(id, Err(message)),
        };
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let was_empty = queue.is_empty();
            queue.extend_from_slice(&record);
            was_empty
        };
        if was_empty {
            self.tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }
}

type TextTsfn = ThreadsafeFunction<(), (), String, Status, false, true>;

/// Finished `checkRequest` calls of one limiter, handed to JavaScript as one
/// JSON text per wake-up: `[[id, 0, outcome], [id, 1, "error record"], …]`.
#[derive(Clone)]
pub struct RequestCompletions {
    /// The records so far, comma-separated, without the enclosing brackets.
    queue: Arc<Mutex<String>>,
    tsfn: Arc<TextTsfn>,
}

impl RequestCompletions {
    /// `handler(batch: string)` is called on the JS thread (weak, like [`Completions`]).
    pub fn new(handler: Function<'_, String, ()>) -> Result<RequestCompletions> {
        let queue: Arc<Mutex<String>> = Arc::default();
        let drain = queue.clone();
        let tsfn = handler
            .build_threadsafe_function::<()>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(move |_ctx| {
                let body = std::mem::take(&mut *drain.lock().unwrap_or_else(|e| e.into_inner()));
                Ok(format!("[{body}]"))
            })?;
        Ok(RequestCompletions {
            queue,
            tsfn: Arc::new(tsfn),
        })
    }

    /// Queues the outcome (JSON) or error (JSON record) of request `id`.
    pub fn complete(&self, id: u32, result: std::result::Result<String, String>) {
        let record = match result {
            Ok(outcome) => format!("[{id},0,{outcome}]"),
            Err(error) => format!("[{id},1,{}]", serde_json::Value::String(error)),
        };
        let was_empty = {
            let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let was_empty = queue.is_empty();
            if !was_empty {
                queue.push(',');
            }
            queue.push_str(&record);
            was_empty
        };
        if was_empty {
            self.tsfn.call((), ThreadsafeFunctionCallMode::NonBlocking);
        }
    }
}

/// One check handed from the JS thread to the runtime.
pub enum Job {
    /// `limiter.check(key, options)`, answered through [`Completions`].
    Check {
        id: u32,
        key: String,
        options: CheckOptions,
    },
    /// `limiter.checkRequest(request)`, answered through [`RequestCompletions`].
    Request { id: u32, request: RequestInfo },
}

/// Starts the task that runs the limiter's checks and returns its queue.
/// Sending to a task that is already awake costs a few atomics, where a
/// `spawn` per check from the JS thread wakes a runtime thread each time;
/// the task then spawns each check on the runtime, so they run concurrently
/// (and share the multiplexed Redis connection). It ends when the sender is
/// dropped, after the checks already queued.
pub fn dispatcher(limiter: Limiter, completions: Completions) -> mpsc::UnboundedSender<Job> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    napi::bindgen_prelude::spawn(async move {
        while let Some(job) = rx.recv().await {
            tokio::spawn(run(limiter.clone(), completions.clone(), job));
        }
    });
    tx
}

fn panic_error() -> String {
    to_napi(polylimit::Error::Internal("panic in a check".into())).reason
}

async fn run(limiter: Limiter, completions: Completions, job: Job) {
    match job {
        Job::Check { id, key, options } => {
            let result = match AssertUnwindSafe(limiter.check_with(&key, options)).catch_unwind().await {
                Ok(Ok(d)) => Ok(d),
                Ok(Err(e)) => Err(to_napi(e).reason),
                Err(_) => Err(panic_error()),
            };
            completions.complete(id, result);
        }
        Job::Request { id, request } => {
            let result = match AssertUnwindSafe(limiter.check_request(&request)).catch_unwind().await {
                Ok(Ok(outcome)) => Ok(outcome.to_value().to_string()),
                Ok(Err(e)) => Err(to_napi(e).reason),
                Err(_) => Err(panic_error()),
            };
            completions.text.complete(id, result);
        }
    }
}
