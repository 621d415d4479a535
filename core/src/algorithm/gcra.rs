//! GCRA, virtual-scheduling form: one theoretical arrival time (TAT) per key.
//! Allowed iff `now >= max(TAT, now) + cost*T - burst*T`.

use super::{ceil_div, never_fits, verdict, Params, Update, Verdict};

/// `max(TAT, now) - now` in scaled units. Cells hold the TAT as whole ms
/// plus a remainder in `1/count` ms: `[tat_ms, tat_rem]`.
pub(crate) fn wait_scaled(cells: Option<&[i64; 3]>, now: i64, count: i64) -> i64 {
    match cells {
        Some(c) if c[0] > now => (c[0] - now) * count + c[1],
        Some(c) if c[0] == now => c[1],
        _ => 0,
    }
}

/// The cells for a TAT `wait` scaled units after `now`.
pub(crate) fn tat_cells(now: i64, wait: i64, count: i64) -> [i64; 3] {
    [now + wait / count, wait % count, 0]
}

pub(crate) fn decide(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let cap = p.capacity();
    let wait = wait_scaled(cells, now, p.count);
    if cost > p.burst {
        return never_fits((cap - wait) / p.period, ceil_div(wait, p.count));
    }
    let need = cost * p.period;
    if wait + need <= cap {
        let next = wait + need;
        let v = verdict(true, (cap - next) / p.period, ceil_div(next, p.count), None);
        (v, Some(Update::Cells(tat_cells(now, next, p.count))))
    } else {
        let retry = ceil_div(wait + need - cap, p.count);
        (
            verdict(false, (cap - wait) / p.period, ceil_div(wait, p.count), Some(retry)),
            None,
        )
    }
}
