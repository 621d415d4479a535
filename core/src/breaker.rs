//! A circuit breaker: open after `threshold` consecutive failures, let
//! `half_open_max` probes through after `cooldown`, close when they all succeed.
//! Guards every store, and is offered to users for their own downstream calls.

use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::duration::{parse_duration_ms, MAX_DURATION_MS};
use crate::error::Error;
use crate::options::Naming;

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

/// A breaker's settings as a language gives them, before any check: `None`
/// for "not given" (the core's default, [`BreakerConfig::default`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BreakerInput {
    /// `threshold` in every language.
    pub threshold: Option<f64>,
    /// `cooldown` in every language.
    pub cooldown: Option<DurationInput>,
    /// `half_open_max` / `halfOpenMax` (JavaScript and Go).
    pub half_open_max: Option<f64>,
}

/// A duration as a language gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum DurationInput {
    /// A number in the naming's unit (Python: seconds, JavaScript: ms, Go:
    /// `time.Duration` ns).
    Number(f64),
    /// Text such as `"30s"` or `"250ms"`.
    Text(String),
}

impl BreakerConfig {
    /// The settings from a language's values, each checked under the
    /// language's name, the error showing the value as given: the counts
    /// are whole numbers from 1, the cooldown is above zero (and at most
    /// [`MAX_DURATION_MS`]). Every binding's `CircuitBreaker` builds here.
    pub fn from_naming(naming: Naming, input: &BreakerInput) -> crate::error::Result<BreakerConfig> {
        let (half_open_name, ms_per_unit) = match naming {
            Naming::Snake => ("half_open_max", 1000.0),
            Naming::Camel => ("halfOpenMax", 1.0),
            Naming::Go => ("halfOpenMax", 1e-6),
        };
        let default = BreakerConfig::default();
        let count = |name: &str, v: Option<f64>, def: u32| -> crate::error::Result<u32> {
            match v {
                None => Ok(def),
                Some(n) if n.fract() == 0.0 && (1.0..=u32::MAX as f64).contains(&n) => Ok(n as u32),
                Some(n) => Err(Error::config(name, n, "is not a positive integer")),
            }
        };
        let positive = |ms: f64| ms > 0.0 && ms <= MAX_DURATION_MS as f64;
        let cooldown = match &input.cooldown {
            None => default.cooldown,
            Some(DurationInput::Number(n)) if positive(n * ms_per_unit) => {
                Duration::from_secs_f64(n * ms_per_unit / 1000.0)
            }
            Some(DurationInput::Number(n)) => return Err(Error::config("cooldown", n, "is not a positive duration")),
            Some(DurationInput::Text(text)) => match parse_duration_ms(text) {
                Some(ms) if ms > 0 => Duration::from_millis(ms),
                Some(_) => {
                    return Err(Error::config(
                        "cooldown",
                        format!("{text:?}"),
                        "is not a positive duration",
                    ))
                }
                None => return Err(Error::config("cooldown", format!("{text:?}"), "is not a duration")),
            },
        };
        Ok(BreakerConfig {
            threshold: count("threshold", input.threshold, default.threshold)?,
            cooldown,
            half_open_max: count(half_open_name, input.half_open_max, default.half_open_max)?,
        })
    }
}

/// Where a breaker reads the time. [`SystemClock`] (the process's monotonic
/// clock) unless one is given to [`CircuitBreaker::with_clock`]; tests give a
/// [`ManualClock`] and move it instead of sleeping through a cooldown.
pub trait Clock: Send + Sync + Debug {
    /// The current time.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock, [`Instant::now`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that stands still until [`ManualClock::advance`] moves it. Clones
/// share the time, so a test keeps one and gives the other to a breaker.
#[derive(Debug, Clone)]
pub struct ManualClock {
    start: Instant,
    /// Nanoseconds since `start`.
    elapsed: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading the current time, and standing still there.
    pub fn new() -> ManualClock {
        ManualClock {
            start: Instant::now(),
            elapsed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .elapsed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_add(nanos)));
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + Duration::from_nanos(self.elapsed.load(Ordering::Acquire))
    }
}

#[derive(Debug)]
enum Phase {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { in_flight: u32, successes: u32 },
}

#[derive(Debug)]
struct State {
    phase: Phase,
    /// Counts half-open rounds, so a probe from an earlier round reports nothing.
    round: u64,
    /// Read under the lock, so every transition sees one time.
    clock: Arc<dyn Clock>,
}

#[derive(Debug)]
struct Shared {
    config: BreakerConfig,
    state: Mutex<State>,
}

/// Permission to make one call. Report how it went with [`Permit::success`]
/// or [`Permit::failure`] (or the breaker's methods of the same names); a
/// permit dropped without a report (its caller was cancelled, or panicked)
/// counts as a failure, so an abandoned probe never holds a probe slot.
#[derive(Debug)]
#[must_use = "a permit dropped without a report counts as a failure"]
pub struct Permit {
    shared: Arc<Shared>,
    /// The half-open round it probes in; `None`: not a probe.
    probe: Option<u64>,
    reported: bool,
}

impl Permit {
    /// Reports a successful call.
    pub fn success(mut self) {
        self.report(true);
    }

    /// Reports a failed call.
    pub fn failure(mut self) {
        self.report(false);
    }

    fn report(&mut self, ok: bool) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        self.shared.report(self.probe, ok);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.report(false);
    }
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
    shared: Arc<Shared>,
}

impl Shared {
    fn acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut state = self.state.lock();
        let now = state.clock.now();
        let probe = match &mut state.phase {
            Phase::Closed { .. } => None,
            Phase::Open { until } => {
                if now < *until {
                    return None;
                }
                state.round += 1;
                state.phase = Phase::HalfOpen {
                    in_flight: 1,
                    successes: 0,
                };
                Some(state.round)
            }
            Phase::HalfOpen { in_flight, successes } => {
                if *in_flight + *successes >= self.config.half_open_max {
                    return None;
                }
                *in_flight += 1;
                Some(state.round)
            }
        };
        Some(Permit {
            shared: self.clone(),
            probe,
            reported: false,
        })
    }

    fn report(&self, probe: Option<u64>, ok: bool) {
        let mut state = self.state.lock();
        let now = state.clock.now();
        let round = state.round;
        let open = Phase::Open {
            until: now + self.config.cooldown,
        };
        match &mut state.phase {
            Phase::Closed { failures } if ok => *failures = 0,
            Phase::Closed { failures } => {
                *failures += 1;
                if *failures >= self.config.threshold {
                    state.phase = open;
                }
            }
            Phase::HalfOpen { in_flight, successes } if probe == Some(round) => {
                if ok {
                    *in_flight = in_flight.saturating_sub(1);
                    *successes += 1;
                    if *successes >= self.config.half_open_max {
                        state.phase = Phase::Closed { failures: 0 };
                    }
                } else {
                    state.phase = open;
                }
            }
            // A call started before the breaker opened, or a probe of an
            // earlier round: it says nothing about now.
            _ => {}
        }
    }
}

impl CircuitBreaker {
    /// A closed breaker on the process's clock.
    pub fn new(config: BreakerConfig) -> CircuitBreaker {
        CircuitBreaker::with_clock(config, Arc::new(SystemClock))
    }

    /// A closed breaker that reads the time from `clock`.
    pub fn with_clock(config: BreakerConfig, clock: Arc<dyn Clock>) -> CircuitBreaker {
        CircuitBreaker {
            shared: Arc::new(Shared {
                config: BreakerConfig {
                    threshold: config.threshold.max(1),
                    half_open_max: config.half_open_max.max(1),
                    ..config
                },
                state: Mutex::new(State {
                    phase: Phase::Closed { failures: 0 },
                    round: 0,
                    clock,
                }),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> BreakerConfig {
        self.shared.config
    }

    /// The time on the breaker's clock (the limiter's other process-side
    /// timers read it too, so a test moves them all with one clock).
    pub(crate) fn now(&self) -> Instant {
        self.shared.state.lock().clock.now()
    }

    /// Reads the time from `clock` from now on (the limiter's hook for
    /// tests; an open breaker's cooldown ends at the same instant of it).
    pub(crate) fn set_clock(&self, clock: Arc<dyn Clock>) {
        self.shared.state.lock().clock = clock;
    }

    /// The current state (an open breaker whose cooldown ended reads `HalfOpen`).
    pub fn state(&self) -> BreakerState {
        let state = self.shared.state.lock();
        match &state.phase {
            Phase::Closed { .. } => BreakerState::Closed,
            Phase::Open { until } if state.clock.now() < *until => BreakerState::Open,
            Phase::Open { .. } | Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Time until an open breaker lets a probe through; zero otherwise.
    pub fn retry_in(&self) -> Duration {
        let state = self.shared.state.lock();
        match &state.phase {
            Phase::Open { until } => until.saturating_duration_since(state.clock.now()),
            _ => Duration::ZERO,
        }
    }

    /// Asks to make a call. `None`: the breaker is open, do not call.
    pub fn acquire(&self) -> Option<Permit> {
        self.shared.acquire()
    }

    /// Reports a successful call (the same as [`Permit::success`]; a permit
    /// always reports to the breaker that issued it).
    pub fn success(&self, permit: Permit) {
        permit.success();
    }

    /// Reports a failed call (the same as [`Permit::failure`]).
    pub fn failure(&self, permit: Permit) {
        permit.failure();
    }

    /// Runs `call` through the breaker; on refusal or failure returns
    /// `fallback(why)` instead. If the returned future is dropped while
    /// `call` runs, the call counts as failed.
    pub async fn call<T, E, Fut>(&self, call: impl FnOnce() -> Fut, fallback: impl FnOnce(CallError<E>) -> T) -> T
    where
        Fut: Future<Output = Result<T, E>>,
    {
        let Some(permit) = self.acquire() else {
            return fallback(CallError::Open);
        };
        match call().await {
            Ok(value) => {
                permit.success();
                value
            }
            Err(e) => {
                permit.failure();
                fallback(CallError::Failed(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cooldown_ms: u64) -> BreakerConfig {
        BreakerConfig {
            threshold: 5,
            cooldown: Duration::from_millis(cooldown_ms),
            half_open_max: 3,
        }
    }

    /// A breaker on the process's clock.
    fn breaker(cooldown_ms: u64) -> CircuitBreaker {
        CircuitBreaker::new(config(cooldown_ms))
    }

    /// A breaker on a clock the test moves, and that clock.
    fn manual(cooldown_ms: u64) -> (CircuitBreaker, ManualClock) {
        let clock = ManualClock::new();
        (
            CircuitBreaker::with_clock(config(cooldown_ms), Arc::new(clock.clone())),
            clock,
        )
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Opens `b` with `threshold` failures.
    fn open(b: &CircuitBreaker) {
        for _ in 0..b.config().threshold {
            b.acquire().unwrap().failure();
        }
        assert_eq!(b.state(), BreakerState::Open);
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
            p.failure();
        }
        assert_eq!(b.state(), BreakerState::Closed, "a success resets the count");
        let p = b.acquire().unwrap();
        b.failure(p);
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.acquire().is_none());
        assert!(b.retry_in() > Duration::from_secs(9));
    }

    #[test]
    fn the_default_clock_is_the_process_clock() {
        // A 1 ms cooldown ends on the real clock without anyone moving it.
        let b = breaker(1);
        open(&b);
        let opened = Instant::now();
        while b.state() == BreakerState::Open {
            assert!(opened.elapsed() < Duration::from_secs(5), "a 1 ms cooldown never ended");
            std::thread::yield_now();
        }
        assert!(opened.elapsed() < Duration::from_secs(5));
        assert!(b.acquire().is_some(), "the process clock ended the cooldown");
    }

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        std::thread::sleep(ms(2));
        assert_eq!(clock.now(), t0, "it stands still");
        let shared = clock.clone();
        shared.advance(ms(30));
        assert_eq!(clock.now(), t0 + ms(30), "clones share the time");
        clock.advance(Duration::MAX);
        assert!(clock.now() > t0 + ms(30), "a huge step saturates");
    }

    #[test]
    fn the_cooldown_runs_on_the_breakers_clock() {
        let (b, clock) = manual(20);
        open(&b);
        assert_eq!(b.retry_in(), ms(20));
        clock.advance(ms(19));
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.retry_in(), ms(1));
        assert!(b.acquire().is_none(), "open until the cooldown ends");
        clock.advance(ms(1));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(b.retry_in(), Duration::ZERO);
        assert!(b.acquire().is_some(), "a probe once it ends");
    }

    #[test]
    fn half_open_probes_close_or_reopen() {
        let (b, clock) = manual(20);
        open(&b);
        clock.advance(ms(30));
        assert_eq!(b.state(), BreakerState::HalfOpen);
        let mut probes: Vec<_> = (0..3).map(|_| b.acquire().unwrap()).collect();
        assert!(b.acquire().is_none(), "at most half_open_max probes");
        probes.pop().unwrap().success();
        probes.pop().unwrap().success();
        assert_eq!(b.state(), BreakerState::HalfOpen);
        probes.pop().unwrap().success();
        assert_eq!(b.state(), BreakerState::Closed);

        open(&b);
        clock.advance(ms(30));
        b.acquire().unwrap().failure();
        assert_eq!(b.state(), BreakerState::Open, "a failed probe reopens");
        assert_eq!(b.retry_in(), ms(20), "for a whole cooldown from the failure");
    }

    #[test]
    fn dropped_probes_count_as_failures_and_free_their_slots() {
        let (b, clock) = manual(20);
        open(&b);
        clock.advance(ms(30));
        let probes: Vec<_> = (0..3).map(|_| b.acquire().unwrap()).collect();
        // Their callers were cancelled: the permits are dropped unreported.
        drop(probes);
        assert_eq!(b.state(), BreakerState::Open, "a dropped probe is a failure");
        clock.advance(ms(30));
        let probe = b.acquire().expect("the breaker probes again after the cooldown");
        probe.success();
        for _ in 0..2 {
            b.acquire().unwrap().success();
        }
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_dropped_permit_reports_failure_once() {
        let b = breaker(10_000);
        for _ in 0..4 {
            drop(b.acquire().unwrap());
        }
        assert_eq!(b.state(), BreakerState::Closed);
        b.acquire().unwrap().success();
        for _ in 0..5 {
            drop(b.acquire().unwrap());
        }
        assert_eq!(b.state(), BreakerState::Open, "five dropped permits are five failures");
    }

    #[test]
    fn a_probe_of_an_earlier_round_reports_nothing() {
        let (b, clock) = manual(20);
        open(&b);
        clock.advance(ms(30));
        let late = b.acquire().unwrap();
        b.acquire().unwrap().failure();
        clock.advance(ms(30));
        let probes: Vec<_> = (0..3).map(|_| b.acquire().unwrap()).collect();
        // The late probe's success belongs to the first round: it frees no slot here.
        late.success();
        assert!(b.acquire().is_none());
        for p in probes {
            p.success();
        }
        assert_eq!(b.state(), BreakerState::Closed);
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

    #[tokio::test]
    async fn a_cancelled_call_counts_as_failed() {
        let b = CircuitBreaker::new(BreakerConfig {
            threshold: 1,
            cooldown: Duration::from_secs(30),
            half_open_max: 1,
        });
        let never = b.call(std::future::pending::<Result<u32, ()>>, |_| 0);
        assert!(tokio::time::timeout(ms(1), never).await.is_err());
        assert_eq!(b.state(), BreakerState::Open);
    }
}
