//! The algorithms as pure state transitions: no I/O, no clock.
//!
//! Every bucket algorithm works in *scaled time*: one unit is `1/count` ms, so
//! the emission interval `T = period/count` is exactly `period` units and all
//! arithmetic stays in integers. `core/lua/*.lua` mirrors each file here line
//! for line; the conformance vectors prove they agree.

use crate::policy::{Algorithm, LeakyMode, Policy, Refill};

pub(crate) mod adaptive;
pub(crate) mod concurrency;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod leaky_bucket;
pub(crate) mod penalty;
pub(crate) mod refund;
pub(crate) mod sliding_window_counter;
pub(crate) mod sliding_window_log;
pub(crate) mod token_bucket;

/// The variant of an algorithm a policy runs; also its code in the Lua script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    TokenBucket = 1,
    TokenBucketInterval = 2,
    Gcra = 3,
    LeakyPolice = 4,
    LeakyShape = 5,
    FixedWindow = 6,
    SlidingWindowLog = 7,
    SlidingWindowCounter = 8,
    Concurrency = 9,
}

/// A policy's numbers, converted once to the signed integers the algorithms use.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub kind: Kind,
    /// Requests per period.
    pub count: i64,
    /// Period in ms; also `T` in scaled units.
    pub period: i64,
    /// Bucket capacity or limit per window.
    pub burst: i64,
    /// Shape mode: longest wait, in scaled units. Zero for other kinds.
    pub max_delay: i64,
    /// Adaptive limits per key, if the policy opts in.
    pub adaptive: Option<adaptive::AdaptiveParams>,
}

impl Params {
    pub fn new(policy: &Policy) -> Params {
        let kind = match (policy.algorithm(), policy.refill(), policy.mode()) {
            (Algorithm::TokenBucket, Refill::Continuous, _) => Kind::TokenBucket,
            (Algorithm::TokenBucket, Refill::Interval, _) => Kind::TokenBucketInterval,
            (Algorithm::Gcra, _, _) => Kind::Gcra,
            (Algorithm::LeakyBucket, _, LeakyMode::Police) => Kind::LeakyPolice,
            (Algorithm::LeakyBucket, _, LeakyMode::Shape) => Kind::LeakyShape,
            (Algorithm::FixedWindow, _, _) => Kind::FixedWindow,
            (Algorithm::SlidingWindowLog, _, _) => Kind::SlidingWindowLog,
            (Algorithm::SlidingWindowCounter, _, _) => Kind::SlidingWindowCounter,
            (Algorithm::Concurrency, _, _) => Kind::Concurrency,
        };
        // Policy validation bounds all of these by 2^50.
        Params {
            kind,
            count: policy.count() as i64,
            period: policy.period_ms() as i64,
            burst: policy.burst() as i64,
            max_delay: if kind == Kind::LeakyShape {
                policy.max_delay_scaled() as i64
            } else {
                0
            },
            adaptive: policy.adaptive().map(adaptive::AdaptiveParams::new),
        }
    }

    /// Bucket capacity in scaled units.
    pub fn capacity(&self) -> i64 {
        self.burst * self.period
    }

    /// How many store keys one decision of this kind touches.
    pub fn key_count(&self) -> usize {
        if self.kind == Kind::SlidingWindowLog {
            2
        } else {
            1
        }
    }
}

/// What one algorithm decided for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// The request may proceed.
    pub allowed: bool,
    /// Whole requests still available right after this decision.
    pub remaining: u64,
    /// Time until the key is back to its idle state.
    pub reset_after_ms: u64,
    /// When denied and the cost can ever fit: time until it would be allowed.
    pub retry_after_ms: Option<u64>,
    /// Shape mode: how long to hold the request.
    pub delay_ms: u64,
    /// Denied by a penalty block (serving one, or starting one now).
    pub penalized: bool,
    /// Decided under a per-key override (or a policy-wide limit, see
    /// `limited`): its count, period (ms) and burst.
    pub overridden: Option<[u64; 3]>,
    /// `overridden` holds a policy-wide limit's numbers, not a per-key override's.
    pub limited: bool,
    /// What the adaptive layer saw (policies with `adaptive` only).
    pub adaptive: Option<adaptive::AdaptiveReport>,
}

/// The state a store keeps for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// Up to three integers; their meaning belongs to the algorithm.
    Cells([i64; 3]),
    /// The sliding log.
    Log(sliding_window_log::Log),
    /// Concurrency: the leases in flight.
    Leases(concurrency::Leases),
    /// A key's penalty record.
    Penalty([i64; 5]),
    /// A key's adaptive record.
    Adaptive([i64; 7]),
}

/// The change an allowed decision makes to the state. Its time to live is the
/// verdict's `reset_after_ms`: once it has passed, the state is equivalent to
/// a new key, so a store may drop it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Update {
    Cells([i64; 3]),
    LogAppend {
        cutoff: i64,
        at: i64,
        cost: i64,
    },
    Penalty([i64; 5]),
    Adaptive([i64; 7]),
    /// A lease taken at `at` (the leases ended by then go); its `id` is
    /// set by [`Update::with_lease`] before the update is stored.
    Acquire {
        id: Box<str>,
        at: i64,
        expires: i64,
        slots: i64,
    },
}

impl Update {
    /// Applies the update to a stored state (or creates it).
    pub fn apply(self, state: Option<State>) -> State {
        match self {
            Update::Cells(cells) => State::Cells(cells),
            Update::Penalty(cells) => State::Penalty(cells),
            Update::Adaptive(cells) => State::Adaptive(cells),
            Update::LogAppend { cutoff, at, cost } => {
                let mut log = match state {
                    Some(State::Log(log)) => log,
                    _ => sliding_window_log::Log::default(),
                };
                log.trim(cutoff);
                log.push(at, cost);
                State::Log(log)
            }
            Update::Acquire { id, at, expires, slots } => {
                let mut leases = match state {
                    Some(State::Leases(leases)) => leases,
                    _ => concurrency::Leases::default(),
                };
                leases.trim(at);
                leases.push(id, expires, slots);
                State::Leases(leases)
            }
        }
    }

    /// Names the lease an [`Update::Acquire`] takes (the caller generates
    /// lease ids); other updates are returned as they are.
    pub fn with_lease(self, lease: Option<&str>) -> Update {
        match (self, lease) {
            (Update::Acquire { at, expires, slots, .. }, Some(id)) => Update::Acquire {
                id: id.into(),
                at,
                expires,
                slots,
            },
            (update, _) => update,
        }
    }
}

/// Decides one check. `state` is what the store holds for the key (`None`
/// for a new or expired key); `cost` is at least 1. Returns the verdict and,
/// when allowed, the update to store. Denied requests consume nothing.
#[inline]
pub(crate) fn decide(p: &Params, state: Option<&State>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let cells = match state {
        Some(State::Cells(c)) => Some(c),
        _ => None,
    };
    match p.kind {
        Kind::TokenBucket => token_bucket::decide_continuous(p, cells, now, cost),
        Kind::TokenBucketInterval => token_bucket::decide_interval(p, cells, now, cost),
        Kind::Gcra => gcra::decide(p, cells, now, cost),
        Kind::LeakyPolice => leaky_bucket::decide_police(p, cells, now, cost),
        Kind::LeakyShape => leaky_bucket::decide_shape(p, cells, now, cost),
        Kind::FixedWindow => fixed_window::decide(p, cells, now, cost),
        Kind::SlidingWindowCounter => sliding_window_counter::decide(p, cells, now, cost),
        Kind::SlidingWindowLog => {
            let log = match state {
                Some(State::Log(log)) => Some(log),
                _ => None,
            };
            sliding_window_log::decide(p, log, now, cost)
        }
        Kind::Concurrency => {
            let leases = match state {
                Some(State::Leases(leases)) => Some(leases),
                _ => None,
            };
            concurrency::decide(p, leases, now, cost)
        }
    }
}

/// A denial by a penalty block lasting `ms` more.
pub(crate) fn blocked(ms: i64) -> Verdict {
    Verdict {
        allowed: false,
        remaining: 0,
        reset_after_ms: ms as u64,
        retry_after_ms: Some(ms as u64),
        delay_ms: 0,
        penalized: true,
        overridden: None,
        limited: false,
        adaptive: None,
    }
}

impl Verdict {
    /// Marks a denial that started a penalty block of `ms`.
    pub(crate) fn start_block(&mut self, ms: i64) {
        let ms = ms as u64;
        self.remaining = 0;
        self.reset_after_ms = self.reset_after_ms.max(ms);
        self.retry_after_ms = Some(ms);
        self.penalized = true;
    }
}

/// `ceil(a / b)` for `a >= 0`, `b > 0`; negative `a` gives 0.
pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    if a <= 0 {
        0
    } else {
        (a + b - 1) / b
    }
}

/// `ceil(a / b)` for any `a`, `b > 0`.
pub(crate) fn ceil_frac(a: i64, b: i64) -> i64 {
    -(-a).div_euclid(b)
}

/// A verdict for a cost that can never fit: denied, no retry time.
pub(crate) fn never_fits(remaining: i64, reset_after: i64) -> (Verdict, Option<Update>) {
    (
        Verdict {
            allowed: false,
            remaining: remaining.max(0) as u64,
            reset_after_ms: reset_after.max(0) as u64,
            retry_after_ms: None,
            delay_ms: 0,
            penalized: false,
            overridden: None,
            limited: false,
            adaptive: None,
        },
        None,
    )
}

pub(crate) fn verdict(allowed: bool, remaining: i64, reset_after: i64, retry_after: Option<i64>) -> Verdict {
    Verdict {
        allowed,
        remaining: remaining.max(0) as u64,
        reset_after_ms: reset_after.max(0) as u64,
        retry_after_ms: retry_after.map(|r| r.max(0) as u64),
        delay_ms: 0,
        penalized: false,
        overridden: None,
        limited: false,
        adaptive: None,
    }
}
