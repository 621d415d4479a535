//! Fixed window: a counter per window aligned to the epoch
//! (`now - now % period`); allowed iff count + cost <= limit.

use super::{never_fits, verdict, Params, Update, Verdict};

/// Cells: `[window_start_ms, count, created_ms]`. `created_ms` is when this
/// window's count started (the first admission of a new key, or the
/// window's start), so a refund can tell the charged state from one created
/// after it (a reset, then new admissions: `refund.rs`); 0 in states written
/// before it existed (read as "before every admission").
pub(crate) fn decide(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let start = now - now.rem_euclid(p.period);
    let (mut window, mut used, mut created) = cells.map_or((start, 0, now), |c| (c[0], c[1], c[2]));
    // A later window starts empty; an earlier one (clock went back) keeps the count.
    if start > window {
        window = start;
        used = 0;
        created = start;
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
            Some(Update::Cells([window, used, created])),
        )
    } else {
        (verdict(false, p.burst - used, reset(used), Some(window_end)), None)
    }
}
