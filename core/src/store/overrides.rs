//! The storage of per-key overrides (`crate::overrides`): the Redis record
//! and its keys, the script that sets, reads and removes it, and the memory
//! store's map. Checks read them in the same call that decides (`lua/overrides.lua`
//! on Redis, [`OverridesView`] on the memory store).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};

use crate::algorithm::{Kind, Params};
use crate::error::{Error, Result};
use crate::policy::{MAX_LOG_ENTRIES, MAX_SCALED};
use crate::store::keys::stored_key;

/// Which state an admission charged, for its refund: a refund goes only to
/// that state, and to nothing when it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charged {
    /// The state in force at the admission's time (a refund right after
    /// the admission, in the same pass: a cross-slot decision's).
    Now,
    /// The policy's own state: refunded there even if an override was set since.
    Base,
    /// An override's state: refunded only while an override is in force
    /// (removing, replacing or ending it clears or abandons that state).
    Override,
    /// A policy-wide limit's state (`crate::limits`): refunded only while
    /// that limit is in force and no per-key override has been set since
    /// (setting, replacing or removing the limit clears its state).
    Limit,
}

/// The Redis record of an override.
pub(crate) fn record(params: &Params, until: i64) -> [String; 5] {
    [
        params.count.to_string(),
        params.period.to_string(),
        params.burst.to_string(),
        params.max_delay.to_string(),
        until.to_string(),
    ]
}

/// Parses a record as `overrides.lua` does: `None` for anything else.
pub(crate) fn parse_record(raw: &str, kind: Kind) -> Option<([i64; 4], i64)> {
    let rest = raw.strip_prefix("o1 ")?;
    let mut numbers = [0i64; 5];
    let mut parts = rest.split(' ');
    for n in numbers.iter_mut() {
        let part = parts.next()?;
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *n = part.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    let [c, p, b, d, u] = numbers;
    let max = MAX_SCALED as i64;
    let valid = c >= 1
        && p >= 1
        && b >= 1
        && c <= max
        && p <= max
        && b.checked_mul(p).is_some_and(|v| v <= max)
        && d <= max
        && u <= max
        && (kind != Kind::SlidingWindowLog || b <= MAX_LOG_ENTRIES as i64);
    valid.then_some(([c, p, b, d], u))
}

/// The start of the override and limit record scripts: `now` (ARGV[1], or
/// the server's TIME when empty), the op (ARGV[2]), and `get` answered.
macro_rules! record_script_prelude {
    () => {
        r#"
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local op = ARGV[2]
if op == 'get' then
  local raw = redis.pcall('GET', KEYS[1])
  if type(raw) ~= 'string' then raw = '' end
  return {raw, now}
end
"#
    };
}

/// Sets (`ARGV[2]` = `set`), reads (`get`) or removes (`del`) an override.
/// KEYS: the record, then the override's state keys. ARGV: now_ms ('' = the
/// server's TIME), op, then for `set` count, period, burst, max_delay, ttl_ms
/// (0 = none). Setting or removing clears the override's state. Returns
/// {record or '', now} for `get`, {removed (0/1), now} for `del`, {1, now} for `set`.
pub(crate) const SCRIPT: &str = concat!(
    record_script_prelude!(),
    r#"
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
if op == 'del' then
  return {redis.call('DEL', KEYS[1]), now}
end
local ttl = tonumber(ARGV[7])
local untl = 0
if ttl > 0 then untl = now + ttl end
local value = 'o1 ' .. ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6] .. ' ' .. string.format('%d', untl)
if ttl > 0 then
  redis.call('SET', KEYS[1], value, 'PX', ttl)
else
  redis.call('SET', KEYS[1], value)
end
return {1, now}
"#
);

pub(crate) fn script_sha() -> &'static str {
    static SHA: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| redis::Script::new(SCRIPT).get_hash().to_string());
    &SHA
}

/// The suffix of an override's record, after a key's main store key.
pub(crate) const RECORD_SUFFIX: &str = ":override";
/// The suffix of an override's state key.
pub(crate) const STATE_SUFFIX: &str = ":override:state";

/// The override keys of a main store key: the record, then the state keys.
pub(crate) fn redis_keys(main: &str, params: &Params) -> [Option<String>; 3] {
    [
        Some(format!("{main}{RECORD_SUFFIX}")),
        Some(format!("{main}{STATE_SUFFIX}")),
        (params.key_count() == 2).then(|| format!("{main}{STATE_SUFFIX}:log")),
    ]
}

/// The suffix of the key holding the generation of the policy-wide limit
/// whose state a key's limit state keys hold.
pub(crate) const LIMIT_GEN_SUFFIX: &str = ":limit:gen";
/// The suffix of a key's state under a policy-wide limit.
pub(crate) const LIMIT_STATE_SUFFIX: &str = ":limit:state";

/// The policy-wide limit keys of a main store key, after the policy's
/// limit `record` (another slot on a cluster: `None` there, where the
/// record comes from the process's cache): the generation key, then the state keys.
pub(crate) fn limit_keys(main: &str, record: Option<String>, params: &Params) -> [Option<String>; 4] {
    [
        record,
        Some(format!("{main}{LIMIT_GEN_SUFFIX}")),
        Some(format!("{main}{LIMIT_STATE_SUFFIX}")),
        (params.key_count() == 2).then(|| format!("{main}{LIMIT_STATE_SUFFIX}:log")),
    ]
}

/// Parses a policy-wide limit record, `l1 <count> <period_ms> <burst>
/// <max_delay> <until_ms> <generation>`, as `overrides.lua` does: `None` for
/// anything else. Returns the numbers, `until_ms` and the generation.
pub(crate) fn parse_limit_record(raw: &str, kind: Kind) -> Option<([i64; 4], i64, u64)> {
    let rest = raw.strip_prefix("l1 ")?;
    let (numbers, generation) = rest.rsplit_once(' ')?;
    if generation.is_empty() || generation.len() > 20 || !generation.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let generation: u64 = generation.parse().ok()?;
    let (params, until) = parse_record(&format!("o1 {numbers}"), kind)?;
    Some((params, until, generation))
}

/// Sets (`ARGV[2]` = `set`), reads (`get`) or removes (`del`) a policy-wide
/// limit. KEYS: the record. ARGV: now_ms ('' = the server's TIME), op, then
/// for `set` count, period, burst, max_delay, ttl_ms (0 = none), generation.
/// Returns {record or '', now} for `get`, {removed (0/1), now} for `del`,
/// {1, now} for `set`. The state under a limit is keyed by its generation:
/// every key's old limit state is dropped at its next check.
pub(crate) const LIMIT_SCRIPT: &str = concat!(
    record_script_prelude!(),
    r#"
if op == 'del' then
  local raw = redis.pcall('GET', KEYS[1])
  redis.call('DEL', KEYS[1])
  if type(raw) ~= 'string' then raw = '' end
  return {raw, now}
end
local ttl = tonumber(ARGV[7])
local untl = 0
if ttl > 0 then untl = now + ttl end
local value = 'l1 ' .. ARGV[3] .. ' ' .. ARGV[4] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6] .. ' ' .. string.format('%d', untl) .. ' ' .. ARGV[8]
if ttl > 0 then
  redis.call('SET', KEYS[1], value, 'PX', ttl)
else
  redis.call('SET', KEYS[1], value)
end
return {1, now}
"#
);

pub(crate) fn limit_script_sha() -> &'static str {
    static SHA: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| redis::Script::new(LIMIT_SCRIPT).get_hash().to_string());
    &SHA
}

/// How often, at most, a process on Redis Cluster reads a policy's limit
/// record (a script there cannot read a key of another slot): the bound
/// within which a change made by another process applies.
pub const CLUSTER_REFRESH_MS: i64 = 1_000;

/// A policy-wide limit of the memory store.
#[derive(Clone)]
pub(crate) struct LimitEntry {
    pub(crate) params: Params,
    /// `i64::MAX`: no end.
    pub(crate) expires_at: i64,
}

/// The memory store's policy-wide limits, per policy slot.
#[derive(Default)]
pub(crate) struct MemoryLimits {
    map: RwLock<HashMap<u32, LimitEntry>>,
    count: AtomicUsize,
}

/// The limits, read-locked for a decision: setting one waits for it.
pub(crate) struct LimitsView<'a>(RwLockReadGuard<'a, HashMap<u32, LimitEntry>>);

impl LimitsView<'_> {
    /// The numbers in force for policy `slot` at `now`.
    pub(crate) fn params(&self, slot: u32, now: i64) -> Option<&Params> {
        let entry = self.0.get(&slot)?;
        (now < entry.expires_at).then_some(&entry.params)
    }
}

impl MemoryLimits {
    /// Whether any limit was ever set and not removed.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn view(&self) -> LimitsView<'_> {
        LimitsView(self.map.read())
    }

    /// Sets the limit of policy `slot`; `clear` runs under the lock (clearing
    /// the limit's state), so no decision sees the new numbers on old state.
    pub(crate) fn set(&self, slot: u32, entry: LimitEntry, clear: impl FnOnce()) {
        let mut map = self.map.write();
        clear();
        if map.insert(slot, entry).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn get(&self, slot: u32, now: i64) -> Option<LimitEntry> {
        let map = self.map.read();
        map.get(&slot).filter(|e| now < e.expires_at).cloned()
    }

    /// Removes the limit of `slot`: whether one was in force at `now`.
    pub(crate) fn remove(&self, slot: u32, now: i64, clear: impl FnOnce()) -> bool {
        let mut map = self.map.write();
        clear();
        let removed = map.remove(&slot);
        if removed.is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        removed.is_some_and(|e| now < e.expires_at)
    }
}

/// One override of the memory store.
struct Entry {
    params: Params,
    /// `i64::MAX`: no end.
    expires_at: i64,
}

/// The memory store's overrides: per policy slot, per stored key. At most
/// `max_keys` of them (expired ones are purged first).
pub(crate) struct MemoryOverrides {
    map: RwLock<HashMap<u32, HashMap<Box<str>, Entry>>>,
    count: AtomicUsize,
    max: usize,
}

/// The overrides, read-locked for a decision: setting one waits for it.
pub(crate) struct OverridesView<'a>(RwLockReadGuard<'a, HashMap<u32, HashMap<Box<str>, Entry>>>);

impl OverridesView<'_> {
    /// The numbers in force for `key` of policy `slot` at `now`.
    pub(crate) fn params(&self, slot: u32, key: &str, now: i64) -> Option<&Params> {
        let entry = self.0.get(&slot)?.get(&*stored_key(key))?;
        (now < entry.expires_at).then_some(&entry.params)
    }
}

impl MemoryOverrides {
    pub(crate) fn new(max: usize) -> MemoryOverrides {
        MemoryOverrides {
            map: RwLock::new(HashMap::new()),
            count: AtomicUsize::new(0),
            max: max.max(1),
        }
    }

    /// Whether any override was ever set and not removed: when none was,
    /// checks skip them without a lock.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn view(&self) -> OverridesView<'_> {
        OverridesView(self.map.read())
    }

    /// Sets an override; `clear` runs under the lock (clearing the
    /// override's state), so no decision sees the new numbers on old state.
    pub(crate) fn set(
        &self,
        slot: u32,
        key: &str,
        params: Params,
        expires_at: i64,
        now: i64,
        clear: impl FnOnce(),
    ) -> Result<()> {
        let mut map = self.map.write();
        let stored: Box<str> = stored_key(key).into();
        let exists = map.get(&slot).is_some_and(|m| m.contains_key(&stored));
        if !exists && self.count.load(Ordering::Relaxed) >= self.max {
            for m in map.values_mut() {
                m.retain(|_, e| now < e.expires_at);
            }
            let left = map.values().map(HashMap::len).sum();
            self.count.store(left, Ordering::Relaxed);
            if left >= self.max {
                return Err(Error::config(
                    "override",
                    format!("{key:?}"),
                    format!(
                        "cannot be set: the memory store holds max_keys ({}) overrides",
                        self.max
                    ),
                ));
            }
        }
        clear();
        if map
            .entry(slot)
            .or_default()
            .insert(stored, Entry { params, expires_at })
            .is_none()
        {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    pub(crate) fn get(&self, slot: u32, key: &str, now: i64) -> Option<(Params, i64)> {
        let map = self.map.read();
        let entry = map.get(&slot)?.get(&*stored_key(key))?;
        (now < entry.expires_at).then(|| (entry.params.clone(), entry.expires_at))
    }

    pub(crate) fn remove(&self, slot: u32, key: &str, now: i64, clear: impl FnOnce()) -> bool {
        let mut map = self.map.write();
        clear();
        let removed = map.get_mut(&slot).and_then(|m| m.remove(&*stored_key(key)));
        if removed.is_some() {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        removed.is_some_and(|e| now < e.expires_at)
    }
}

/// A limiter without `overrides: true` on a Redis store, and the overrides
/// others set in that store, which it ignores (SPEC §11: it says so once).
/// `set_override` marks the policy in the store (one key per policy, living
/// as long as its longest override); such a limiter looks for the mark once
/// per policy per minute at most, in a task of its own started by a check
/// (never on the request's path: the check pays one atomic read), and logs
/// one line on stderr (and `polylimit_overrides_ignored{policy}` 1) the
/// first time it finds it, then never looks again.
pub(crate) struct IgnoredOverrides {
    /// Per policy: the process clock (ms) of the next look; `i64::MAX`: found.
    pub(crate) next: Vec<std::sync::atomic::AtomicI64>,
}

impl IgnoredOverrides {
    pub(crate) fn new(policies: usize) -> IgnoredOverrides {
        IgnoredOverrides {
            next: (0..policies).map(|_| std::sync::atomic::AtomicI64::new(0)).collect(),
        }
    }

    /// The policies (of `names`, in order) found with overrides: each is
    /// `polylimit_overrides_ignored{policy}` 1.
    pub(crate) fn found(&self, names: impl Iterator<Item = String>) -> Vec<String> {
        names
            .zip(&self.next)
            .filter(|(_, n)| n.load(std::sync::atomic::Ordering::Relaxed) == i64::MAX)
            .map(|(name, _)| name)
            .collect()
    }
}
