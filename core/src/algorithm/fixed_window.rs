//! Fixed window: a counter per window aligned to the epoch
//! (`now - now % period`); allowed iff count + cost <= limit.

use super::{never_fits, verdict, Params, Update, Verdict};

/// Cells: `[window_start_ms, count]`.
pub(crate) fn decide(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let start = now - now.rem_euclid(p.period);
    let (mut window, mut used) = cells.map_or((start, 0), |c| (c[0], c[1]));
    // A later window starts empty; an earlier one (clock went back) keeps the count.
    if start > window {
        window = start;
        used = 0;
    }
    let window_end = window + p.period - now;
    let reset = |used: i64| if used > 0 { window_end } else { 0 };
    if cost > p.burst {
        return never_fits(p.burst - used, reset(used));
    }
    if used + cost <= p.burst {
        used += cost;
        (
            verdict(true, p.burst - used, window_end, None),
            Some(Update::Cells([window, used, 0])),
        )
    } else {
        (verdict(false, p.burst - used, reset(used), Some(window_end)), None)
    }
}
