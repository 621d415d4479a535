//! The embedded store: sharded maps, one lock per shard, idle keys expire,
//! and `max_keys` bounds memory whatever the key cardinality.

use std::borrow::Cow;
use std::hash::{BuildHasher, Hash, Hasher};

use indexmap::{Equivalent, IndexMap};
use parking_lot::{Mutex, MutexGuard};

use crate::algorithm::adaptive;
use crate::algorithm::penalty::{blocked_for, record_denial, PenaltyParams};
use crate::algorithm::refund::refund;
use crate::algorithm::{blocked, decide, Params, State, Update, Verdict};
use crate::store::keys::stored_key;

const SHARDS: usize = 64;
/// Entries examined for expiry on each new key, so idle keys are reclaimed
/// without a background task.
const SWEEP_PER_INSERT: usize = 2;
/// Entries sampled when a full shard must evict one.
const EVICTION_SAMPLE: usize = 5;
/// Penalty records live beside the policy's keys, in a slot of their own.
const PENALTY_SLOT: u32 = 1 << 31;
/// The state of a key under a per-key override lives in a slot of its own,
/// so the policy's state is never read with the override's numbers.
pub(crate) const OVERRIDE_SLOT: u32 = 1 << 30;
/// Adaptive records (`algorithm::adaptive`) too.
const ADAPTIVE_SLOT: u32 = 1 << 29;
/// The state of a key under a policy-wide limit (`crate::limits`): a slot of
/// its own, cleared whenever the limit is set or removed.
pub(crate) const LIMIT_SLOT: u32 = 1 << 28;

/// Identifies a key of one policy (`slot`: the number the engine gave the
/// policy's state head, or its records' head, `store::keys`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct MapKey {
    slot: u32,
    key: Box<str>,
}

/// The borrowed form used for lookups, so a warm key costs no allocation.
struct MapKeyRef<'a> {
    slot: u32,
    key: &'a str,
}

impl Hash for MapKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.slot);
        self.key.hash(state);
    }
}

impl Hash for MapKeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u32(self.slot);
        self.key.hash(state);
    }
}

impl Equivalent<MapKey> for MapKeyRef<'_> {
    fn equivalent(&self, other: &MapKey) -> bool {
        self.slot == other.slot && self.key == &*other.key
    }
}

struct Entry {
    state: State,
    /// Once `now >= expires_at`, the state equals that of a new key.
    expires_at: i64,
}

/// Seeded per store from a per-process random seed, so nobody can compute
/// offline which keys share a shard or a bucket.
type Hasher64 = foldhash::fast::RandomState;

#[derive(Default)]
struct Shard {
    map: IndexMap<MapKey, Entry, Hasher64>,
    rng: u64,
}

impl Shard {
    fn live(&self, key: &MapKeyRef<'_>, now: i64) -> Option<&State> {
        self.map.get(key).filter(|e| now < e.expires_at).map(|e| &e.state)
    }

    fn next_random(&mut self) -> usize {
        // xorshift64: sampling needs spread, not quality.
        let mut x = self.rng | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x as usize
    }

    /// Stores `update` for `key`: on its entry, or on a new one.
    #[inline]
    fn store(&mut self, key: &MapKeyRef<'_>, update: Update, now: i64, ttl: u64, cap: usize) {
        match self.map.get_index_of(key) {
            Some(index) => self.update_at(index, update, now, ttl),
            None => self.insert(key, update, now, ttl, cap),
        }
    }

    /// Decides one check and stores its update, looking the key up once.
    #[inline]
    fn decide_and_store(
        &mut self,
        key: &MapKeyRef<'_>,
        check: &MemoryCheck<'_>,
        now: i64,
        cost: i64,
        cap: usize,
    ) -> Verdict {
        let index = self.map.get_index_of(key);
        let live = index
            .and_then(|i| self.map.get_index(i))
            .filter(|(_, e)| now < e.expires_at)
            .map(|(_, e)| &e.state);
        let (verdict, update) = decide(check.params, live, now, cost);
        if let Some(update) = update {
            let update = update.with_lease(check.lease);
            let ttl = verdict.reset_after_ms;
            match index {
                Some(index) => self.update_at(index, update, now, ttl),
                None => self.insert(key, update, now, ttl, cap),
            }
        }
        verdict
    }

    /// Stores `update` on the entry at `index`.
    #[inline]
    fn update_at(&mut self, index: usize, update: Update, now: i64, ttl: u64) {
        let expires_at = now.saturating_add(ttl.max(1) as i64);
        if let Some((_, entry)) = self.map.get_index_mut(index) {
            let old = std::mem::replace(&mut entry.state, State::Cells([0; 3]));
            let old = (now < entry.expires_at).then_some(old);
            entry.state = update.apply(old);
            entry.expires_at = expires_at;
        }
    }

    /// Stores `update` for a key the shard does not hold.
    fn insert(&mut self, key: &MapKeyRef<'_>, update: Update, now: i64, ttl: u64, cap: usize) {
        let expires_at = now.saturating_add(ttl.max(1) as i64);
        self.sweep(now, SWEEP_PER_INSERT);
        if self.map.len() >= cap {
            self.evict_one();
        }
        let owned = MapKey {
            slot: key.slot,
            key: key.key.into(),
        };
        self.map.insert(
            owned,
            Entry {
                state: update.apply(None),
                expires_at,
            },
        );
    }

    /// Removes expired entries among `n` random ones.
    fn sweep(&mut self, now: i64, n: usize) {
        for _ in 0..n.min(self.map.len()) {
            let i = self.next_random() % self.map.len();
            if self.map[i].expires_at <= now {
                self.map.swap_remove_index(i);
            }
        }
    }

    /// Frees one place: an expired entry if a sample finds one, otherwise the
    /// sampled entry closest to expiring (approximate LRU, as Redis does).
    fn evict_one(&mut self) {
        let mut victim: Option<(usize, i64)> = None;
        for _ in 0..EVICTION_SAMPLE.min(self.map.len()) {
            let i = self.next_random() % self.map.len();
            let expires_at = self.map[i].expires_at;
            if victim.is_none_or(|(_, best)| expires_at < best) {
                victim = Some((i, expires_at));
            }
        }
        if let Some((i, _)) = victim {
            self.map.swap_remove_index(i);
        }
    }
}

/// One check against the memory store.
pub(crate) struct MemoryCheck<'a> {
    /// Where the state is (the policy's, or `| OVERRIDE_SLOT` an override's).
    pub slot: u32,
    /// Where the policy's penalty and adaptive records are.
    pub records: u32,
    pub params: &'a Params,
    pub key: &'a str,
    /// A shadow check's denial blocks nothing (and so charges the others).
    pub shadow: bool,
    pub penalty: Option<&'a PenaltyParams>,
    /// Concurrency: the id of the lease an admission takes.
    pub lease: Option<&'a str>,
}

/// The embedded, process-local store.
pub(crate) struct MemoryStore {
    shards: Box<[Mutex<Shard>]>,
    per_shard_cap: usize,
    hasher: Hasher64,
    /// Per-key overrides (`crate::overrides`); empty unless one was set.
    pub(crate) overrides: crate::store::overrides::MemoryOverrides,
    /// Policy-wide limits (`crate::limits`); empty unless one was set.
    pub(crate) limits: crate::store::overrides::MemoryLimits,
}

impl MemoryStore {
    pub fn new(max_keys: usize) -> MemoryStore {
        let hasher = Hasher64::default();
        let shards = (0..SHARDS)
            .map(|i| {
                Mutex::new(Shard {
                    map: IndexMap::with_hasher(Hasher64::default()),
                    // Eviction samples are unpredictable too.
                    rng: hasher.hash_one(i),
                })
            })
            .collect();
        MemoryStore {
            shards,
            per_shard_cap: (max_keys / SHARDS).max(1),
            hasher,
            overrides: crate::store::overrides::MemoryOverrides::new(max_keys),
            limits: crate::store::overrides::MemoryLimits::default(),
        }
    }

    #[inline]
    fn shard_of(&self, key: &MapKeyRef<'_>) -> usize {
        (self.hasher.hash_one(key) >> 58) as usize % SHARDS
    }

    /// Decides every check atomically: each sees the state of its key, and
    /// none is charged unless every non-shadow check allows (and `charge` is
    /// set). Penalties record the denials of their policy when charging.
    #[inline]
    pub fn decide(&self, checks: &[MemoryCheck<'_>], now: i64, cost: i64, charge: bool) -> (bool, Vec<Verdict>) {
        let plain = |c: &MemoryCheck<'_>| c.penalty.is_none() && c.params.adaptive.is_none();
        if let ([one], true, true) = (checks, charge, checks.iter().all(plain)) {
            let verdict = self.decide_one(one, now, cost);
            return (verdict.allowed || one.shadow, vec![verdict]);
        }
        // Every key touched: the checks' keys, then their penalty records.
        let stored: Vec<Cow<'_, str>> = checks.iter().map(|c| stored_key(c.key)).collect();
        let mut keys: Vec<MapKeyRef<'_>> = checks
            .iter()
            .zip(&stored)
            .map(|(c, key)| MapKeyRef { slot: c.slot, key })
            .collect();
        let penalty_keys: Vec<Option<usize>> = checks
            .iter()
            .zip(&stored)
            .map(|(c, key)| {
                c.penalty.map(|_| {
                    keys.push(MapKeyRef {
                        slot: c.records | PENALTY_SLOT,
                        key,
                    });
                    keys.len() - 1
                })
            })
            .collect();
        let adaptive_keys: Vec<Option<usize>> = checks
            .iter()
            .zip(&stored)
            .map(|(c, key)| {
                c.params.adaptive.as_ref().map(|_| {
                    keys.push(MapKeyRef {
                        slot: c.records | ADAPTIVE_SLOT,
                        key,
                    });
                    keys.len() - 1
                })
            })
            .collect();
        let shard_ids: Vec<usize> = keys.iter().map(|k| self.shard_of(k)).collect();
        // Lock shards in ascending order so concurrent multi-key checks cannot deadlock.
        let mut order = shard_ids.clone();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, Shard>> = order.iter().map(|&s| self.shards[s].lock()).collect();
        let guard_of = |key: usize| order.binary_search(&shard_ids[key]).unwrap_or(0);
        let penalty_cells =
            |guards: &[MutexGuard<'_, Shard>], key: usize| match guards[guard_of(key)].live(&keys[key], now) {
                Some(State::Penalty(cells)) => Some(*cells),
                _ => None,
            };

        let mut verdicts = Vec::with_capacity(checks.len());
        let mut updates = Vec::with_capacity(checks.len());
        let mut steps = Vec::new();
        for (i, check) in checks.iter().enumerate() {
            let record = penalty_keys[i].and_then(|k| penalty_cells(&guards, k));
            let wait = blocked_for(record.as_ref(), now);
            let step = check.params.adaptive.as_ref().zip(adaptive_keys[i]).map(|(p, k)| {
                let cells = match guards[guard_of(k)].live(&keys[k], now) {
                    Some(State::Adaptive(c)) => Some(*c),
                    _ => None,
                };
                (k, p, adaptive::step(p, cells.as_ref(), now, cost))
            });
            let (mut verdict, update) = match (wait, &step) {
                (1.., _) => (blocked(wait), None),
                (
                    _,
                    Some((
                        _,
                        _,
                        adaptive::Step {
                            deny_retry: Some(retry),
                            ..
                        },
                    )),
                ) => (adaptive::denied(*retry), None),
                _ => decide(check.params, guards[guard_of(i)].live(&keys[i], now), now, cost),
            };
            if let Some((k, p, mut step)) = step {
                if !charge {
                    step.report.transition = adaptive::Transition::None;
                }
                verdict.adaptive = Some(step.report);
                steps.push((k, p, step.cells));
            }
            verdicts.push(verdict);
            updates.push(update);
        }
        let all = checks.iter().zip(&verdicts).all(|(c, v)| v.allowed || c.shadow);
        if !charge {
            return (all, verdicts);
        }
        for (k, p, mut cells) in steps {
            if all {
                adaptive::admitted(&mut cells, cost);
            }
            let update = Update::Adaptive(cells);
            guards[guard_of(k)].store(&keys[k], update, now, p.ttl() as u64, self.per_shard_cap);
        }
        if all {
            for (i, update) in updates.into_iter().enumerate() {
                if let Some(update) = update {
                    let update = update.with_lease(checks[i].lease);
                    let ttl = verdicts[i].reset_after_ms;
                    guards[guard_of(i)].store(&keys[i], update, now, ttl, self.per_shard_cap);
                }
            }
        }
        for (i, check) in checks.iter().enumerate() {
            if let (Some(params), Some(k)) = (check.penalty, penalty_keys[i]) {
                if !verdicts[i].allowed && !verdicts[i].penalized && !verdicts[i].adaptive.is_some_and(|a| a.denied) {
                    let violation = record_denial(params, penalty_cells(&guards, k).as_ref(), now);
                    if let Some(ms) = violation.block_ms {
                        verdicts[i].start_block(ms);
                    }
                    let update = Update::Penalty(violation.cells);
                    guards[guard_of(k)].store(&keys[k], update, now, violation.ttl_ms as u64, self.per_shard_cap);
                }
            }
        }
        (all, verdicts)
    }

    #[inline]
    pub fn decide_one(&self, check: &MemoryCheck<'_>, now: i64, cost: i64) -> Verdict {
        let stored = stored_key(check.key);
        let key = MapKeyRef {
            slot: check.slot,
            key: &stored,
        };
        self.shards[self.shard_of(&key)]
            .lock()
            .decide_and_store(&key, check, now, cost, self.per_shard_cap)
    }

    /// Gives back admissions of `cost` at `now` ([`refund`]), key by key;
    /// a negative `cost` is a forced debit (a new key's state when none is live).
    /// Returns how many checks' charges were given back.
    pub fn refund(&self, checks: &[MemoryCheck<'_>], now: i64, cost: i64) -> usize {
        let mut refunded = 0;
        for check in checks {
            let stored = stored_key(check.key);
            let key = MapKeyRef {
                slot: check.slot,
                key: &stored,
            };
            let mut shard = self.shards[self.shard_of(&key)].lock();
            if cost < 0 && shard.map.get(&key).is_none_or(|e| now >= e.expires_at) {
                // A forced debit on a new (or expired) key starts from a new key's state.
                if let Some((state, ttl)) = crate::algorithm::refund::debit(check.params, None, now, -cost) {
                    if shard.map.len() >= self.per_shard_cap {
                        shard.evict_one();
                    }
                    shard.map.insert(
                        MapKey {
                            slot: key.slot,
                            key: key.key.into(),
                        },
                        Entry {
                            state,
                            expires_at: now.saturating_add(ttl.max(1)),
                        },
                    );
                    refunded += 1;
                }
                continue;
            }
            let Some(entry) = shard.map.get_mut(&key).filter(|e| now < e.expires_at) else {
                continue;
            };
            if let Some(ttl) = refund(check.params, &mut entry.state, now, cost) {
                entry.expires_at = now.saturating_add(ttl.max(1));
                refunded += 1;
            }
        }
        refunded
    }

    /// Releases the lease `id` of a key of one policy. True if it was live
    /// at `now`; an unknown, released or ended lease changes nothing.
    pub fn release(&self, slot: u32, key: &str, id: &str, now: i64) -> bool {
        let stored = stored_key(key);
        let key = MapKeyRef { slot, key: &stored };
        let mut shard = self.shards[self.shard_of(&key)].lock();
        match shard.map.get_mut(&key).filter(|e| now < e.expires_at) {
            Some(Entry {
                state: State::Leases(leases),
                ..
            }) => leases.release(id, now),
            _ => false,
        }
    }

    /// Forgets a key of one policy (its state in `slot`), and its penalty
    /// and adaptive records (in `records`).
    pub fn reset(&self, slot: u32, records: u32, key: &str) {
        let stored = stored_key(key);
        // The policy's state, then its penalty record.
        for slot in [slot, records | PENALTY_SLOT, records | ADAPTIVE_SLOT] {
            let key = MapKeyRef { slot, key: &stored };
            self.shards[self.shard_of(&key)].lock().map.swap_remove(&key);
        }
    }

    /// Forgets every key of one slot (the state under a policy-wide limit
    /// that was set or removed): one pass over every shard.
    pub fn reset_slot(&self, slot: u32) {
        for shard in self.shards.iter() {
            shard.lock().map.retain(|k, _| k.slot != slot);
        }
    }

    /// Keys held, including expired ones not yet reclaimed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.len()).sum()
    }

    /// Bytes of user key held, over every entry.
    #[cfg(test)]
    pub fn key_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().map.keys().map(|k| k.key.len()).sum::<usize>())
            .sum()
    }

    /// Drops every expired key now (also done incrementally on inserts).
    #[cfg(test)]
    pub fn purge_expired(&self, now: i64) {
        for shard in self.shards.iter() {
            shard.lock().map.retain(|_, e| e.expires_at > now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use serde_json::json;

    fn params(rate: &str) -> Params {
        Params::new(&Policy::from_value(&json!({"rate": rate}), "").unwrap())
    }

    #[test]
    fn max_keys_bounds_memory() {
        let store = MemoryStore::new(640);
        let p = params("1/h");
        for i in 0..100_000 {
            let key = format!("attacker-{i}");
            assert!(
                store
                    .decide_one(
                        &MemoryCheck {
                            slot: 0,
                            records: 0,
                            params: &p,
                            key: &key,
                            shadow: false,
                            penalty: None,
                            lease: None
                        },
                        1_000,
                        1
                    )
                    .allowed
            );
        }
        assert!(store.len() <= 640, "{} keys", store.len());
    }

    #[test]
    fn max_keys_bounds_key_bytes() {
        let store = MemoryStore::new(640);
        let p = params("1/h");
        let mut key = "k".repeat(100 * 1024);
        for i in 0..1000 {
            key.truncate(100 * 1024 - 8);
            key.push_str(&format!("{i:08}"));
            let check = MemoryCheck {
                slot: 0,
                records: 0,
                params: &p,
                key: &key,
                shadow: false,
                penalty: None,
                lease: None,
            };
            assert!(store.decide_one(&check, 1_000, 1).allowed);
            if i % 100 == 0 {
                // The same long key is limited on its second check.
                assert!(!store.decide_one(&check, 1_000, 1).allowed);
            }
        }
        let bytes = store.key_bytes();
        assert!(bytes <= 640 * 128, "{bytes} bytes of keys for {} keys", store.len());
    }

    #[test]
    fn shards_are_seeded_per_store() {
        let shards = |store: &MemoryStore| -> Vec<usize> {
            (0..64)
                .map(|i| {
                    let key = format!("k{i}");
                    store.shard_of(&MapKeyRef { slot: 0, key: &key })
                })
                .collect()
        };
        let a = MemoryStore::new(1000);
        assert_eq!(shards(&a), shards(&a), "stable within a store");
        // With a fixed seed every store maps the keys alike (and anyone can
        // compute the mapping offline); seeded, 64 keys all landing alike has
        // probability 64^-64.
        assert_ne!(shards(&a), shards(&MemoryStore::new(1000)));
    }

    #[test]
    fn idle_keys_expire() {
        let store = MemoryStore::new(1_000_000);
        let p = params("10/s");
        for i in 0..1000 {
            let key = format!("k{i}");
            store.decide_one(
                &MemoryCheck {
                    slot: 0,
                    records: 0,
                    params: &p,
                    key: &key,
                    shadow: false,
                    penalty: None,
                    lease: None,
                },
                0,
                1,
            );
        }
        assert_eq!(store.len(), 1000);
        // 100 ms later every bucket is full again; new keys sweep the old ones.
        for i in 0..5000 {
            let key = format!("n{i}");
            store.decide_one(
                &MemoryCheck {
                    slot: 0,
                    records: 0,
                    params: &p,
                    key: &key,
                    shadow: false,
                    penalty: None,
                    lease: None,
                },
                10_000 + i,
                1,
            );
        }
        assert!(store.len() < 6000, "sweeping reclaimed expired keys: {}", store.len());
        store.purge_expired(1_000_000);
        assert_eq!(store.len(), 0);
    }

    #[test]
    fn slots_isolate_policies() {
        let store = MemoryStore::new(1000);
        let p = params("1/h");
        assert!(
            store
                .decide_one(
                    &MemoryCheck {
                        slot: 0,
                        records: 0,
                        params: &p,
                        key: "k",
                        shadow: false,
                        penalty: None,
                        lease: None
                    },
                    0,
                    1
                )
                .allowed
        );
        assert!(
            !store
                .decide_one(
                    &MemoryCheck {
                        slot: 0,
                        records: 0,
                        params: &p,
                        key: "k",
                        shadow: false,
                        penalty: None,
                        lease: None
                    },
                    0,
                    1
                )
                .allowed
        );
        assert!(
            store
                .decide_one(
                    &MemoryCheck {
                        slot: 1,
                        records: 1,
                        params: &p,
                        key: "k",
                        shadow: false,
                        penalty: None,
                        lease: None
                    },
                    0,
                    1
                )
                .allowed
        );
    }

    #[test]
    fn multi_key_charges_nothing_when_one_denies() {
        let store = MemoryStore::new(1000);
        let wide = params("10/h");
        let narrow = params("1/h");
        let checks = [
            MemoryCheck {
                slot: 0,
                records: 0,
                params: &wide,
                key: "k",
                shadow: false,
                penalty: None,
                lease: None,
            },
            MemoryCheck {
                slot: 1,
                records: 1,
                params: &narrow,
                key: "k",
                shadow: false,
                penalty: None,
                lease: None,
            },
        ];
        assert!(store.decide(&checks, 0, 1, true).0);
        let (all, verdicts) = store.decide(&checks, 0, 1, true);
        assert!(!all);
        assert!(verdicts[0].allowed && !verdicts[1].allowed);
        assert_eq!(
            store.decide_one(&checks[0], 0, 1).remaining,
            8,
            "the wide limit was charged once, not twice"
        );
    }
}
