//! Local-with-sync admission (issue 19): a policy with `sync` admits from a
//! per-process credit of units already charged in the store, and reconciles
//! with the store once per `interval` per key, or sooner when the credit runs
//! out.
//!
//! A sync is one exact check of `share` units (the request's cost when
//! larger); when that is denied but the store says `remaining` r covers the
//! request, a second check takes r. Requests are then admitted from the
//! credit with no store call until the interval ends, when the unused credit
//! is dropped. A sync that takes nothing remembers the denial until the
//! interval ends (or the store's retry, when sooner): denials cost no store
//! call either.
//!
//! The guarantee: every unit admitted was charged in the store first, by the
//! exact algorithm, at most `interval` earlier; for the window algorithms the
//! credit also ends with the window it was charged in. So a window never
//! admits more than its limit, and over any span a bucket admits at most what
//! the exact bucket admits over that span plus one interval. The price is
//! under-admission: at most `share` per process per interval (credit dropped
//! unused, or a denial remembered while the store refilled).
//!
//! The policy field itself is parsed in `crate::policy::sync`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::decision::{CheckResult, Decision, Source};
use crate::engine::{process_now_ms, CheckOptions, Engine};
use crate::error::{Error, Result};

/// What a process holds for one (policy, key).
#[derive(Debug, Default)]
struct Credit {
    /// Units charged in the store and not admitted yet.
    units: u64,
    /// Local clock (ms) at which the credit, or a remembered denial, ends.
    until: i64,
    /// Local clock of the last sync.
    synced_at: i64,
    /// The last sync's decision.
    last: Option<Decision>,
}

impl Credit {
    fn live(&self, now: i64) -> bool {
        self.last.is_some() && now < self.until && now >= self.synced_at
    }
}

type Entry = Arc<tokio::sync::Mutex<Credit>>;

/// The credits of one limiter, at most `max_keys` of them.
pub(crate) struct SyncCache {
    entries: parking_lot::Mutex<Entries>,
    max_keys: usize,
}

struct Entries {
    map: HashMap<(usize, String), Entry>,
    /// When full: no sweep before this time (a sweep that freed little is not
    /// repeated for every new key, which would make each one cost a scan).
    next_sweep: i64,
}

/// The least time between two sweeps of a full cache that freed little, in ms.
const SWEEP_PAUSE_MS: i64 = 100;

impl SyncCache {
    pub(crate) fn new(max_keys: usize) -> SyncCache {
        SyncCache {
            entries: parking_lot::Mutex::new(Entries {
                map: HashMap::new(),
                next_sweep: 0,
            }),
            max_keys: max_keys.max(1),
        }
    }

    /// The entry of (policy, key); `None` when the cache is full of live
    /// credits (the check is then decided exactly).
    fn entry(&self, policy: usize, key: &str, now: i64) -> Option<Entry> {
        let mut entries = self.entries.lock();
        if let Some(e) = entries.map.get(&(policy, key.to_string())) {
            return Some(e.clone());
        }
        if entries.map.len() >= self.max_keys {
            if now < entries.next_sweep {
                return None;
            }
            // Drop what has ended and nobody is using.
            entries
                .map
                .retain(|_, e| Arc::strong_count(e) > 1 || e.try_lock().is_ok_and(|c| c.live(now)));
            if entries.map.len() > self.max_keys - self.max_keys / 4 {
                entries.next_sweep = now.saturating_add(SWEEP_PAUSE_MS);
            }
            if entries.map.len() >= self.max_keys {
                return None;
            }
        }
        let e: Entry = Arc::default();
        entries.map.insert((policy, key.to_string()), e.clone());
        Some(e)
    }

    /// Forgets the credits of (policy, key) pairs (a reset).
    pub(crate) fn forget(&self, targets: &[(usize, &str)]) {
        let mut entries = self.entries.lock();
        for &(i, key) in targets {
            entries.map.remove(&(i, key.to_string()));
        }
    }
}

/// Decides one synced (policy, key) check: from the credit when it covers
/// the cost, otherwise after a sync. `None` when the cache is full: the
/// caller decides exactly.
pub(crate) async fn decide(
    engine: &Engine,
    cache: &SyncCache,
    policy: usize,
    key: &str,
    options: CheckOptions,
    cost: i64,
) -> Result<Option<CheckResult>> {
    let sync = engine
        .policy_at(policy)
        .sync()
        .ok_or_else(|| Error::Internal("a synced decision of a policy without sync".into()))?
        .clone();
    let clock = || options.now_ms.unwrap_or_else(process_now_ms);
    let Some(entry) = cache.entry(policy, key, clock()) else {
        return Ok(None);
    };
    // One sync in flight per key: the others wait here, then use its credit.
    let mut credit = entry.lock().await;
    let now = clock();
    let cost_u = cost as u64;
    if credit.live(now) {
        let last = credit.last.expect("live");
        if credit.units >= cost_u {
            credit.units -= cost_u;
            return Ok(Some(result(now, admitted(&credit, last, now))));
        }
        if credit.units == 0 && !last.allowed && last.retry_after_ms.is_some() {
            return Ok(Some(result(now, remembered(&credit, last, now))));
        }
    }
    // A sync replaces the credit: what is left of it (less than the cost) is dropped.
    *credit = Credit::default();
    let take = sync.share().max(cost_u) as i64;
    let Some((store_now, mut verdict)) = engine.store_take(policy, key, options.now_ms, take).await? else {
        // The store cannot answer: the policy's on_store_error, for this request's cost.
        return Ok(Some(engine.fallback(
            &[(policy, key, false)],
            options.now_ms,
            cost,
            true,
        )));
    };
    let mut taken = take;
    if !verdict.allowed && take > cost && verdict.remaining >= cost_u {
        // Not a whole share left: take what is.
        let again = verdict.remaining as i64;
        match engine.store_take(policy, key, options.now_ms, again).await? {
            Some((_, v)) => {
                verdict = v;
                taken = again;
            }
            None => {
                return Ok(Some(engine.fallback(
                    &[(policy, key, false)],
                    options.now_ms,
                    cost,
                    true,
                )))
            }
        }
    }
    let limit = engine.policy_at(policy).limit();
    let mut until = now + sync.interval_ms() as i64;
    let p = engine.policy_at(policy);
    if p.algorithm().is_window() {
        // A window's credit ends with the window it was charged in.
        let period = p.period_ms() as i64;
        let window_end = store_now - store_now.rem_euclid(period) + period;
        until = until.min(now + (window_end - store_now));
    }
    if verdict.allowed {
        credit.units = taken as u64 - cost_u;
        credit.until = until;
        credit.synced_at = now;
        let last = Decision::from_verdict(verdict, limit, Source::Store);
        credit.last = Some(last);
        return Ok(Some(result(now, admitted(&credit, last, now))));
    }
    let mut decision = Decision::from_verdict(verdict, limit, Source::Store);
    if let Some(retry) = verdict.retry_after_ms {
        // Remember the denial until this process asks again.
        credit.until = until.min(now + retry.max(1) as i64);
        credit.synced_at = now;
        credit.last = Some(decision);
        if taken != cost {
            // The store's wait was for the share: this request's is the next sync.
            decision.retry_after_ms = Some((credit.until - now).max(1) as u64);
        }
    }
    Ok(Some(result(now, decision)))
}

/// An admission from the credit: what the last sync left, plus the credit.
fn admitted(credit: &Credit, last: Decision, now: i64) -> Decision {
    let elapsed = (now - credit.synced_at).max(0) as u64;
    Decision {
        allowed: true,
        remaining: last.remaining.saturating_add(credit.units),
        reset_after_ms: last.reset_after_ms.saturating_sub(elapsed),
        retry_after_ms: None,
        delay_ms: 0,
        ..last
    }
}

/// A denial remembered from the last sync, aged by the time since.
fn remembered(credit: &Credit, last: Decision, now: i64) -> Decision {
    let elapsed = (now - credit.synced_at).max(0) as u64;
    Decision {
        allowed: false,
        reset_after_ms: last.reset_after_ms.saturating_sub(elapsed),
        retry_after_ms: Some((credit.until - now).max(1) as u64),
        delay_ms: 0,
        ..last
    }
}

fn result(now: i64, decision: Decision) -> CheckResult {
    CheckResult {
        allowed: decision.allowed,
        now_ms: now,
        decisions: vec![decision],
        leases: Vec::new(),
        overridden: Vec::new(),
        limited: Vec::new(),
    }
}
