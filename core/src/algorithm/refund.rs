//! Refunds: the inverse of an admission of `cost` at `now`, or of part of
//! it (a completion that reports a smaller actual cost gives back the
//! difference, `cost` here), and forced debits (a negative `cost`: the
//! actual cost was larger, see [`debit`]). Applied right
//! after that admission, with no request in between, every later decision
//! (at `now` or later) is what it would have been had the admitted request
//! never come. Mirrored by `core/lua/refund.lua` line for line.
//!
//! Each refund returns the state's new cells and its time to live (the
//! reset of the refunded state, as a decision would compute it), or `None`
//! when there is nothing to give back: the charge is then kept (a spurious
//! denial later, never an over-admission). That is the case when a window
//! algorithm's window moved on (the charge was in an earlier window) or its
//! state was created after the admission's ms (the key was reset, or
//! expired, and admitted again: that state never held the charge), when
//! the sliding log no longer holds the entry, when a TAT lies far ahead, and
//! for the buckets (token bucket, GCRA, leaky bucket) when an admission at
//! a later ms came since (their cells keep the latest time admitted):
//! in between, a refill, a drain or an idle TAT may have been capped in the
//! state without the admission, and giving the cost back would then admit
//! more than that state. Admissions at the same ms cap nothing.

use super::gcra::{far_ahead, tat_cells, wait_scaled, MAX_WAIT_SCALED};
use super::sliding_window_counter::window_of;
use super::sliding_window_log::Log;
use super::{ceil_div, Kind, Params, State};

/// Refunds `cost` admitted at `now` on a key's live state, in place.
/// Returns the state's new time to live in ms, or `None` (nothing changed).
/// A negative `cost` is a forced [`debit`] of `-cost` at `now` instead.
pub(crate) fn refund(p: &Params, state: &mut State, now: i64, cost: i64) -> Option<i64> {
    if cost < 0 {
        let (debited, ttl) = debit(p, Some(&*state), now, -cost)?;
        *state = debited;
        return Some(ttl);
    }
    let cells = match state {
        State::Log(log) => return sliding_window_log(p, log, now, cost),
        // A lease is given back by releasing it, not by a refund.
        State::Penalty(_) | State::Leases(_) | State::Adaptive(_) => return None,
        State::Cells(cells) => cells,
    };
    let (refunded, ttl) = match p.kind {
        Kind::TokenBucket => token_bucket(p, cells, now, cost)?,
        Kind::TokenBucketInterval => token_bucket_interval(p, cells, now, cost)?,
        Kind::Gcra | Kind::LeakyShape => tat(p, cells, now, cost)?,
        Kind::LeakyPolice => leaky_bucket(p, cells, now, cost)?,
        Kind::FixedWindow => fixed_window(p, cells, now, cost)?,
        Kind::SlidingWindowCounter => sliding_window_counter(p, cells, now, cost)?,
        Kind::SlidingWindowLog | Kind::Concurrency => return None,
    };
    *cells = refunded;
    Some(ttl)
}

/// Cells `[tokens * period, last_ms, admitted_ms]`: the tokens come back,
/// capped at the capacity; `last` stays.
fn token_bucket(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[2] != now {
        return None;
    }
    let cap = p.capacity();
    let tokens = (c[0] + cost * p.period).min(cap);
    Some(([tokens, c[1], now], c[1] - now + ceil_div(cap - tokens, p.count)))
}

/// Cells `[tokens, last_refill_ms, admitted_ms]`: the tokens come back,
/// capped at burst.
fn token_bucket_interval(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[2] != now {
        return None;
    }
    let tokens = (c[0] + cost).min(p.burst);
    let reset = if tokens < p.burst {
        c[1] + ceil_div(p.burst - tokens, p.count) * p.period - now
    } else {
        0
    };
    Some(([tokens, c[1], now], reset))
}

/// GCRA and the shape queue (cells `[tat_ms, tat_rem, admitted_ms]`): the
/// TAT goes back by `cost * T`, never below now's idle point. A TAT far ahead (the clock went back by far) stays.
fn tat(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[2] != now || far_ahead(Some(c), now, p.count).is_some() {
        return None;
    }
    let wait = (wait_scaled(Some(c), now, p.count) - cost * p.period).max(0);
    Some((tat_cells(now, wait, p.count, now), ceil_div(wait, p.count)))
}

/// Cells `[level * period, last_ms, admitted_ms]`: the level goes down,
/// not below 0.
fn leaky_bucket(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[2] != now {
        return None;
    }
    let level = (c[0] - cost * p.period).max(0);
    Some(([level, c[1], now], c[1] - now + ceil_div(level, p.count)))
}

/// Cells `[window_start_ms, count, created_ms]`: the count goes down if the
/// stored window is now's (the one the admission charged) and the state
/// was created no later than the admission (a state created after it, by
/// admissions after a reset, never held its charge).
fn fixed_window(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[0] != now - now.rem_euclid(p.period) || c[2] > now {
        return None;
    }
    let used = (c[1] - cost).max(0);
    let reset = if used > 0 { c[0] + p.period - now } else { 0 };
    Some(([c[0], used, c[2]], reset))
}

/// Cells `[created_ms, previous, current]`: the current count goes down if
/// the state's window is now's and it was created no later than the
/// admission (as for the fixed window).
fn sliding_window_counter(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    let window = window_of(c[0], p.period);
    if window != now - now.rem_euclid(p.period) || c[0] > now {
        return None;
    }
    let current = (c[2] - cost).max(0);
    let reset = if current > 0 {
        window + 2 * p.period - now
    } else if c[1] > 0 {
        window + p.period - now
    } else {
        0
    };
    Some(([c[0], c[1], current], reset))
}

/// The log loses one entry logged at `now` for `cost` (entries alike are
/// interchangeable), or, for part of an admission, an entry logged at `now`
/// for more than `cost` is lowered by `cost` (decisions read only the cost
/// logged at each time). The entries the admission trimmed had expired.
fn sliding_window_log(p: &Params, log: &mut Log, now: i64, cost: i64) -> Option<i64> {
    if !log.remove(now, cost) && !log.lower(now, cost) {
        return None;
    }
    let newest = log.newest().filter(|t| *t > now - p.period);
    Some(newest.map_or(0, |t| t + p.period - now))
}

/// A forced debit of `cost` at `now`: charged whatever the state holds (a
/// completion whose actual cost exceeded the admission's reservation). The
/// state first moves to `now` as a decision would (refill, drain, a new
/// window), then takes the cost with no limit: a token bucket's tokens go
/// below zero (a debt refilled before the next admission), a TAT or level
/// moves past the burst, a window counts past its limit, the log gains an
/// entry. `None` (a missing state) starts from a new key's. Returns the new
/// state and its time to live, or `None` for a concurrency policy (leases
/// are not charged) or a TAT far ahead (the clock went back by far: it
/// already denies). Mirrored by `debit` in `core/lua/refund.lua`.
pub(crate) fn debit(p: &Params, state: Option<&State>, now: i64, cost: i64) -> Option<(State, i64)> {
    if let Some(State::Log(_)) | None = state {
        if p.kind == Kind::SlidingWindowLog {
            let mut log = match state {
                Some(State::Log(log)) => log.clone(),
                _ => Log::default(),
            };
            log.trim(now - p.period);
            log.push(now, cost);
            let newest = log.newest().unwrap_or(now);
            return Some((State::Log(log), newest + p.period - now));
        }
    }
    let cells = match state {
        Some(State::Cells(c)) => Some(c),
        None => None,
        Some(_) => return None,
    };
    let (out, ttl) = match p.kind {
        Kind::TokenBucket => {
            // Refilled to `now` as a decision does, then charged.
            let cap = p.capacity();
            let (mut tokens, mut last, admitted) = cells.map_or((cap, now, now), |c| (c[0], c[1], c[2].max(now)));
            if now > last {
                if now - last >= ceil_div(cap - tokens, p.count) {
                    tokens = cap;
                } else {
                    tokens += (now - last) * p.count;
                }
                last = now;
            }
            tokens -= cost * p.period;
            ([tokens, last, admitted], last - now + ceil_div(cap - tokens, p.count))
        }
        Kind::TokenBucketInterval => {
            let (mut tokens, mut last, admitted) = cells.map_or((p.burst, now, now), |c| (c[0], c[1], c[2].max(now)));
            if now > last {
                let periods = (now - last) / p.period;
                if periods >= ceil_div(p.burst - tokens, p.count) {
                    tokens = p.burst;
                    last = now;
                } else {
                    tokens += periods * p.count;
                    last += periods * p.period;
                }
            }
            tokens -= cost;
            let reset = last + ceil_div(p.burst - tokens, p.count) * p.period - now;
            ([tokens, last, admitted], reset)
        }
        Kind::Gcra | Kind::LeakyShape => {
            if far_ahead(cells, now, p.count).is_some() {
                return None;
            }
            let wait = (wait_scaled(cells, now, p.count) + cost * p.period).min(MAX_WAIT_SCALED);
            let admitted = cells.map_or(now, |c| c[2].max(now));
            (tat_cells(now, wait, p.count, admitted), ceil_div(wait, p.count))
        }
        Kind::LeakyPolice => {
            let (mut level, mut last, admitted) = cells.map_or((0, now, now), |c| (c[0], c[1], c[2].max(now)));
            if now > last {
                if now - last >= ceil_div(level, p.count) {
                    level = 0;
                } else {
                    level -= (now - last) * p.count;
                }
                last = now;
            }
            level += cost * p.period;
            ([level, last, admitted], last - now + ceil_div(level, p.count))
        }
        Kind::FixedWindow => {
            let start = now - now.rem_euclid(p.period);
            let c = match cells {
                Some(c) if c[0] >= start => *c,
                _ => [start, 0, now],
            };
            ([c[0], c[1] + cost, c[2]], c[0] + p.period - now)
        }
        Kind::SlidingWindowCounter => {
            let start = now - now.rem_euclid(p.period);
            let c = match cells {
                Some(c) if window_of(c[0], p.period) >= start => *c,
                Some(c) if window_of(c[0], p.period) + p.period == start => [start, c[2], 0],
                _ => [now, 0, 0],
            };
            (
                [c[0], c[1], c[2] + cost],
                window_of(c[0], p.period) + 2 * p.period - now,
            )
        }
        Kind::SlidingWindowLog | Kind::Concurrency => return None,
    };
    Some((State::Cells(out), ttl.max(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{decide, Update};
    use crate::policy::Policy;
    use serde_json::json;

    fn params(policy: serde_json::Value) -> Params {
        Params::new(&Policy::from_value(&policy, "").unwrap())
    }

    /// Admits `cost` at `now` on `state`; panics on a denial.
    fn admit(p: &Params, state: Option<State>, now: i64, cost: i64) -> State {
        let (verdict, update) = decide(p, state.as_ref(), now, cost);
        assert!(verdict.allowed, "admitted at {now}");
        update.map(|u: Update| u.apply(state)).unwrap()
    }

    fn every_kind() -> Vec<Params> {
        [
            json!({"algorithm": "token_bucket", "rate": "10/s"}),
            json!({"algorithm": "token_bucket", "rate": "10/s", "refill": "interval"}),
            json!({"algorithm": "gcra", "rate": "10/s"}),
            json!({"algorithm": "leaky_bucket", "rate": "10/s"}),
            json!({"algorithm": "leaky_bucket", "mode": "shape", "rate": "10/s", "burst": 5}),
            json!({"algorithm": "fixed_window", "rate": "10/s"}),
            json!({"algorithm": "sliding_window_counter", "rate": "10/s"}),
            json!({"algorithm": "sliding_window_log", "rate": "10/s"}),
        ]
        .into_iter()
        .map(params)
        .collect()
    }

    // Right after an admission, or after others at the same ms, every kind
    // gives the cost back.
    #[test]
    fn a_refund_at_the_admissions_ms_gives_back() {
        for p in every_kind() {
            let mut state = admit(&p, None, 1_000, 2);
            state = admit(&p, Some(state), 1_000, 1);
            assert!(refund(&p, &mut state, 1_000, 2).is_some(), "{:?}", p.kind);
        }
    }

    // After a refill, drain or idle TAT at a later ms (another request came
    // in between), giving back could admit more than the state without the
    // admission: the buckets keep the charge. The windows and the log stay
    // exact (a count or an entry of the same window) and give it back.
    #[test]
    fn buckets_keep_the_charge_after_an_admission_at_another_ms() {
        for p in every_kind() {
            let mut state = admit(&p, None, 1_000, 2);
            state = admit(&p, Some(state), 1_050, 1);
            let before = state.clone();
            let given = refund(&p, &mut state, 1_000, 2);
            match p.kind {
                Kind::FixedWindow | Kind::SlidingWindowCounter | Kind::SlidingWindowLog => {
                    assert!(given.is_some(), "{:?}", p.kind)
                }
                _ => {
                    assert_eq!(given, None, "{:?}", p.kind);
                    assert_eq!(state, before, "{:?}: unchanged", p.kind);
                }
            }
        }
    }

    // An admission at a later ms, then one back at the refund's ms: the
    // latest time admitted still tells that a later one came.
    #[test]
    fn buckets_remember_the_latest_admission() {
        for p in every_kind() {
            let mut state = admit(&p, None, 1_000, 1);
            state = admit(&p, Some(state), 1_050, 1);
            state = admit(&p, Some(state), 1_000, 1);
            let given = refund(&p, &mut state, 1_000, 1);
            match p.kind {
                Kind::FixedWindow | Kind::SlidingWindowCounter | Kind::SlidingWindowLog => {
                    assert!(given.is_some(), "{:?}", p.kind)
                }
                _ => assert_eq!(given, None, "{:?}", p.kind),
            }
        }
    }

    // The over-admission the guard prevents: a full token bucket (2 tokens,
    // one per 100 ms) charged at 0, a refill wasted without that charge,
    // another request at 100. Giving back would leave 2 tokens at 100 where
    // the state without the charge has 1.
    #[test]
    fn giving_back_after_a_capped_refill_would_over_admit() {
        let p = params(json!({"algorithm": "token_bucket", "rate": "10/s", "burst": 2}));
        let charged = admit(&p, None, 0, 1);
        let mut state = admit(&p, Some(charged), 100, 1);
        let without = admit(&p, None, 100, 1);
        let remaining = |s: &State| decide(&p, Some(s), 100, 1).0.remaining;
        assert_eq!(remaining(&without), 0);
        assert_eq!(remaining(&state), 0);
        assert!(!decide(&p, Some(&without), 100, 2).0.allowed);
        // Unguarded (as if the admission at 100 had been at 0), giving back
        // would admit a cost of 2 at 100.
        let mut unguarded = state.clone();
        if let State::Cells(c) = &mut unguarded {
            c[2] = 0;
        }
        assert!(refund(&p, &mut unguarded, 0, 1).is_some());
        assert!(decide(&p, Some(&unguarded), 100, 2).0.allowed);
        // Guarded: nothing is given back, and 2 do not fit.
        assert_eq!(refund(&p, &mut state, 0, 1), None, "nothing given back");
        assert!(!decide(&p, Some(&state), 100, 2).0.allowed);
    }

    // The windows keep when their state was created: a state created after
    // the admission's ms (a reset, then admissions) never held its charge.
    // States written before that cell existed (fixed window: 0; sliding
    // counter: the window's start) read as created before every admission.
    #[test]
    fn windows_give_back_only_to_a_state_created_no_later_than_the_admission() {
        for p in every_kind()
            .into_iter()
            .filter(|p| matches!(p.kind, Kind::FixedWindow | Kind::SlidingWindowCounter))
        {
            let fresh = admit(&p, None, 1_050, 1);
            assert_eq!(refund(&p, &mut fresh.clone(), 1_000, 1), None, "{:?}", p.kind);
            assert!(refund(&p, &mut fresh.clone(), 1_050, 1).is_some(), "{:?}", p.kind);
            let old = match p.kind {
                Kind::FixedWindow => State::Cells([1_000, 2, 0]),
                _ => State::Cells([1_000, 0, 2]),
            };
            let mut given = old.clone();
            assert!(refund(&p, &mut given, 1_000, 1).is_some(), "{:?}: an old state", p.kind);
            assert_eq!(
                decide(&p, Some(&given), 1_060, 1).0.remaining,
                decide(&p, Some(&old), 1_060, 1).0.remaining + 1,
                "{:?}",
                p.kind
            );
        }
    }
}
