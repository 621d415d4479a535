//! Refunds: the inverse of an admission of `cost` at `now`. Applied right
//! after that admission, with no request in between, every later decision
//! (at `now` or later) is what it would have been had the admitted request
//! never come. Mirrored by `core/lua/refund.lua` line for line.
//!
//! Each refund returns the state's new cells and its time to live (the
//! reset of the refunded state, as a decision would compute it), or `None`
//! when there is nothing to give back: the charge is then kept (a spurious
//! denial later, never an over-admission). That is the case when a window
//! algorithm's window moved on (the charge was in an earlier window), when
//! the sliding log no longer holds the entry, and when a TAT lies far ahead.

use super::gcra::{far_ahead, tat_cells, wait_scaled};
use super::sliding_window_log::Log;
use super::{ceil_div, Kind, Params, State};

/// Refunds `cost` admitted at `now` on a key's live state, in place.
/// Returns the state's new time to live in ms, or `None` (nothing changed).
pub(crate) fn refund(p: &Params, state: &mut State, now: i64, cost: i64) -> Option<i64> {
    let cells = match state {
        State::Log(log) => return sliding_window_log(p, log, now, cost),
        State::Penalty(_) => return None,
        State::Cells(cells) => cells,
    };
    let (refunded, ttl) = match p.kind {
        Kind::TokenBucket => token_bucket(p, cells, now, cost),
        Kind::TokenBucketInterval => token_bucket_interval(p, cells, now, cost),
        Kind::Gcra | Kind::LeakyShape => tat(p, cells, now, cost)?,
        Kind::LeakyPolice => leaky_bucket(p, cells, now, cost),
        Kind::FixedWindow => fixed_window(p, cells, now, cost)?,
        Kind::SlidingWindowCounter => sliding_window_counter(p, cells, now, cost)?,
        Kind::SlidingWindowLog => return None,
    };
    *cells = refunded;
    Some(ttl)
}

/// Cells `[tokens * period, last_ms]`: the tokens come back, capped at the
/// capacity; `last` stays.
fn token_bucket(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> ([i64; 3], i64) {
    let cap = p.capacity();
    let tokens = (c[0] + cost * p.period).min(cap);
    ([tokens, c[1], 0], c[1] - now + ceil_div(cap - tokens, p.count))
}

/// Cells `[tokens, last_refill_ms]`: the tokens come back, capped at burst.
fn token_bucket_interval(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> ([i64; 3], i64) {
    let tokens = (c[0] + cost).min(p.burst);
    let reset = if tokens < p.burst {
        c[1] + ceil_div(p.burst - tokens, p.count) * p.period - now
    } else {
        0
    };
    ([tokens, c[1], 0], reset)
}

/// GCRA and the shape queue: the TAT goes back by `cost * T`, never below
/// now's idle point. A TAT far ahead (the clock went back by far) stays.
fn tat(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if far_ahead(Some(c), now, p.count).is_some() {
        return None;
    }
    let wait = (wait_scaled(Some(c), now, p.count) - cost * p.period).max(0);
    Some((tat_cells(now, wait, p.count), ceil_div(wait, p.count)))
}

/// Cells `[level * period, last_ms]`: the level goes down, not below 0.
fn leaky_bucket(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> ([i64; 3], i64) {
    let level = (c[0] - cost * p.period).max(0);
    ([level, c[1], 0], c[1] - now + ceil_div(level, p.count))
}

/// Cells `[window_start_ms, count]`: the count goes down if the stored
/// window is now's (the one the admission charged).
fn fixed_window(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[0] != now - now.rem_euclid(p.period) {
        return None;
    }
    let used = (c[1] - cost).max(0);
    let reset = if used > 0 { c[0] + p.period - now } else { 0 };
    Some(([c[0], used, 0], reset))
}

/// Cells `[window_start_ms, previous, current]`: the current count goes
/// down if the stored window is now's.
fn sliding_window_counter(p: &Params, c: &[i64; 3], now: i64, cost: i64) -> Option<([i64; 3], i64)> {
    if c[0] != now - now.rem_euclid(p.period) {
        return None;
    }
    let current = (c[2] - cost).max(0);
    let reset = if current > 0 {
        c[0] + 2 * p.period - now
    } else if c[1] > 0 {
        c[0] + p.period - now
    } else {
        0
    };
    Some(([c[0], c[1], current], reset))
}

/// The log loses one entry logged at `now` for `cost` (entries alike are
/// interchangeable). The entries the admission trimmed had expired.
fn sliding_window_log(p: &Params, log: &mut Log, now: i64, cost: i64) -> Option<i64> {
    if !log.remove(now, cost) {
        return None;
    }
    let newest = log.newest().filter(|t| *t > now - p.period);
    Some(newest.map_or(0, |t| t + p.period - now))
}
