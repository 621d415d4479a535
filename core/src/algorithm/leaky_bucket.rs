//! Leaky bucket: `police` is the meter (the level drains at the rate; allowed
//! iff level + cost <= burst), `shape` is the queue (a request waits until the
//! previous ones have dripped out, admitted iff that wait <= max_delay).

use super::gcra::{far_ahead, tat_cells, wait_scaled};
use super::{ceil_div, ceil_frac, never_fits, verdict, Params, Update, Verdict};

/// Cells: `[level * period, last_ms, admitted_ms]`.
pub(crate) fn decide_police(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let cap = p.capacity();
    let (mut level, mut last, admitted) = cells.map_or((0, now, now), |c| (c[0], c[1], c[2].max(now)));
    if now > last {
        if now - last >= ceil_div(level, p.count) {
            level = 0;
        } else {
            level -= (now - last) * p.count;
        }
        last = now;
    }
    let lag = last - now;
    let reset = |level: i64| lag + ceil_div(level, p.count);
    if cost > p.burst {
        return never_fits((cap - level) / p.period, reset(level));
    }
    let need = cost * p.period;
    if level + need <= cap {
        level += need;
        (
            verdict(true, (cap - level) / p.period, reset(level), None),
            Some(Update::Cells([level, last, admitted])),
        )
    } else {
        let retry = lag + ceil_div(level + need - cap, p.count);
        (
            verdict(false, (cap - level) / p.period, reset(level), Some(retry)),
            None,
        )
    }
}

/// Cells: the queue's tail as a TAT, like GCRA.
pub(crate) fn decide_shape(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    if let Some((ms, rem)) = far_ahead(cells, now, p.count) {
        // The queue's tail is further ahead than any max_delay: full.
        let reset = ms + ceil_div(rem, p.count);
        if cost > p.burst {
            return never_fits(0, reset);
        }
        let retry = ms + ceil_frac(rem - p.max_delay, p.count);
        return (verdict(false, 0, reset, Some(retry)), None);
    }
    let wait = wait_scaled(cells, now, p.count);
    // Requests of cost 1 still admitted after a queue tail `wait` ahead.
    let room = |wait: i64| {
        if wait <= p.max_delay {
            (p.max_delay - wait) / p.period + 1
        } else {
            0
        }
    };
    if cost > p.burst {
        return never_fits(room(wait), ceil_div(wait, p.count));
    }
    if wait <= p.max_delay {
        let next = wait + cost * p.period;
        let mut v = verdict(true, room(next), ceil_div(next, p.count), None);
        v.delay_ms = ceil_div(wait, p.count) as u64;
        let admitted = cells.map_or(now, |c| c[2].max(now));
        (v, Some(Update::Cells(tat_cells(now, next, p.count, admitted))))
    } else {
        let retry = ceil_div(wait - p.max_delay, p.count);
        (verdict(false, 0, ceil_div(wait, p.count), Some(retry)), None)
    }
}
