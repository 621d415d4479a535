//! A circuit breaker: open after `threshold` consecutive failures, let
//! `half_open_max` probes through after `cooldown`, close when they all succeed.
//! Guards every store, and is offered to users for their own downstream calls.

use std::future::Future;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The breaker's state, as exported in metrics (`polylimit_breaker_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed = 0,
    /// Calls are refused until the cooldown ends.
    Open = 1,
    /// A few probe calls are let through.
    HalfOpen = 2,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Breaker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub threshold: u32,
    /// How long it stays open before probing.
    pub cooldown: Duration,
    /// Successful probes that close it again (also the most probes in flight).
    pub half_open_max: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            threshold: 5,
            cooldown: Duration::from_secs(30),
            half_open_max: 3,
        }
    }
}

#[derive(Debug)]
enum Phase {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { in_flight: u32, successes: u32 },
}

/// Permission to make one call; report how it went with
/// [`CircuitBreaker::success`] or [`CircuitBreaker::failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Permit {
    probe: bool,
}

/// Why [`CircuitBreaker::call`] used the fallback.
#[derive(Debug)]
pub enum CallError<E> {
    /// The breaker is open: the call was not made.
    Open,
    /// The call was made and failed.
    Failed(E),
}

/// A thread-safe circuit breaker.
#[derive(Debug)]
pub struct CircuitBreaker {
    config: BreakerConfig,
    phase: Mutex<Phase>,
}

impl CircuitBreaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> CircuitBreaker {
        CircuitBreaker {
            config: BreakerConfig {
                threshold: config.threshold.max(1),
                half_open_max: config.half_open_max.max(1),
                ..config
            },
            phase: Mutex::new(Phase::Closed { failures: 0 }),
        }
    }

    /// The settings.
    pub fn config(&self) -> BreakerConfig {
        self.config
    }

    /// The current state (an open breaker whose cooldown ended reads `HalfOpen`).
    pub fn state(&self) -> BreakerState {
        match &*self.phase.lock() {
            Phase::Closed { .. } => BreakerState::Closed,
            Phase::Open { until } if Instant::now() < *until => BreakerState::Open,
            Phase::Open { .. } | Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Time until an open breaker lets a probe through; zero otherwise.
    pub fn retry_in(&self) -> Duration {
        match &*self.phase.lock() {
            Phase::Open { until } => until.saturating_duration_since(Instant::now()),
            _ => Duration::ZERO,
        }
    }

    /// Asks to make a call. `None`: the breaker is open, do not call.
    pub fn acquire(&self) -> Option<Permit> {
        let mut phase = self.phase.lock();
        match &mut *phase {
            Phase::Closed { .. } => Some(Permit { probe: false }),
            Phase::Open { until } => {
                if Instant::now() < *until {
                    return None;
                }
                *phase = Phase::HalfOpen {
                    in_flight: 1,
                    successes: 0,
                };
                Some(Permit { probe: true })
            }
            Phase::HalfOpen { in_flight, successes } => {
                if *in_flight + *successes >= self.config.half_open_max {
                    return None;
                }
                *in_flight += 1;
                Some(Permit { probe: true })
            }
        }
    }

    /// Reports a successful call.
    pub fn success(&self, permit: Permit) {
        let mut phase = self.phase.lock();
        match &mut *phase {
            Phase::Closed { failures } => *failures = 0,
            Phase::HalfOpen { in_flight, successes } if permit.probe => {
                *in_flight = in_flight.saturating_sub(1);
                *successes += 1;
                if *successes >= self.config.half_open_max {
                    *phase = Phase::Closed { failures: 0 };
                }
            }
            // A call started before the breaker opened: it says nothing about now.
            _ => {}
        }
    }

    /// Reports a failed call.
    pub fn failure(&self, permit: Permit) {
        let mut phase = self.phase.lock();
        let open = Phase::Open {
            until: Instant::now() + self.config.cooldown,
        };
        match &mut *phase {
            Phase::Closed { failures } => {
                *failures += 1;
                if *failures >= self.config.threshold {
                    *phase = open;
                }
            }
            Phase::HalfOpen { .. } if permit.probe => *phase = open,
            _ => {}
        }
    }

    /// Runs `call` through the breaker; on refusal or failure returns
    /// `fallback(why)` instead.
    pub async fn call<T, E, Fut>(&self, call: impl FnOnce() -> Fut, fallback: impl FnOnce(CallError<E>) -> T) -> T
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let Some(permit) = self.acquire() else {
            return fallback(CallError::Open);
        };
        match call().await {
            Ok(value) => {
                self.success(permit);
                value
            }
            Err(e) => {
                self.failure(permit);
                fallback(CallError::Failed(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(cooldown_ms: u64) -> CircuitBreaker {
        CircuitBreaker::new(BreakerConfig {
            threshold: 5,
            cooldown: Duration::from_millis(cooldown_ms),
            half_open_max: 3,
        })
    }

    #[test]
    fn opens_after_threshold_consecutive_failures() {
        let b = breaker(10_000);
        for _ in 0..4 {
            let p = b.acquire().unwrap();
            b.failure(p);
        }
        let p = b.acquire().unwrap();
        b.success(p);
        for _ in 0..4 {
            let p = b.acquire().unwrap();
            b.failure(p);
        }
        assert_eq!(b.state(), BreakerState::Closed, "a success resets the count");
        let p = b.acquire().unwrap();
        b.failure(p);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.acquire().is_none());
        assert!(b.retry_in() > Duration::from_secs(9));
    }

    #[test]
    fn half_open_probes_close_or_reopen() {
        let b = breaker(20);
        for _ in 0..5 {
            let p = b.acquire().unwrap();
            b.failure(p);
        }
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let probes: Vec<_> = (0..3).map(|_| b.acquire().unwrap()).collect();
        assert!(b.acquire().is_none(), "at most half_open_max probes");
        b.success(probes[0]);
        b.success(probes[1]);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        b.success(probes[2]);
        assert_eq!(b.state(), BreakerState::Closed);

        for _ in 0..5 {
            let p = b.acquire().unwrap();
            b.failure(p);
        }
        std::thread::sleep(Duration::from_millis(30));
        let probe = b.acquire().unwrap();
        b.failure(probe);
        assert_eq!(b.state(), BreakerState::Open, "a failed probe reopens");
    }

    #[tokio::test]
    async fn call_uses_the_fallback() {
        let b = breaker(10_000);
        let ok: u32 = b.call(|| async { Ok::<_, &str>(1) }, |_| 0).await;
        assert_eq!(ok, 1);
        for _ in 0..5 {
            let v = b
                .call(
                    || async { Err::<u32, _>("down") },
                    |e| if matches!(e, CallError::Failed("down")) { 7 } else { 8 },
                )
                .await;
            assert_eq!(v, 7);
        }
        let v = b
            .call(
                || async { Ok::<u32, &str>(1) },
                |e| if matches!(e, CallError::Open) { 9 } else { 0 },
            )
            .await;
        assert_eq!(v, 9, "open: the call is not made");
    }
}
