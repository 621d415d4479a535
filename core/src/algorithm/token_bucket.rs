//! Token bucket. Tokens start full at `burst` and refill at count/period,
//! capped at `burst`; a request is allowed iff tokens >= cost.

use super::{ceil_div, never_fits, verdict, Params, Update, Verdict};

/// Continuous refill. Cells: `[tokens * period, last_ms, admitted_ms]` (tokens
/// in scaled units, so a refill of `elapsed * count` is exact; `admitted_ms`,
/// the latest time admitted, tells a refund whether another came since).
pub(crate) fn decide_continuous(
    p: &Params,
    cells: Option<&[i64; 3]>,
    now: i64,
    cost: i64,
) -> (Verdict, Option<Update>) {
    let cap = p.capacity();
    let (mut tokens, mut last, admitted) = cells.map_or((cap, now, now), |c| (c[0], c[1], c[2].max(now)));
    if now > last {
        let missing = cap - tokens;
        // Compare elapsed time, not elapsed * count, so a long idle cannot overflow.
        if now - last >= ceil_div(missing, p.count) {
            tokens = cap;
        } else {
            tokens += (now - last) * p.count;
        }
        last = now;
    }
    // Positive only when the clock went backwards: refills resume from `last`.
    let lag = last - now;
    let reset = |tokens: i64| lag + ceil_div(cap - tokens, p.count);
    if cost > p.burst {
        return never_fits(tokens / p.period, reset(tokens));
    }
    let need = cost * p.period;
    if tokens >= need {
        tokens -= need;
        (
            verdict(true, tokens / p.period, reset(tokens), None),
            Some(Update::Cells([tokens, last, admitted])),
        )
    } else {
        let retry = lag + ceil_div(need - tokens, p.count);
        (verdict(false, tokens / p.period, reset(tokens), Some(retry)), None)
    }
}

/// Interval refill: `count` whole tokens per elapsed period. Cells:
/// `[tokens, last_refill_ms, admitted_ms]`. `last` advances by whole periods only, so an
/// admission in the middle of a period never throws the partial period away.
/// A full bucket restarts its clock at `now` (it is then the same as a new key).
pub(crate) fn decide_interval(p: &Params, cells: Option<&[i64; 3]>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let (mut tokens, mut last, admitted) = cells.map_or((p.burst, now, now), |c| (c[0], c[1], c[2].max(now)));
    if now > last {
        let periods = (now - last) / p.period;
        if periods >= ceil_div(p.burst - tokens, p.count) {
            tokens = p.burst;
        } else {
            tokens += periods * p.count;
            last += periods * p.period;
        }
        if tokens >= p.burst {
            tokens = p.burst;
            last = now;
        }
    }
    // Time until `more` tokens have arrived.
    let time_for = |more: i64| {
        if more <= 0 {
            0
        } else {
            last + ceil_div(more, p.count) * p.period - now
        }
    };
    if cost > p.burst {
        return never_fits(tokens, time_for(p.burst - tokens));
    }
    if tokens >= cost {
        tokens -= cost;
        (
            verdict(true, tokens, time_for(p.burst - tokens), None),
            Some(Update::Cells([tokens, last, admitted])),
        )
    } else {
        (
            verdict(false, tokens, time_for(p.burst - tokens), Some(time_for(cost - tokens))),
            None,
        )
    }
}
