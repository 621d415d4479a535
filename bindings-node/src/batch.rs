//! Batched completions for `check` and `checkRequest`: instead of one threadsafe function and
//! one promise settlement per check (napi's `spawn_future`), finished
//! decisions are queued and handed to JavaScript in one call per wake-up, as
//! a `Float64Array` of the core's decision records
//! (`polylimit::wire::decision_record`); request outcomes and every error go
//! through the one outcome channel (`outcome.rs`). `index.js` settles the promises.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::task::Poll;

use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use polylimit::wire::decision_record;
use polylimit::{CheckOptions, Limiter, Outcome, RequestInfo, RouteRule};
use tokio::sync::mpsc;

use napi::bindgen_prelude::{Float64Array, Function};
use napi::Result;

use crate::errors::record as error_record;
use crate::outcome::HttpCompletions;
use crate::queue::Queue;

/// The finished checks of one limiter and the channel of its request outcomes and errors.
#[derive(Clone)]
pub struct Completions {
    /// Decision records (`polylimit::wire::decision_record`), one after another.
    decisions: Queue<Vec<f64>, Float64Array>,
    /// Request outcomes (`checkRequest`, `peekRequest`, the middlewares') and every
    /// error, checks' included (`outcome.rs`).
    pub http: HttpCompletions,
}

impl Completions {
    /// `handler(batch: Float64Array)` is called on the JS thread; a weak
    /// (unref'd) threadsafe function, so it never keeps the process alive.
    pub fn new(handler: Function<'_, Float64Array, ()>, http: HttpCompletions) -> Result<Completions> {
        Ok(Completions {
            decisions: Queue::new(handler, |batch| Ok(Float64Array::new(batch)))?,
            http,
        })
    }

    /// Wakes the JS thread (once) if results were queued since it last took them. The
    /// dispatcher calls this after each round of polls, so the checks that finished together
    /// (one read of Redis's replies) reach JavaScript in one call, where waking it at the
    /// first result let it run while the rest were still being queued (more, smaller batches).
    pub fn flush(&self) {
        self.decisions.flush();
        self.http.flush();
    }

    /// Queues the result of check `id`; `flush` wakes the JS thread.
    pub fn complete(&self, id: u32, result: std::result::Result<polylimit::Decision, serde_json::Value>) {
        match result {
            Ok(d) => {
                let record = decision_record(id, &d);
                self.decisions.push(|batch| batch.extend_from_slice(&record));
            }
            Err(error) => self.http.complete(id, Err(&error)),
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
    /// The `limiter.check(key)` calls (no options) of one JavaScript turn,
    /// handed over in one call: check `ids[i]` of `keys[i]`, each answered
    /// like `Check`.
    CheckMany { ids: Vec<u32>, keys: Vec<String> },
    /// `limiter.checkRequest(request)` or a middleware's request, answered through
    /// [`HttpCompletions`].
    Request { id: u32, request: RequestInfo },
    /// `limiter.peek(key, options)`: a check that charges nothing, answered like `Check`.
    Peek {
        id: u32,
        key: String,
        options: CheckOptions,
    },
    /// `limiter.peekRequest(request)`: answered like `Request`, nothing charged.
    PeekRequest { id: u32, request: RequestInfo },
    /// A route middleware's request, decided by one [`RouteRule`] of the
    /// limiter (`Limiter::check_route`), answered like `Request`. Shared, so
    /// a request costs no copy of the rule.
    Route {
        id: u32,
        request: RequestInfo,
        rule: Arc<RouteRule>,
    },
}

/// Starts the task that runs the limiter's checks and returns its queue.
/// Sending to a task that is already awake costs a few atomics, where a
/// `spawn` per check from the JS thread wakes a runtime thread each time.
/// The task polls every check itself (a `FuturesUnordered`), so the checks
/// still run concurrently on the multiplexed Redis connection, and the
/// commands of all the checks that arrived together are queued on that
/// connection before its writer runs: one write to the socket for the
/// batch. A `spawn` per check let the writer run (tokio's LIFO slot) after
/// each check, one `writev` per command, and Redis one `read` per command.
/// It ends when the sender is dropped, after the checks already queued.
pub fn dispatcher(limiter: Limiter, completions: Completions) -> mpsc::UnboundedSender<Job> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
    napi::bindgen_prelude::spawn(async move {
        let mut running = FuturesUnordered::new();
        let mut open = true;
        std::future::poll_fn(|cx| {
            while open {
                match rx.poll_recv(cx) {
                    Poll::Ready(Some(Job::CheckMany { ids, keys })) => {
                        for (id, key) in ids.into_iter().zip(keys) {
                            let options = CheckOptions::default();
                            running.push(run(
                                limiter.clone(),
                                completions.clone(),
                                Job::Check { id, key, options },
                            ));
                        }
                    }
                    Poll::Ready(Some(job)) => running.push(run(limiter.clone(), completions.clone(), job)),
                    Poll::Ready(None) => open = false,
                    Poll::Pending => break,
                }
            }
            // Ready(None) once empty; Pending (and woken again) when a
            // check waits or after a round of polls.
            while let Poll::Ready(Some(())) = running.poll_next_unpin(cx) {}
            completions.flush();
            if open || !running.is_empty() {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await
    });
    tx
}

fn panic_error() -> serde_json::Value {
    error_record(&polylimit::Error::Internal("panic in a check".into()))
}

async fn run(limiter: Limiter, completions: Completions, job: Job) {
    match job {
        // Expanded by the dispatcher.
        Job::CheckMany { .. } => {}
        Job::Check { id, key, options } => {
            let result = match AssertUnwindSafe(limiter.check_with(&key, options)).catch_unwind().await {
                Ok(Ok(d)) => Ok(d),
                Ok(Err(e)) => Err(error_record(&e)),
                Err(_) => Err(panic_error()),
            };
            completions.complete(id, result);
        }
        Job::Request { id, request } => {
            let result = AssertUnwindSafe(limiter.check_request(&request)).catch_unwind().await;
            complete_request(&completions, id, result);
        }
        Job::Peek { id, key, options } => {
            let result = match AssertUnwindSafe(limiter.peek_with(&key, options)).catch_unwind().await {
                Ok(Ok(d)) => Ok(d),
                Ok(Err(e)) => Err(error_record(&e)),
                Err(_) => Err(panic_error()),
            };
            completions.complete(id, result);
        }
        Job::PeekRequest { id, request } => {
            let result = AssertUnwindSafe(limiter.peek_request(&request)).catch_unwind().await;
            complete_request(&completions, id, result);
        }
        Job::Route { id, request, rule } => {
            let result = AssertUnwindSafe(limiter.check_route(&request, &rule))
                .catch_unwind()
                .await;
            complete_request(&completions, id, result);
        }
    }
}

/// Hands a request's outcome, error or panic to the outcome channel.
fn complete_request(completions: &Completions, id: u32, result: std::thread::Result<polylimit::Result<Outcome>>) {
    let result = match result {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(e)) => Err(error_record(&e)),
        Err(_) => Err(panic_error()),
    };
    completions.http.complete(id, result.as_ref());
}
