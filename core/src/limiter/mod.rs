//! The public [`Limiter`], the front door of the core: every binding and
//! every Rust caller goes through it. It holds the engine (policies on a
//! guarded store) and the HTTP side (rules, completion tokens), and hands
//! each call to the layer whose job it is; its methods are grouped by job
//! in the modules below. A reload ([`Limiter::reload`], `reload` module)
//! swaps both at once; each call works on the pair it started with.

mod admin;
mod checks;
mod completion;
mod concurrency;
mod config;
mod reload;
mod requests;
mod sans_io;
mod sans_io_request;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::engine::{Engine, LimiterConfig};
use crate::error::Result;
use crate::http::rules::HttpRules;
use crate::http::Requests;
use crate::policy::Policy;
pub use concurrency::LeaseGuard;
pub use sans_io::{sans_io_reply_len, SansIoCall};

/// A rate limiter: policies on a store guarded by a timeout, a circuit
/// breaker and each policy's fallback, and, when built from a rules file,
/// the rules that decide HTTP requests. Cheap to clone; clones share state
/// (and a reload: every clone sees it).
#[derive(Clone)]
pub struct Limiter {
    shared: Arc<Shared>,
}

/// The engine and the HTTP rules in force: one snapshot, swapped whole.
#[derive(Clone)]
struct Live {
    engine: Engine,
    /// The rules of a rules file and the completion tokens given out.
    http: Requests,
}

struct Shared {
    live: RwLock<Live>,
    /// What the limiter was built from, read again by a reload.
    source: Mutex<reload::Source>,
    /// One reload at a time.
    reloading: Mutex<()>,
    /// How many reloads have swapped the rules in ([`Limiter::rules_generation`]).
    generation: AtomicU64,
}

impl Limiter {
    /// Builds a limiter. Fails only on bad configuration; a Redis store is
    /// connected lazily, so an unreachable Redis is handled by the fallback.
    pub fn new(config: LimiterConfig) -> Result<Limiter> {
        let source = reload::Source::Config(config.clone());
        Ok(Limiter::from_parts(Engine::new(config)?, None, source))
    }

    /// A limiter of `engine` whose requests are decided by `rules` (built
    /// against the engine's policies: rule targets are indices into them).
    fn from_parts(engine: Engine, rules: Option<HttpRules>, source: reload::Source) -> Limiter {
        Limiter {
            shared: Arc::new(Shared {
                live: RwLock::new(Live {
                    engine,
                    http: Requests::new(rules),
                }),
                source: Mutex::new(source),
                reloading: Mutex::new(()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The engine and rules in force now: a call decides on them to the end.
    #[inline]
    fn live(&self) -> Live {
        self.shared.live.read().clone()
    }

    /// The engine in force now.
    #[inline]
    fn engine(&self) -> Engine {
        self.shared.live.read().engine.clone()
    }

    /// The policies in force, in order.
    pub fn policies(&self) -> std::vec::IntoIter<Policy> {
        self.engine().policies().cloned().collect::<Vec<_>>().into_iter()
    }

    /// The policy in force named `name`, if there is one (cloning only it).
    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.shared
            .live
            .read()
            .engine
            .policies()
            .find(|p| p.name() == name)
            .cloned()
    }

    /// Closes the limiter: later checks fail with
    /// [`Error::Closed`](crate::Error::Closed), and a `watch` stops. Idempotent.
    pub fn close(&self) {
        self.engine().close()
    }

    /// Whether [`Limiter::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.engine().is_closed()
    }
}
