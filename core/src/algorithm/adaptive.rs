//! Adaptive limits: a per-key baseline, anomaly detection and mitigation.
//! Mirrored line for line by `core/lua/adaptive.lua`; the vectors in
//! `tests/conformance/adaptive/` prove they agree.
//!
//! Time is cut into windows of `window` ms aligned to the epoch. Per key the
//! state counts the requests seen (every attempt, admitted or not: the demand,
//! so that mitigation cannot hide it) in the current and the previous window,
//! and keeps a baseline in milli-requests per window, an exponentially
//! weighted average over the closed windows with weight `1/n`
//! (`n = horizon / window`): `base = floor((base*(n-1) + count*1000) / n)`.
//! Integers only, every product below 2^53, so Lua doubles compute the same.
//!
//! The short-window rate is the sliding estimate
//! `floor(prev*(window-elapsed)/window) + cur`. Once the key has been seen
//! for one horizon, it becomes anomalous when the estimate reaches `floor`
//! and exceeds `factor` x baseline; it recovers when the estimate falls to
//! half of that (or below half the floor). The baseline is frozen while the
//! key is anomalous: otherwise it would learn the attack and the mitigation
//! would lift by itself. While anomalous the key is admitted at most
//! `max(ceil(baseline), min)` requests per window (`admitted` counts them).
//!
//! Cells: `[window_start, cur, prev, base, since, anomalous, admitted]`.

use crate::adaptive::Adaptive;

/// Counts saturate here, so every product stays exact.
pub(crate) const COUNT_CAP: i64 = 1 << 24;
/// Baseline units per request.
pub(crate) const SCALE: i64 = 1000;

/// A policy's adaptive numbers, in the integers the arithmetic uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AdaptiveParams {
    /// Window length in ms.
    pub window: i64,
    /// Horizon in windows: the baseline's weight is `1/n`.
    pub n: i64,
    /// Anomaly factor in hundredths.
    pub factor_centi: i64,
    /// Requests per window below which a key is never anomalous.
    pub floor: i64,
    /// Requests per window a mitigated key is always admitted.
    pub min: i64,
}

impl AdaptiveParams {
    pub fn new(a: &Adaptive) -> AdaptiveParams {
        AdaptiveParams {
            window: a.window_ms as i64,
            n: a.horizon_windows as i64,
            factor_centi: a.factor_centi as i64,
            floor: a.floor_per_window as i64,
            min: a.min_per_window as i64,
        }
    }

    /// The script's argument: `window,n,factor_centi,floor,min`.
    pub fn arg(&self) -> String {
        format!(
            "{},{},{},{},{}",
            self.window, self.n, self.factor_centi, self.floor, self.min
        )
    }

    /// How long a state is kept after its last request: four horizons (the
    /// baseline has decayed to about 2%) and two windows.
    pub fn ttl(&self) -> i64 {
        self.window * (4 * self.n + 2)
    }
}

/// A state transition reported with a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed.
    None = 0,
    /// The key became anomalous with this request.
    Anomalous = 1,
    /// The key recovered with this request.
    Recovered = 2,
}

/// What the adaptive layer saw for one key, reported with its decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveReport {
    /// The key is anomalous after this request (its budget is shrunk).
    pub anomalous: bool,
    /// Whether this request changed that.
    pub transition: Transition,
    /// Requests in the short window (sliding estimate), this one included.
    pub window_requests: u64,
    /// The baseline in milli-requests per window.
    pub baseline_milli: u64,
    /// The mitigation denied this request.
    pub denied: bool,
}

/// The outcome of the adaptive step of one check.
pub(crate) struct Step {
    /// The state to store (when the check is charged or counted).
    pub cells: [i64; 7],
    /// Denied by the mitigation: the time until the next window.
    pub deny_retry: Option<i64>,
    pub report: AdaptiveReport,
}

fn fold(p: &AdaptiveParams, base: i64, count: i64) -> i64 {
    (base * (p.n - 1) + count.min(COUNT_CAP) * SCALE) / p.n
}

/// Counts a request of `cost` at `now` and decides the mitigation.
pub(crate) fn step(p: &AdaptiveParams, cells: Option<&[i64; 7]>, now: i64, cost: i64) -> Step {
    let w = p.window;
    let ws_now = now - now.rem_euclid(w);
    let [mut ws, mut cur, mut prev, mut base, since, mut anom, mut adm] = match cells {
        Some(c) => *c,
        None => [ws_now, 0, 0, 0, ws_now, 0, 0],
    };
    if ws_now > ws {
        let k = (ws_now - ws) / w;
        if anom == 0 {
            base = fold(p, base, cur);
            for _ in 0..(k - 1).min(4 * p.n + 2) {
                base = fold(p, base, 0);
            }
        }
        prev = if k == 1 { cur } else { 0 };
        cur = 0;
        adm = 0;
        ws = ws_now;
    }
    cur = (cur + cost).min(COUNT_CAP);
    let elapsed = (now - ws).clamp(0, w - 1);
    let est = prev * (w - elapsed) / w + cur;
    let warm = now - since >= p.n * w;
    let hot = est >= p.floor && est * SCALE * 100 > p.factor_centi * base;
    let cool = est * 2 < p.floor || est * SCALE * 200 <= p.factor_centi * base;
    let mut transition = Transition::None;
    if anom == 0 && warm && hot {
        anom = 1;
        adm = 0;
        transition = Transition::Anomalous;
    } else if anom == 1 && cool {
        anom = 0;
        transition = Transition::Recovered;
    }
    let mut deny_retry = None;
    if anom == 1 {
        let cap = p.min.max((base + SCALE - 1) / SCALE);
        if adm + cost > cap {
            deny_retry = Some(ws + w - now);
        }
    }
    Step {
        cells: [ws, cur, prev, base, since, anom, adm],
        deny_retry,
        report: AdaptiveReport {
            anomalous: anom == 1,
            transition,
            window_requests: est as u64,
            baseline_milli: base as u64,
            denied: deny_retry.is_some(),
        },
    }
}

/// Records an admission of `cost` by a mitigated key (after the check was charged).
pub(crate) fn admitted(cells: &mut [i64; 7], cost: i64) {
    if cells[5] == 1 {
        cells[6] = (cells[6] + cost).min(COUNT_CAP);
    }
}

/// The report of a script reply's four values `anomalous transition est base`.
pub(crate) fn report_from_reply(a: &[i64], denied: bool) -> AdaptiveReport {
    AdaptiveReport {
        anomalous: a[0] == 1,
        transition: match a[1] {
            1 => Transition::Anomalous,
            2 => Transition::Recovered,
            _ => Transition::None,
        },
        window_requests: a[2].max(0) as u64,
        baseline_milli: a[3].max(0) as u64,
        denied,
    }
}

/// A denial by the mitigation; the key may retry in `retry` ms (next window).
pub(crate) fn denied(retry: i64) -> super::Verdict {
    let mut v = super::verdict(false, 0, retry, Some(retry));
    v.adaptive = None;
    v
}
