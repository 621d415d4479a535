//! An estimate of the Redis server's clock, so a decision's FCALL can send
//! `now_ms` instead of asking `TIME` inside the function (~1.2–2 µs of
//! redis-server CPU per decision); scripts (Redis < 7, Cluster) still ask.
//! The server's clock stays the reference: every instance tracks the same
//! one, so their decisions agree.
//!
//! A sample is a call that read `TIME` itself (its reply carries the
//! server's `now`): the offset is the server's ms minus the local monotonic
//! midpoint of that call's round trip, so the error is at most half a round
//! trip plus the drift until the next sample. The first call on each
//! connection is a sample (a reconnect may reach another server, with its
//! own clock: after a failover, say), and then one call every
//! [`REFRESH_US`]; the others send the estimate. Local time is an
//! `Instant`, so a step of the local wall clock does not move it.

use std::time::Instant;

use parking_lot::Mutex;

/// How often a call samples the server's clock again.
const REFRESH_US: i64 = 1_000_000;

/// How far two clocks may drift apart, in µs per s: NTP slews a clock by
/// 500 ppm at most. An estimate's error bound grows by this much a second.
const DRIFT_US_PER_S: i64 = 500;

/// What a call sends as `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Now {
    /// The estimate of the server's clock, in ms.
    Estimate(i64),
    /// Nothing: the function reads `TIME`, and the reply is a sample to
    /// [`ServerClock::record`].
    Sample,
}

#[derive(Debug, Clone, Copy)]
struct Estimate {
    /// The connection generation the sample was taken on.
    generation: u64,
    /// Server µs minus local µs.
    offset_us: i64,
    /// Half the sample's round trip, µs: the error bound when it was taken.
    error_us: i64,
    /// Local µs when the sample came back.
    taken_us: i64,
}

#[derive(Debug, Default)]
struct State {
    estimate: Option<Estimate>,
    /// Local µs from which the next call samples (one call, not all those
    /// in flight: a call that takes the sample moves it on).
    due_us: i64,
}

/// The estimate, shared by the store's calls.
#[derive(Debug)]
pub(super) struct ServerClock {
    origin: Instant,
    state: Mutex<State>,
}

impl ServerClock {
    pub(super) fn new() -> ServerClock {
        ServerClock {
            origin: Instant::now(),
            state: Mutex::default(),
        }
    }

    /// Local monotonic µs.
    pub(super) fn local_us(&self) -> i64 {
        self.origin.elapsed().as_micros() as i64
    }

    /// The server's ms at local µs `local` by the latest estimate, whatever
    /// connection took it, without scheduling a sample: for a write that
    /// sends its own time (a forced debit), not a decision. `None` before
    /// the first sample.
    pub(super) fn estimate_ms(&self, local: i64) -> Option<i64> {
        let state = self.state.lock();
        state.estimate.as_ref().map(|e| (local + e.offset_us).div_euclid(1000))
    }

    /// What a call on connection `generation` sends at local µs `local`.
    pub(super) fn now(&self, generation: u64, local: i64) -> Now {
        let mut state = self.state.lock();
        let estimate = state.estimate.filter(|e| e.generation == generation);
        match estimate {
            Some(e) if local < state.due_us => Now::Estimate((local + e.offset_us).div_euclid(1000)),
            // Due: this call samples, the others in flight until its reply
            // keep the estimate (if failed, the next sample is due a period later).
            Some(_) => {
                state.due_us = local + REFRESH_US;
                Now::Sample
            }
            None => Now::Sample,
        }
    }

    /// A sample: a call on `generation` sent at local µs `sent` and answered
    /// at `received` read the server's clock as `server_ms`. It replaces the
    /// estimate unless that one's error bound (half its round trip, plus
    /// the drift since) is tighter: a call that queued behind many others,
    /// or stalled, does not move a good estimate by half its wait.
    pub(super) fn record(&self, generation: u64, sent: i64, received: i64, server_ms: i64) {
        // The server's ms is truncated: its clock stood half a ms later on average.
        let offset_us = server_ms * 1000 + 500 - (sent + received) / 2;
        let error_us = (received - sent) / 2;
        let mut state = self.state.lock();
        state.due_us = received + REFRESH_US;
        let tighter = |e: &Estimate| {
            e.generation == generation && e.error_us + (received - e.taken_us) * DRIFT_US_PER_S / 1_000_000 < error_us
        };
        if !state.estimate.as_ref().is_some_and(tighter) {
            state.estimate = Some(Estimate {
                generation,
                offset_us,
                error_us,
                taken_us: received,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Now, ServerClock, REFRESH_US};

    #[test]
    fn the_first_call_on_a_connection_samples_then_calls_send_the_estimate() {
        let clock = ServerClock::new();
        assert_eq!(clock.now(1, 0), Now::Sample);
        // Sent at 1000 µs, answered at 3000: the server read 50_000 ms at the midpoint.
        clock.record(1, 1_000, 3_000, 50_000);
        assert_eq!(clock.now(1, 2_000), Now::Estimate(50_000));
        assert_eq!(clock.now(1, 2_499), Now::Estimate(50_000));
        assert_eq!(clock.now(1, 2_500), Now::Estimate(50_001));
        assert_eq!(clock.now(1, 2_000 + 123_456), Now::Estimate(50_123));
    }

    #[test]
    fn a_slower_sample_replaces_the_estimate_only_once_drift_may_exceed_it() {
        let clock = ServerClock::new();
        clock.record(1, 0, 200, 5_000); // error 100 µs, offset 5_000_400
                                        // A sample a second later with a 10 ms round trip (error 5 ms):
                                        // the first one's bound is 100 µs + 500 µs of drift. Kept.
        clock.record(1, 1_000_000, 1_010_000, 9_999);
        assert_eq!(clock.now(1, 1_010_000), Now::Estimate(6_010));
        // Twenty seconds on, drift may reach 10 ms: the 5 ms one wins.
        clock.record(1, 20_000_000, 20_010_000, 30_000);
        assert_eq!(clock.now(1, 20_010_000), Now::Estimate(30_005));
        // A faster sample always wins.
        clock.record(1, 20_100_000, 20_100_100, 40_000);
        assert_eq!(clock.now(1, 20_100_100), Now::Estimate(40_000));
    }

    #[test]
    fn a_new_connection_samples_again() {
        let clock = ServerClock::new();
        clock.record(1, 0, 0, 7_000);
        assert_eq!(clock.now(1, 10), Now::Estimate(7_000));
        // A reconnect (a failover, say) may reach a server with another clock.
        assert_eq!(clock.now(2, 10), Now::Sample);
        assert_eq!(
            clock.now(2, 20),
            Now::Sample,
            "no estimate for it until a sample comes back"
        );
        clock.record(2, 20, 40, 9_000_000);
        assert_eq!(clock.now(2, 40), Now::Estimate(9_000_000));
        assert_eq!(
            clock.now(1, 40),
            Now::Sample,
            "a sample of another connection is not this one's"
        );
    }

    #[test]
    fn one_call_samples_each_period_the_others_keep_the_estimate() {
        let clock = ServerClock::new();
        clock.record(1, 0, 0, 1_000); // offset 1_000_500 µs
        assert_eq!(REFRESH_US, 1_000_000);
        assert_eq!(clock.now(1, 999_999), Now::Estimate(2_000));
        assert_eq!(clock.now(1, 1_000_000), Now::Sample);
        // In flight until that reply: the estimate still serves.
        assert_eq!(clock.now(1, 1_000_001), Now::Estimate(2_000));
        // Its reply (midpoint 1_000_100 µs) moves the estimate: the
        // server's clock ran 4 ms ahead of the local one.
        clock.record(1, 1_000_000, 1_000_200, 2_004);
        assert_eq!(clock.now(1, 1_000_200), Now::Estimate(2_004));
        // A sample that never came back: the next call a period later samples.
        assert_eq!(clock.now(1, 2_000_200), Now::Sample);
        assert_eq!(clock.now(1, 2_000_201), Now::Estimate(3_004));
        assert_eq!(clock.now(1, 3_000_200), Now::Sample);
    }

    #[test]
    fn a_write_reads_the_estimate_without_taking_the_next_sample() {
        let clock = ServerClock::new();
        assert_eq!(clock.estimate_ms(10), None);
        clock.record(1, 0, 0, 1_000); // offset 1_000_500 µs
                                      // Due for a sample: the write reads the estimate and leaves the
                                      // sample to the next decision, whatever connection it goes on.
        assert_eq!(clock.estimate_ms(1_000_000), Some(2_000));
        assert_eq!(clock.now(1, 1_000_000), Now::Sample);
        assert_eq!(clock.estimate_ms(1_500_000), Some(2_500));
    }
}
