//! GCRA, virtual-scheduling form: one theoretical arrival time (TAT) per key.
//! Allowed iff `now >= max(TAT, now) + cost*T - burst*T`.

use super::{ceil_div, ceil_frac, never_fits, verdict, Params, Update, Verdict};

/// The largest wait, in scaled units, computed as one number. Policies keep
/// capacities and delays below 2^50, so anything above this denies; below
/// it every sum the algorithms form stays under 2^53, exact in Lua's doubles.
pub(crate) const MAX_WAIT_SCALED: i64 = 1 << 52;

/// `max(TAT, now) - now` in scaled units. Cells hold the TAT as whole ms
/// plus a remainder in `1/count` ms, then the latest time admitted (for
/// refunds): `[tat_ms, tat_rem, admitted_ms]`. Callers first ask
/// [`far_ahead`], so the product here cannot overflow.
pub(crate) fn wait_scaled(cells: Option<&[i64; 3]>, now: i64, count: i64) -> i64 {
    match cells {
        Some(c) if c[0] > now => (c[0] - now) * count + c[1],
        Some(c) if c[0] == now => c[1],
        _ => 0,
    }
}

/// A TAT more than [`MAX_WAIT_SCALED`] ahead (the clock went back by far):
/// the wait as whole ms and a remainder in scaled units, `(ms, rem)`. Such a
/// wait denies any cost; times derived from it are computed in ms, exactly.
pub(crate) fn far_ahead(cells: Option<&[i64; 3]>, now: i64, count: i64) -> Option<(i64, i64)> {
    cells
        .filter(|c| c[0] > now && c[0] - now > MAX_WAIT_SCALED / count)
        .map(|c| (c[0] - now, c[1]))
}

/// The cells for a TAT `wait` scaled units after `now`, the latest
/// admission at `admitted`.
pub(crate) fn tat_cells(now: i64, wait: i64, count: i64, admitted: i64) -> [i64; 3] {
    [now + wait / count, wait % count, admitted]
}

pub(crate) fn decide(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let cap = p.capacity();
    if let Some((ms, rem)) = far_ahead(cells, now, p.count) {
        let reset = ms + ceil_div(rem, p.count);
        if cost > p.burst {
            return never_fits(0, reset);
        }
        let retry = ms + ceil_frac(rem + cost * p.period - cap, p.count);
        return (verdict(false, 0, reset, Some(retry)), None);
    }
    let wait = wait_scaled(cells, now, p.count);
    if cost > p.burst {
        return never_fits((cap - wait) / p.period, ceil_div(wait, p.count));
    }
    let need = cost * p.period;
    if wait + need <= cap {
        let next = wait + need;
        let v = verdict(true, (cap - next) / p.period, ceil_div(next, p.count), None);
        let admitted = cells.map_or(now, |c| c[2].max(now));
        (v, Some(Update::Cells(tat_cells(now, next, p.count, admitted))))
    } else {
        let retry = ceil_div(wait + need - cap, p.count);
        (
            verdict(false, (cap - wait) / p.period, ceil_div(wait, p.count), Some(retry)),
            None,
        )
    }
}
