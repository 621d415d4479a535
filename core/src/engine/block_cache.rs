//! The blocked-key cache (issue 19, `block_cache`): once the store denies a
//! check with a retry time, the same check is denied locally, with the
//! store's decision counted down, until that time — no store call.
//!
//! Exact by construction:
//! - it only ever denies, so it never admits what the store would deny;
//! - it serves a denial only while every denied decision of the check is
//!   still within its `retry_after`, measured from an instant no later than
//!   the store's decision (the process's monotonic clock read *before* the
//!   call was sent, less 1 ms for the store's ms truncation, or the check's
//!   `now_ms`), so it never denies past the store's retry time (as long as
//!   the Redis host's clock does not step forward meanwhile);
//! - it serves only the same check: the same targets (policy, key, shadow)
//!   and the same cost (a smaller cost may fit earlier, a larger one would
//!   be told a longer retry).
//!
//! What is never cached (the store's retry time is no promise there, or the
//! store must see the denial): checks with a concurrency policy (a release
//! frees a slot early), denials without a retry (the cost never fits),
//! decisions under a per-key override (it may end first), denials a penalty
//! policy records (they count toward its threshold: only a running penalty
//! block is cached), and fallback decisions. This process's resets,
//! overrides, refunds, releases and admissions of a key drop its entries
//! (and an answer to a call sent before a reset, an override, a refund or a
//! release is not remembered); another process's are not seen until the
//! cached retry ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::decision::{CheckResult, Decision, Source};
use crate::engine::Target;

/// Keys held when `block_cache: true` gives no number.
pub(crate) const DEFAULT_KEYS: usize = 10_000;

/// The clock a check is decided on, for the cache.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Now {
    /// The store's clock (no `now_ms`): measured here on the monotonic clock.
    Mono(Instant),
    /// An explicit `now_ms`.
    Ms(i64),
}

impl Now {
    pub(crate) fn of(now_ms: Option<i64>) -> Now {
        match now_ms {
            Some(ms) => Now::Ms(ms),
            None => Now::Mono(Instant::now()),
        }
    }

    /// Whole ms elapsed since `base`, `None` when `self` is not on the same
    /// clock or earlier. On the monotonic clock rounded up, plus 1 ms: the
    /// store counts from its `TIME` truncated to the ms, which may be up to
    /// 1 ms before the instant read here; so a countdown never reports more
    /// than is left.
    fn since(self, base: Now) -> Option<u64> {
        match (self, base) {
            (Now::Mono(now), Now::Mono(base)) => {
                let d = now.checked_duration_since(base)?;
                Some(d.as_nanos().div_ceil(1_000_000) as u64 + 1)
            }
            (Now::Ms(now), Now::Ms(base)) if now >= base => Some((now - base) as u64),
            _ => None,
        }
    }
}

/// One denied check as the store answered it.
struct Snapshot {
    /// (policy index, key, shadow) of every target, in order.
    targets: Vec<(usize, Box<str>, bool)>,
    cost: i64,
    /// No later than the store's decision.
    base: Now,
    /// The shortest retry among its denied decisions: served while less has elapsed.
    window_ms: u64,
    decisions: Vec<Decision>,
}

impl Snapshot {
    fn matches(&self, targets: &[Target<'_>], cost: i64) -> bool {
        self.cost == cost
            && self.targets.len() == targets.len()
            && self
                .targets
                .iter()
                .zip(targets)
                .all(|((i, key, shadow), (j, k, s))| i == j && &**key == *k && shadow == s)
    }
}

/// The bounded map (policy index, key) → the denied check it belongs to.
pub(crate) struct BlockCache {
    max_keys: usize,
    inner: Mutex<Maps>,
    /// Bumped by every invalidation: an answer to a call sent before one
    /// is not remembered (it may predate the reset, override or refund).
    generation: AtomicU64,
}

struct Maps {
    /// Per policy index: key → snapshot.
    by_policy: Vec<HashMap<Box<str>, Arc<Snapshot>>>,
    len: usize,
}

impl BlockCache {
    pub(crate) fn new(policies: usize, max_keys: usize) -> BlockCache {
        BlockCache {
            max_keys: max_keys.max(1),
            inner: Mutex::new(Maps {
                by_policy: (0..policies).map(|_| HashMap::new()).collect(),
                len: 0,
            }),
            generation: AtomicU64::new(0),
        }
    }

    /// Read before a store call is sent; handed back to [`BlockCache::fill`].
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The cached denial of this check at `now`: the result, and the index
    /// of the policy whose entry served it. `None`: ask the store.
    pub(crate) fn lookup(&self, targets: &[Target<'_>], cost: i64, now: Now) -> Option<(CheckResult, usize)> {
        let maps = self.inner.lock();
        let (policy, snapshot, elapsed) = targets.iter().filter(|t| !t.2).find_map(|&(i, key, _)| {
            let snapshot = maps.by_policy.get(i)?.get(key)?;
            let elapsed = now.since(snapshot.base)?;
            (elapsed < snapshot.window_ms && snapshot.matches(targets, cost)).then(|| (i, snapshot.clone(), elapsed))
        })?;
        drop(maps);
        let decisions = snapshot
            .decisions
            .iter()
            .map(|d| {
                let retry_after_ms = d.retry_after_ms.map(|r| r.saturating_sub(elapsed));
                // Within a penalty block the store answers the rest of the
                // block as both (the check that started it, the longer of
                // the block and the window's reset).
                let reset_after_ms = match (d.source, retry_after_ms) {
                    (Source::Penalty, Some(rest)) => rest,
                    _ => d.reset_after_ms.saturating_sub(elapsed),
                };
                Decision {
                    reset_after_ms,
                    retry_after_ms,
                    ..*d
                }
            })
            .collect();
        let now_ms = match now {
            Now::Ms(ms) => ms,
            Now::Mono(_) => crate::engine::process_now_ms(),
        };
        let result = CheckResult {
            allowed: false,
            now_ms,
            decisions,
            leases: Vec::new(),
            overridden: Vec::new(),
            limited: Vec::new(),
        };
        Some((result, policy))
    }

    /// Remembers the store's answer to a check sent at `base` when it may
    /// be served later (see the module's rules). `cacheable(i, decision)`:
    /// whether policy `i`'s decision allows caching the check.
    pub(crate) fn fill(
        &self,
        targets: &[Target<'_>],
        cost: i64,
        (base, generation): (Now, u64),
        result: &CheckResult,
        cacheable: impl Fn(usize, &Decision) -> bool,
    ) {
        if result.allowed {
            // This process charged the keys: their denials' retry may be longer now.
            let mut maps = self.inner.lock();
            if maps.len > 0 {
                for &(i, key, _) in targets {
                    maps.remove(i, key);
                }
            }
            return;
        }
        if result.overridden.iter().any(Option::is_some) {
            return;
        }
        let mut window_ms = u64::MAX;
        for (&(i, _, _), d) in targets.iter().zip(&result.decisions) {
            if !cacheable(i, d) || !matches!(d.source, Source::Store | Source::Penalty) {
                return;
            }
            if !d.allowed {
                match d.retry_after_ms {
                    Some(r) if r > 0 => window_ms = window_ms.min(r),
                    _ => return,
                }
            }
        }
        if window_ms == u64::MAX {
            return;
        }
        let snapshot = Arc::new(Snapshot {
            targets: targets.iter().map(|&(i, k, s)| (i, k.into(), s)).collect(),
            cost,
            base,
            window_ms,
            decisions: result.decisions.clone(),
        });
        let mut maps = self.inner.lock();
        if self.generation.load(Ordering::Acquire) != generation {
            return;
        }
        for (&(i, key, shadow), d) in targets.iter().zip(&result.decisions) {
            if shadow || d.allowed || i >= maps.by_policy.len() {
                continue;
            }
            if maps.len >= self.max_keys && !maps.by_policy[i].contains_key(key) {
                maps.make_room(self.max_keys, base);
            }
            if maps.by_policy[i].insert(key.into(), snapshot.clone()).is_none() {
                maps.len += 1;
            }
        }
    }

    /// Drops the entry of `key` under policy `i` (a reset, an override, a
    /// refund or a release of this process).
    pub(crate) fn invalidate(&self, i: usize, key: &str) {
        let mut maps = self.inner.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        maps.remove(i, key);
    }

    /// Drops every entry of policy `i` (a policy-wide limit set or removed
    /// by this process).
    pub(crate) fn invalidate_policy(&self, i: usize) {
        let mut maps = self.inner.lock();
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(m) = maps.by_policy.get_mut(i) {
            let n = m.len();
            m.clear();
            maps.len -= n;
        }
    }

    /// How many (policy, key) entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().len
    }

    /// The bound on [`BlockCache::len`].
    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }
}

impl Maps {
    fn remove(&mut self, i: usize, key: &str) {
        if self.by_policy.get_mut(i).and_then(|m| m.remove(key)).is_some() {
            self.len -= 1;
        }
    }

    /// Frees at least one place: the entries past their window first, then
    /// (all still serving) any one.
    fn make_room(&mut self, max_keys: usize, now: Now) {
        let mut dropped = 0;
        for map in &mut self.by_policy {
            map.retain(|_, s| {
                let live = now.since(s.base).is_some_and(|e| e < s.window_ms)
                    // An entry on the other clock is kept unless its time is surely over.
                    || matches!((now, s.base), (Now::Ms(_), Now::Mono(b)) if b.elapsed() < Duration::from_millis(s.window_ms))
                    || matches!((now, s.base), (Now::Mono(_), Now::Ms(_)));
                if !live {
                    dropped += 1;
                }
                live
            });
        }
        self.len -= dropped;
        if self.len >= max_keys {
            if let Some(map) = self.by_policy.iter_mut().max_by_key(|m| m.len()) {
                if let Some(key) = map.keys().next().cloned() {
                    map.remove(&key);
                    self.len -= 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(retry: u64) -> CheckResult {
        CheckResult {
            allowed: false,
            now_ms: 0,
            decisions: vec![Decision {
                allowed: false,
                limit: 1,
                remaining: 0,
                reset_after_ms: retry,
                retry_after_ms: Some(retry),
                delay_ms: 0,
                source: Source::Store,
            }],
            leases: Vec::new(),
            overridden: Vec::new(),
            limited: Vec::new(),
        }
    }

    #[test]
    fn an_answer_to_a_call_sent_before_an_invalidation_is_not_remembered() {
        let cache = BlockCache::new(1, 10);
        let targets = [(0, "k", false)];
        let before = cache.generation();
        // A reset of any key while the call was out.
        cache.invalidate(0, "other");
        cache.fill(&targets, 1, (Now::Ms(1_000), before), &denied(100), |_, _| true);
        assert_eq!(cache.len(), 0);
        assert!(cache.lookup(&targets, 1, Now::Ms(1_001)).is_none());
        // Sent after it: remembered.
        cache.fill(
            &targets,
            1,
            (Now::Ms(1_000), cache.generation()),
            &denied(100),
            |_, _| true,
        );
        assert_eq!(cache.len(), 1);
        let (result, policy) = cache.lookup(&targets, 1, Now::Ms(1_001)).expect("a hit");
        assert_eq!((policy, result.decisions[0].retry_after_ms), (0, Some(99)));
        // Not on the other clock, nor before the base, nor at the retry instant.
        assert!(cache.lookup(&targets, 1, Now::Mono(Instant::now())).is_none());
        assert!(cache.lookup(&targets, 1, Now::Ms(999)).is_none());
        assert!(cache.lookup(&targets, 1, Now::Ms(1_100)).is_none());
    }
}
