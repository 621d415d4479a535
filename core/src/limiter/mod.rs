//! The public [`Limiter`], the front door of the core: every binding and
//! every Rust caller goes through it. It holds the engine (policies on a
//! guarded store) and the HTTP side (rules, completion tokens), and hands
//! each call to the layer whose job it is; its methods are grouped by job
//! in the modules below.

mod admin;
mod checks;
mod completion;
mod concurrency;
mod config;
mod requests;

use crate::engine::{Engine, LimiterConfig};
use crate::error::Result;
use crate::http::rules::HttpRules;
use crate::http::Requests;
use crate::policy::Policy;
pub use concurrency::LeaseGuard;

/// A rate limiter: policies on a store guarded by a timeout, a circuit
/// breaker and each policy's fallback, and, when built from a rules file,
/// the rules that decide HTTP requests. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Limiter {
    engine: Engine,
    /// The rules of a rules file and the completion tokens given out.
    http: Requests,
}

impl Limiter {
    /// Builds a limiter. Fails only on bad configuration; a Redis store is
    /// connected lazily, so an unreachable Redis is handled by the fallback.
    pub fn new(config: LimiterConfig) -> Result<Limiter> {
        Ok(Limiter::from_parts(Engine::new(config)?, None))
    }

    /// A limiter of `engine` whose requests are decided by `rules` (built
    /// against the engine's policies: rule targets are indices into them).
    fn from_parts(engine: Engine, rules: Option<HttpRules>) -> Limiter {
        Limiter {
            engine,
            http: Requests::new(rules),
        }
    }

    /// The policies, in order.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.engine.policies()
    }

    /// Closes the limiter: later checks fail with
    /// [`Error::Closed`](crate::Error::Closed). Idempotent.
    pub fn close(&self) {
        self.engine.close()
    }

    /// Whether [`Limiter::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }
}
