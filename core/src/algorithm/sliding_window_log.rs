//! Sliding window log: one entry per admitted request (time, cost); allowed
//! iff the cost logged in `(now - period, now]` plus cost <= limit.

use std::collections::VecDeque;

use super::{never_fits, verdict, Params, Update, Verdict};

/// Entries sorted by time, with the sum of their costs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Log {
    entries: VecDeque<(i64, i64)>,
    sum: i64,
}

impl Log {
    /// Drops entries at or before `cutoff`.
    pub fn trim(&mut self, cutoff: i64) {
        while let Some(&(t, cost)) = self.entries.front() {
            if t > cutoff {
                break;
            }
            self.sum -= cost;
            self.entries.pop_front();
        }
    }

    /// Logs an admission, keeping the entries sorted even if the clock went back.
    pub fn push(&mut self, at: i64, cost: i64) {
        let index = self.entries.partition_point(|&(t, _)| t <= at);
        self.entries.insert(index, (at, cost));
        self.sum += cost;
    }

    /// Removes one entry logged at `at` for `cost`; false if there is none.
    pub fn remove(&mut self, at: i64, cost: i64) -> bool {
        let Some(index) = self.entries.iter().rposition(|&e| e == (at, cost)) else {
            return false;
        };
        self.entries.remove(index);
        self.sum -= cost;
        true
    }

    /// Lowers by `cost` one entry logged at `at` for more than `cost` (part
    /// of an admission given back); false if there is none.
    pub fn lower(&mut self, at: i64, cost: i64) -> bool {
        let Some(index) = self.entries.iter().rposition(|&(t, c)| t == at && c > cost) else {
            return false;
        };
        self.entries[index].1 -= cost;
        self.sum -= cost;
        true
    }

    /// The time of the newest entry.
    pub fn newest(&self) -> Option<i64> {
        self.entries.back().map(|&(t, _)| t)
    }
}

pub(crate) fn decide(p: &Params, log: Option<&Log>, now: i64, cost: i64) -> (Verdict, Option<Update>) {
    let limit = p.burst;
    let cutoff = now - p.period;
    let empty = Log::default();
    let log = log.unwrap_or(&empty);
    let expired = log.entries.partition_point(|&(t, _)| t <= cutoff);
    let used = log.sum - log.entries.range(..expired).map(|&(_, c)| c).sum::<i64>();
    let live = log.entries.range(expired..);
    let newest = log.entries.back().map(|&(t, _)| t).filter(|t| *t > cutoff);
    let reset = |newest: Option<i64>| newest.map_or(0, |t| t + p.period - now);
    if cost > limit {
        return never_fits(limit - used, reset(newest));
    }
    if used + cost <= limit {
        let newest = newest.map_or(now, |t| t.max(now));
        let v = verdict(true, limit - used - cost, reset(Some(newest)), None);
        (v, Some(Update::LogAppend { cutoff, at: now, cost }))
    } else {
        // The oldest entries expire first; find the one whose expiry makes
        // room. Every entry costs at least 1, so it is among the `need`
        // oldest and among the `keep + 1` newest: walk from the nearer end.
        let need = used + cost - limit;
        let keep = limit - cost;
        let found = if need <= keep + 1 {
            let mut freed = 0;
            live.take(need as usize).find(|&&(_, c)| {
                freed += c;
                freed >= need
            })
        } else {
            let mut kept = 0;
            live.rev().take(keep as usize + 1).find(|&&(_, c)| {
                kept += c;
                kept > keep
            })
        };
        let retry = found.map(|&(t, _)| t + p.period - now);
        (verdict(false, limit - used, reset(newest), retry), None)
    }
}
