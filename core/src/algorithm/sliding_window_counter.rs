//! Sliding window counter: `estimate = previous * (period - elapsed)/period +
//! current`, allowed iff estimate + cost <= limit, computed in integers as
//! `previous*(period-elapsed) + (current+cost)*period <= limit*period`.

use super::{never_fits, verdict, Params, Update, Verdict};

/// Cells: `[created_ms, previous, current]`. `created_ms` lies in the
/// current window: the window's start is `created_ms - created_ms % period`,
/// and `created_ms` is when this state started counting (the first admission
/// of a new key, or the window's start), so a refund can tell the charged
/// state from one created after it (`refund.rs`). States written before it
/// existed hold the window's start, read as created at its start.
pub(crate) fn decide(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let period = p.period;
    let limit = p.burst;
    let start = now - now.rem_euclid(period);
    let (mut window, mut previous, mut current, mut created) =
        cells.map_or((start, 0, 0, now), |c| (window_of(c[0], period), c[1], c[2], c[0]));
    if start > window {
        previous = if start == window + period { current } else { 0 };
        current = 0;
        window = start;
        created = start;
    }
    // Zero when the clock went back into an earlier window: the previous
    // window then weighs fully, which never admits more.
    let elapsed = (now - window).max(0);
    let weighted_previous = previous * (period - elapsed);
    let remaining = |current: i64| (limit * period - weighted_previous) / period - current;
    let reset = |current: i64| {
        if current > 0 {
            window + 2 * period - now
        } else if previous > 0 {
            window + period - now
        } else {
            0
        }
    };
    if cost > limit {
        return never_fits(remaining(current), reset(current));
    }
    if weighted_previous + (current + cost) * period <= limit * period {
        current += cost;
        let v = verdict(true, remaining(current), reset(current), None);
        (v, Some(Update::Cells([created, previous, current])))
    } else {
        let room = limit - current - cost;
        let retry = if room >= 0 {
            // Later in this window, once previous * (period - e) <= room * period.
            let e = period - room * period / previous;
            e - elapsed
        } else {
            // In the next window, where `current` becomes the previous count.
            let e = period - (limit - cost) * period / current;
            window + period - now + e
        };
        (verdict(false, remaining(current), reset(current), Some(retry)), None)
    }
}

/// The start of the window a state's first cell (`created_ms`) lies in.
pub(crate) fn window_of(created: i64, period: i64) -> i64 {
    created - created.rem_euclid(period)
}
