//! Argument packing: a policy's part of a decision ([`RedisCheck`]), where
//! each of its keys stands ([`KeyLayout`]), and the scripts' arguments.

use redis::Cmd;

use crate::algorithm::penalty::PenaltyParams;
use crate::algorithm::{Kind, Params};
use crate::store::overrides::Charged;

/// One policy's part of a decision: its store keys (the penalty record's
/// after its state keys, when it has a penalty; then, with `overrides`, its
/// override record and the override's state keys) and its script arguments.
#[derive(Clone, Copy)]
pub(crate) struct RedisCheck<'a> {
    pub params: &'a Params,
    pub keys: &'a [String],
    pub shadow: bool,
    pub penalty: Option<&'a PenaltyParams>,
    /// Concurrency: the id of the lease an admission takes.
    pub lease: Option<&'a str>,
    /// The keys end with the override record and its state keys, then the
    /// policy-wide limit's record (unless `limit_record` is given), its
    /// generation key and its state keys.
    pub overrides: bool,
    /// On Redis Cluster, the policy-wide limit's record as this process
    /// last read it ('' for none), passed to the script instead of a key of
    /// another slot (flags 32; it takes the lease's place: a policy with a
    /// limit is never a concurrency policy).
    pub limit_record: Option<&'a str>,
}

/// Where each of a policy's keys stands in [`RedisCheck::keys`], in the
/// order the decision script reads them: the state keys (a sliding log has
/// two), the penalty record, the override record and the override's state
/// keys, the adaptive record. Named once: the keys are built
/// ([`KeyLayout::keys`]) and picked for a refund ([`KeyLayout::refund_keys`])
/// from it, never by counting from either end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyLayout {
    /// How many state keys (`Params::key_count`).
    state: usize,
    penalty: bool,
    overrides: bool,
    /// With `overrides`: the policy-wide limit's record is among the keys
    /// (not on a cluster).
    limit_record: bool,
    adaptive: bool,
}

impl KeyLayout {
    /// The layout of a policy's keys: `penalty` when it has one,
    /// `overrides` when the limiter reads per-key overrides (and
    /// policy-wide limits: `limit_record` when their record is a key of the call).
    pub(crate) fn new(params: &Params, penalty: bool, overrides: bool, limit_record: bool) -> KeyLayout {
        KeyLayout {
            state: params.key_count(),
            penalty,
            overrides,
            limit_record: overrides && limit_record,
            adaptive: params.adaptive.is_some(),
        }
    }

    /// The layout of a check's keys.
    fn of(check: &RedisCheck<'_>) -> KeyLayout {
        KeyLayout::new(
            check.params,
            check.penalty.is_some(),
            check.overrides,
            check.limit_record.is_none(),
        )
    }

    /// The position of the override record; the override's state keys follow it.
    fn override_record(&self) -> Option<usize> {
        self.overrides.then(|| self.state + self.penalty as usize)
    }

    /// How many override and limit keys: the override's record and state,
    /// the limit's record, generation and state.
    fn override_len(&self) -> usize {
        self.overrides as usize * (1 + self.state + self.limit_record as usize + 1 + self.state)
    }

    /// How many keys.
    fn len(&self) -> usize {
        self.state + self.penalty as usize + self.override_len() + self.adaptive as usize
    }

    /// The keys of `main` (a policy's main state key) and `records` (the
    /// base of its per-key records: no fingerprint, see `store::keys`), in
    /// this layout; `limit_record`: the key of the policy's limit record.
    pub(crate) fn keys(
        &self,
        main: String,
        records: &str,
        params: &Params,
        limit_record: impl FnOnce() -> String,
    ) -> Vec<String> {
        let mut keys = Vec::with_capacity(self.len());
        if self.state == 2 {
            keys.push(format!("{main}:log"));
        }
        if self.penalty {
            keys.push(format!("{records}:penalty"));
        }
        if self.overrides {
            keys.extend(
                crate::store::overrides::redis_keys(records, params)
                    .into_iter()
                    .flatten(),
            );
            let record = self.limit_record.then(limit_record);
            keys.extend(
                crate::store::overrides::limit_keys(records, record, params)
                    .into_iter()
                    .flatten(),
            );
        }
        if self.adaptive {
            keys.push(format!("{records}:adaptive"));
        }
        keys.insert(0, main);
        debug_assert_eq!(keys.len(), self.len());
        keys
    }

    /// The keys a refund reads: the state keys, then (with overrides) the
    /// override record and the override's state keys, the limit's record
    /// (not on a cluster), generation and state keys.
    fn refund_keys<'k>(&self, keys: &'k [String]) -> impl Iterator<Item = &'k String> {
        let overrides = self.override_record().map_or(0..0, |at| at..at + self.override_len());
        keys[..self.state].iter().chain(&keys[overrides])
    }
}

/// A check's flags: 1 shadow, 2 peek, 4 overrides (and limits), 32 the
/// limit's record is given in the lease's place.
fn flags(check: &RedisCheck<'_>, peek: bool) -> i64 {
    check.shadow as i64
        | (peek as i64) << 1
        | (check.overrides as i64) << 2
        | ((check.overrides && check.limit_record.is_some()) as i64) << 5
}

/// A common shape, decided by a function of its own in the library
/// (shapes.lua) instead of the general check: cheaper inside Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    FixedWindow,
    TokenBucket,
    Gcra,
}

impl Shape {
    /// Every shape, in the order [`Library`](super::Library) names their functions.
    pub(super) const ALL: [Shape; 3] = [Shape::FixedWindow, Shape::TokenBucket, Shape::Gcra];

    /// The suffix of the shape's function name, and of its Lua function
    /// (`check_<suffix>` in shapes.lua).
    pub(super) fn suffix(self) -> &'static str {
        match self {
            Shape::FixedWindow => "fixed_window",
            Shape::TokenBucket => "token_bucket",
            Shape::Gcra => "gcra",
        }
    }

    /// The shape of a decision, when it has one: one policy of these kinds
    /// on one key, with no penalty, adaptive spec, override, shadow or
    /// lease, and not a peek. Anything else takes the general check.
    pub(super) fn of(checks: &[RedisCheck<'_>], peek: bool) -> Option<Shape> {
        let [c] = checks else { return None };
        if peek || c.shadow || c.penalty.is_some() || c.overrides || c.lease.is_some() || c.params.adaptive.is_some() {
            return None;
        }
        match c.params.kind {
            Kind::FixedWindow => Some(Shape::FixedWindow),
            Kind::TokenBucket => Some(Shape::TokenBucket),
            Kind::Gcra => Some(Shape::Gcra),
            _ => None,
        }
    }
}

/// A shape function's arguments (shapes.lua): `1 key now cost period limit`
/// for a fixed window (it has no count), `1 key now need count cap` for a
/// token bucket and GCRA (need = cost * period, cap = burst * period: their
/// numbers in the scaled units of their state).
pub(super) fn push_shape_args(cmd: &mut Cmd, shape: Shape, check: &RedisCheck<'_>, now: Option<i64>, cost: i64) {
    cmd.arg(1).arg(check.keys[0].as_str());
    match now {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    let p = check.params;
    match shape {
        Shape::FixedWindow => cmd.arg(cost).arg(p.period).arg(p.burst),
        // A cost past the burst is denied whatever the state; saturated, its
        // need stays past the capacity.
        Shape::TokenBucket | Shape::Gcra => cmd.arg(cost.saturating_mul(p.period)).arg(p.count).arg(p.capacity()),
    };
}

/// `numkeys key... now cost (kind count period burst max_delay flags
/// threshold within forget_after cooldowns lease adaptive)...`; flags: 1 shadow, 2 peek.
/// One policy without a penalty or an adaptive spec goes in the short form
/// check.lua reads: `numkeys key... now cost kind count period burst max_delay flags lease`.
pub(super) fn push_args(cmd: &mut Cmd, checks: &[RedisCheck<'_>], now: Option<i64>, cost: i64, peek: bool) {
    cmd.arg(checks.iter().map(|c| c.keys.len()).sum::<usize>());
    for check in checks {
        for key in check.keys {
            cmd.arg(key.as_str());
        }
    }
    match now {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    cmd.arg(cost);
    if let [check] = checks {
        let p = check.params;
        if check.penalty.is_none() && p.adaptive.is_none() {
            cmd.arg(p.kind as i64)
                .arg(p.count)
                .arg(p.period)
                .arg(p.burst)
                .arg(p.max_delay)
                .arg(flags(check, peek))
                .arg(check.lease.or(check.limit_record).unwrap_or(""));
            return;
        }
    }
    for check in checks {
        let p = check.params;
        cmd.arg(p.kind as i64)
            .arg(p.count)
            .arg(p.period)
            .arg(p.burst)
            .arg(p.max_delay)
            .arg(flags(check, peek));
        match check.penalty {
            Some(pen) => {
                let cooldowns: Vec<String> = pen.cooldowns.iter().map(i64::to_string).collect();
                cmd.arg(pen.threshold)
                    .arg(pen.within)
                    .arg(pen.forget_after)
                    .arg(cooldowns.join(","));
            }
            None => {
                cmd.arg(0).arg(0).arg(0).arg("");
            }
        }
        cmd.arg(check.lease.or(check.limit_record).unwrap_or(""));
        match &p.adaptive {
            Some(a) => cmd.arg(a.arg()),
            None => cmd.arg(""),
        };
    }
}

/// `numkeys key... now cost (kind count period burst flags)...`: the refund
/// script's arguments; a policy's state keys and, with overrides, its
/// override keys ([`KeyLayout::refund_keys`]). Flags: 4 overrides, then
/// which state the admission charged ([`Charged`]): 8 an override's, 16 the
/// policy's own (neither: whichever is in force at `now`).
pub(super) fn push_refund_args(cmd: &mut Cmd, checks: &[RedisCheck<'_>], charged: &[Charged], now: i64, cost: i64) {
    let keys = |c: &RedisCheck<'_>| {
        let layout = KeyLayout::of(c);
        debug_assert_eq!(c.keys.len(), layout.len(), "the keys of a check follow its layout");
        layout.refund_keys(c.keys).count()
    };
    cmd.arg(checks.iter().map(keys).sum::<usize>());
    for check in checks {
        for key in KeyLayout::of(check).refund_keys(check.keys) {
            cmd.arg(key.as_str());
        }
    }
    cmd.arg(now).arg(cost);
    for (n, check) in checks.iter().enumerate() {
        let p = check.params;
        let charged = match charged.get(n).copied().unwrap_or(Charged::Now) {
            Charged::Now => 0,
            Charged::Override => 8,
            Charged::Base => 16,
            Charged::Limit => 64,
        };
        cmd.arg(p.kind as i64)
            .arg(p.count)
            .arg(p.period)
            .arg(p.burst)
            .arg((check.overrides as i64) << 2 | charged | (check.limit_record.is_some() as i64) << 5);
        if check.overrides {
            cmd.arg(check.limit_record.unwrap_or(""));
        }
    }
}
