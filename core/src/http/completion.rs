//! "After the response": a rule's `count` (which responses are charged) and
//! the completion token that carries what to do once the status is known.
//!
//! A request is checked and charged before the handler, as every request is
//! (so concurrent attempts cannot all pass on a budget already spent). When
//! it was allowed and some rule of it does not count every status, its
//! [`Outcome`](super::Outcome) carries a completion token; after the response
//! the middleware calls [`Limiter::complete`](crate::Limiter::complete)
//! with the status, and the core gives back, with the exact inverse of each
//! algorithm (`algorithm/refund.rs`, `lua/refund.lua`), the charge of every target
//! whose rule does not count that status, at the decision's own time and cost.
//!
//! # What a completion gives back
//!
//! - **Once.** A token completes once: the limiter keeps the tokens it gave
//!   out and not completed yet ([`Tokens`], in this process, at most
//!   [`MAX_OUTSTANDING`]); the first completion takes the token out, a later
//!   one (or one of a token forgotten because more than that many were
//!   outstanding, oldest first) gives nothing back and is no error. The
//!   leases a token carries are released by every completion (a release is
//!   idempotent), so a forgotten token never holds a slot.
//! - **Only to the state that was charged.** The token says whether each
//!   charge went to a per-key override's state (`o` in its record) or to the
//!   policy's own. An override's charge comes back only while an override is
//!   in force for that key (removing or replacing one clears its state; on
//!   Redis the record ends with its TTL); a policy's own charge comes back
//!   to the policy's state even if an override was set since. The window
//!   algorithms keep when their state was created (`fixed_window.rs`,
//!   `sliding_window_counter.rs`): a state created after the admission's ms
//!   (the key was reset or expired, then admitted again) never held the
//!   charge and gives nothing back; a window that moved on neither. The
//!   buckets (token bucket, GCRA, leaky bucket) give back only while no
//!   admission at a later ms touched the key, and the sliding log only an
//!   entry logged at the admission's ms (`algorithm/refund.rs`).
//!
//! What remains inexact (never more than one request's cost, and only in
//! these cases): a reset (or an override removed and set again) and a new
//! admission of the same key in the same millisecond as the refunded
//! admission are not told apart from it; an override whose TTL ended while
//! the request ran is still "in force" for the memory store, which reads
//! overrides on the decision's clock (that state is no longer read by any
//! decision, so nothing is admitted by it, but `complete` counts it as given
//! back, where Redis, whose record expired, counts nothing); tokens live in
//! the process that gave them out (a token completed by another process, or
//! after a restart, gives nothing back).
//!
//! # The token
//!
//! A string, server-side only (never a header), made of records separated by
//! `;`, each starting with its kind, so another after-response action can be
//! added as a new kind:
//!
//! ```text
//! token  = "pl1" ";n" now_ms ";c" cost ";t" nonce [";g"] [";m" max_cost] *( ";r" target )
//! max_cost = a request with a cost rule: the most it may be charged in all;
//!          ; its targets are then all listed, count "all" included
//! nonce  = the token's number in its limiter's registry of outstanding tokens
//! target = ("s" / "l") ["o" / "p"] policy_index "," count "," key
//!          ; s: the store decided, l: the local fallback; o: under a per-key override,
//!          ; p: under a policy-wide limit (`crate::limits`)
//! count  = "failed" / "successful" / item *( "+" item ) ; item: "4xx" or "401"
//! ```
//!
//!
//! The token also carries the concurrency leases the request took (records
//! of kind `e`), released after the response whatever its status:
//!
//! ```text
//! lease  = "e" policy_index "," lease_id "," key
//! ```
//!
//! `key` is the target's key with `%` and `;` percent-escaped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::Value;

use crate::decision::{Lease, Source};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::store::overrides::Charged;

/// Which responses a rule charges (`count` of a rule or a route's shorthand).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Count {
    /// Every request (the default): nothing to do after the response.
    #[default]
    All,
    /// Status >= 400, or no response at all (a handler error, a client that went away).
    Failed,
    /// Status < 400.
    Successful,
    /// The statuses listed: classes (`4xx`, stored as 4) and codes (401);
    /// no response at all counts too.
    Statuses(Vec<u16>),
}

const COUNT_HELP: &str = "is not all, failed, successful or a list of status classes (4xx) and codes (401)";

impl Count {
    /// `count` as written in a rules file or given by a binding: `all`,
    /// `failed`, `successful`, a status class (`4xx`) or code (`401`, as a
    /// number or text), or a non-empty list of classes and codes.
    pub(crate) fn parse(value: &Value, field: &str) -> Result<Count> {
        let bad = || Error::config(field, value, COUNT_HELP);
        match value {
            Value::String(s) => match s.as_str() {
                "all" => Ok(Count::All),
                "failed" => Ok(Count::Failed),
                "successful" => Ok(Count::Successful),
                other => Ok(Count::Statuses(vec![status_item(other).ok_or_else(bad)?])),
            },
            Value::Number(_) => Ok(Count::Statuses(vec![number_item(value).ok_or_else(bad)?])),
            Value::Array(items) if items.len() == 1 && items[0].is_string() => {
                Count::parse(&items[0], field).map_err(|_| Error::config(format!("{field}[0]"), &items[0], COUNT_HELP))
            }
            Value::Array(items) if !items.is_empty() => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let parsed = match item {
                        Value::String(s) => status_item(s),
                        Value::Number(_) => number_item(item),
                        _ => None,
                    };
                    let parsed = parsed.ok_or_else(|| Error::config(format!("{field}[{i}]"), item, COUNT_HELP))?;
                    if !out.contains(&parsed) {
                        out.push(parsed);
                    }
                }
                Ok(Count::Statuses(out))
            }
            _ => Err(bad()),
        }
    }

    /// Whether a request answered with `status` (`None`: no response) is charged.
    pub(crate) fn counts(&self, status: Option<u16>) -> bool {
        match (self, status) {
            (Count::All, _) => true,
            (Count::Failed, None) => true,
            (Count::Failed, Some(s)) => s >= 400,
            (Count::Successful, None) => false,
            (Count::Successful, Some(s)) => s < 400,
            (Count::Statuses(_), None) => true,
            (Count::Statuses(items), Some(s)) => items.iter().any(|&i| i == s || (i < 10 && s / 100 == i)),
        }
    }

    /// What counts for a (policy, key) pair that several rules name: every
    /// status `self` or `other` counts. `all` absorbs everything, `failed`
    /// with `successful` is `all`; otherwise `failed` is the classes 4xx and
    /// 5xx and `successful` 1xx to 3xx (a status outside 100..=599 then
    /// counts only by a list's code), unless the list adds nothing to `failed`.
    pub(crate) fn union(&self, other: &Count) -> Count {
        use Count::{All, Failed, Statuses, Successful};
        match (self, other) {
            (All, _) | (_, All) | (Failed, Successful) | (Successful, Failed) => All,
            (a, b) if a == b => a.clone(),
            // Every listed status is >= 400, and `failed` counts no response too.
            (Failed, Statuses(items)) | (Statuses(items), Failed)
                if items.iter().all(|&i| i == 4 || i == 5 || i >= 400) =>
            {
                Failed
            }
            _ => {
                let mut items: Vec<u16> = Vec::new();
                for count in [self, other] {
                    match count {
                        Failed => items.extend([4, 5]),
                        Successful => items.extend([1, 2, 3]),
                        Statuses(listed) => items.extend(listed),
                        All => {}
                    }
                }
                let mut out: Vec<u16> = Vec::with_capacity(items.len());
                for &i in &items {
                    // A code its class already covers, or a repeat, adds nothing.
                    if !out.contains(&i) && (i < 10 || !items.contains(&(i / 100))) {
                        out.push(i);
                    }
                }
                if (1..=5).all(|class| out.contains(&class)) {
                    All
                } else {
                    Statuses(out)
                }
            }
        }
    }

    /// The token's spelling.
    fn token_text(&self) -> String {
        match self {
            Count::All => "all".into(),
            Count::Failed => "failed".into(),
            Count::Successful => "successful".into(),
            Count::Statuses(items) => items
                .iter()
                .map(|&i| if i < 10 { format!("{i}xx") } else { i.to_string() })
                .collect::<Vec<_>>()
                .join("+"),
        }
    }

    fn from_token_text(text: &str) -> Option<Count> {
        match text {
            "all" => Some(Count::All),
            "failed" => Some(Count::Failed),
            "successful" => Some(Count::Successful),
            _ => text
                .split('+')
                .map(status_item)
                .collect::<Option<Vec<_>>>()
                .map(Count::Statuses),
        }
    }
}

/// `4xx` (class 1 to 5) as the class digit, or `401` (100 to 599) as the code.
fn status_item(text: &str) -> Option<u16> {
    let lower = text.trim().to_ascii_lowercase();
    if let Some(class) = lower.strip_suffix("xx") {
        return class
            .parse::<u16>()
            .ok()
            .filter(|c| (1..=5).contains(c) && class.len() == 1);
    }
    lower
        .parse::<u16>()
        .ok()
        .filter(|c| (100..=599).contains(c) && lower.len() == 3)
}

fn number_item(value: &Value) -> Option<u16> {
    let n = value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as u64))?;
    (100..=599).contains(&n).then_some(n as u16)
}

/// One charge that may be given back after the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Charge {
    /// The policy's index in the limiter.
    pub policy: usize,
    /// The target's key.
    pub key: String,
    /// Decided by the local fallback (given back on the process's memory store).
    pub local: bool,
    /// Which responses its rule charges.
    pub count: Count,
    /// Decided under a per-key override (its state was charged).
    pub overridden: bool,
    /// Decided under a policy-wide limit (its state was charged).
    pub limited: bool,
}

/// What a completion token holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Completion {
    /// The decision's clock.
    pub now_ms: i64,
    /// The request's cost.
    pub cost: u64,
    /// Its number in the limiter's [`Tokens`] (0 until it is given out).
    pub nonce: u64,
    /// The charges that depend on the status.
    pub charges: Vec<Charge>,
    /// The concurrency leases to release, whatever the status.
    pub leases: Vec<Lease>,
    /// A gRPC call's: completed with its gRPC status code.
    pub grpc: bool,
    /// A request with a cost rule: the most it may be charged in all
    /// (`max_cost`); its actual cost may be reported at completion. Every
    /// charge of the request is then in `charges`, `count: all` included.
    pub max_cost: Option<u64>,
}

const TOKEN_VERSION: &str = "pl1";

fn escape(key: &str) -> String {
    key.replace('%', "%25").replace(';', "%3B")
}

fn unescape(key: &str) -> String {
    key.replace("%3B", ";").replace("%25", "%")
}

impl Completion {
    /// The charges of an allowed request that can depend on its status: the
    /// targets that were charged (allowed, decided by the store or the local
    /// fallback) whose rule does not count every status. `None` when there
    /// are none, and no concurrency lease to release.
    /// Each target: its policy index, key, rule's count, decision, and
    /// whether a per-key override decided it.
    /// With `max_cost` (a request with a cost rule) every charge is kept,
    /// so its actual cost can be settled after the response.
    pub(crate) fn of<'a>(
        now_ms: i64,
        cost: u64,
        max_cost: Option<u64>,
        targets: impl Iterator<Item = (usize, &'a str, &'a Count, crate::decision::Decision, Charged)>,
        leases: Vec<Lease>,
        grpc: bool,
    ) -> Option<Completion> {
        let charges: Vec<Charge> = targets
            .filter(|(_, _, count, d, _)| (max_cost.is_some() || **count != Count::All) && d.allowed)
            .filter_map(|(policy, key, count, d, charged)| {
                let local = match d.source {
                    Source::Store => false,
                    Source::Local => true,
                    // fail_open, fail_closed, penalty, lists: nothing was charged.
                    _ => return None,
                };
                Some(Charge {
                    policy,
                    key: key.to_string(),
                    local,
                    count: count.clone(),
                    overridden: charged == Charged::Override,
                    limited: charged == Charged::Limit,
                })
            })
            .collect();
        (!charges.is_empty() || !leases.is_empty()).then_some(Completion {
            now_ms,
            cost,
            nonce: 0,
            charges,
            leases,
            grpc,
            max_cost,
        })
    }

    pub(crate) fn encode(&self) -> String {
        let mut out = format!("{TOKEN_VERSION};n{};c{};t{}", self.now_ms, self.cost, self.nonce);
        if self.grpc {
            out.push_str(";g");
        }
        if let Some(max) = self.max_cost {
            out.push_str(&format!(";m{max}"));
        }
        for c in &self.charges {
            out.push_str(&format!(
                ";r{}{}{},{},{}",
                if c.local { 'l' } else { 's' },
                if c.overridden {
                    "o"
                } else if c.limited {
                    "p"
                } else {
                    ""
                },
                c.policy,
                c.count.token_text(),
                escape(&c.key)
            ));
        }
        for l in &self.leases {
            out.push_str(&format!(";e{},{},{}", l.policy, escape(&l.id), escape(&l.key)));
        }
        out
    }

    pub(crate) fn decode(token: &str) -> Result<Completion> {
        let bad = |why: &str| {
            let shown: String = token.chars().take(64).collect();
            Error::config(
                "token",
                format!("{shown:?}"),
                format!("is not a completion token of polylimit ({why})"),
            )
        };
        let mut records = token.split(';');
        if records.next() != Some(TOKEN_VERSION) {
            return Err(bad("unknown version"));
        }
        let (mut now_ms, mut cost, mut nonce, mut charges, mut leases) = (None, None, None, Vec::new(), Vec::new());
        let mut grpc = false;
        let mut max_cost = None;
        for record in records {
            let (kind, rest) = record.split_at(record.chars().next().map_or(0, char::len_utf8));
            match kind {
                "n" => now_ms = Some(rest.parse::<i64>().map_err(|_| bad("bad time"))?),
                "c" => cost = Some(rest.parse::<u64>().map_err(|_| bad("bad cost"))?),
                "t" => nonce = Some(rest.parse::<u64>().map_err(|_| bad("bad nonce"))?),
                "g" if rest.is_empty() => grpc = true,
                "m" => {
                    max_cost = Some(
                        rest.parse::<u64>()
                            .ok()
                            .filter(|&m| m > 0)
                            .ok_or_else(|| bad("bad max cost"))?,
                    )
                }
                "r" => {
                    let mut parts = rest.splitn(3, ',');
                    let (head, count, key) = match (parts.next(), parts.next(), parts.next()) {
                        (Some(h), Some(c), Some(k)) => (h, c, k),
                        _ => return Err(bad("bad record")),
                    };
                    let local = match head.chars().next() {
                        Some('s') => false,
                        Some('l') => true,
                        _ => return Err(bad("bad source")),
                    };
                    let (overridden, limited, index) = match (head[1..].strip_prefix('o'), head[1..].strip_prefix('p'))
                    {
                        (Some(index), _) => (true, false, index),
                        (None, Some(index)) => (false, true, index),
                        (None, None) => (false, false, &head[1..]),
                    };
                    let policy = index.parse::<usize>().map_err(|_| bad("bad policy"))?;
                    let count = Count::from_token_text(count).ok_or_else(|| bad("bad count"))?;
                    charges.push(Charge {
                        policy,
                        key: unescape(key),
                        local,
                        count,
                        overridden,
                        limited,
                    });
                }
                "e" => {
                    let mut parts = rest.splitn(3, ',');
                    let (policy, id, key) = match (parts.next(), parts.next(), parts.next()) {
                        (Some(p), Some(i), Some(k)) => (p, i, k),
                        _ => return Err(bad("bad lease")),
                    };
                    leases.push(Lease {
                        policy: policy.parse::<usize>().map_err(|_| bad("bad policy"))?,
                        id: unescape(id),
                        key: unescape(key),
                    });
                }
                _ => return Err(bad("unknown record")),
            }
        }
        match (now_ms, cost, nonce) {
            (Some(now_ms), Some(cost), Some(nonce)) if cost > 0 => Ok(Completion {
                now_ms,
                cost,
                nonce,
                charges,
                leases,
                grpc,
                max_cost,
            }),
            _ => Err(bad("no time, cost or nonce")),
        }
    }
}

/// Most completion tokens a limiter keeps outstanding (given out, not
/// completed yet); past it the oldest are forgotten. A request in flight
/// holds one, so this bounds the requests in flight whose refund is kept.
pub(crate) const MAX_OUTSTANDING: usize = 1 << 17;
const TOKEN_SHARDS: usize = 16;

/// The completion tokens a limiter gave out and that were not completed
/// yet, by nonce: a token completes once. Nonces count up from a random
/// start (below 2^62, so they never wrap), so another limiter's tokens are
/// not this one's. Sharded by nonce (consecutive nonces in turn), each shard
/// bounded, forgetting its lowest (oldest) nonce when full: a caller that
/// never completes cannot grow memory, and a forgotten token only loses its
/// refund (the charge stays: never an over-admission).
///
/// Each token keeps the engine that decided its request: a completion after
/// a reload gives back to the state the request charged, under the numbers
/// it was charged with (`Limiter::reload`).
pub(crate) struct Tokens {
    next: AtomicU64,
    shards: [Mutex<BTreeMap<u64, Option<Engine>>>; TOKEN_SHARDS],
}

impl Default for Tokens {
    fn default() -> Tokens {
        let mut seed = [0u8; 8];
        if getrandom::getrandom(&mut seed).is_err() {
            // No OS randomness: the time still separates limiters.
            seed = (crate::engine::process_now_ms() as u64).to_le_bytes();
        }
        Tokens {
            next: AtomicU64::new(u64::from_le_bytes(seed) >> 2),
            shards: std::array::from_fn(|_| Mutex::new(BTreeMap::new())),
        }
    }
}

impl Tokens {
    /// A new outstanding token's nonce.
    #[cfg(test)]
    fn issue(&self) -> u64 {
        self.issue_for(None)
    }

    /// A new outstanding token's nonce, of a request `engine` decided.
    fn issue_for(&self, engine: Option<Engine>) -> u64 {
        let nonce = self.next.fetch_add(1, Ordering::Relaxed);
        let mut shard = self.shards[nonce as usize % TOKEN_SHARDS].lock();
        if shard.len() >= MAX_OUTSTANDING / TOKEN_SHARDS {
            shard.pop_first();
        }
        shard.insert(nonce, engine);
        nonce
    }

    /// Takes the token `nonce` out: true if it was outstanding (its first
    /// completion), false otherwise (completed, forgotten, or not ours).
    #[cfg(test)]
    fn take(&self, nonce: u64) -> bool {
        self.take_engine(nonce).is_some()
    }

    /// Takes the token `nonce` out: `Some` (with the engine that decided
    /// it) if it was outstanding, `None` otherwise.
    fn take_engine(&self, nonce: u64) -> Option<Option<Engine>> {
        self.shards[nonce as usize % TOKEN_SHARDS].lock().remove(&nonce)
    }

    /// How many are outstanding (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// The token of an allowed request's outcome ([`Completion::of`]),
    /// registered as outstanding; `None` when it has nothing to complete.
    pub(crate) fn token(&self, completion: Option<Completion>, engine: &Engine) -> Option<String> {
        let mut completion = completion?;
        completion.nonce = self.issue_for(Some(engine.clone()));
        Some(completion.encode())
    }

    /// [`Limiter::complete_with`](crate::Limiter::complete_with) of a token
    /// this registry gave out, on `engine`.
    pub(crate) async fn complete(
        &self,
        current: &Engine,
        token: &str,
        status: Option<u16>,
        options: CompleteOptions,
    ) -> Result<usize> {
        let completion = Completion::decode(token)?;
        // The first completion takes the token; a later one gives nothing back.
        let taken = self.take_engine(completion.nonce);
        let first = taken.is_some();
        // The engine that decided it: its policies, under the numbers it charged.
        let decided = taken.flatten().filter(|e| e.same_limiter(current));
        let engine = decided.as_ref().unwrap_or(current);
        // A gRPC call ends with a status code (0 is OK), counted as its HTTP status.
        let status = if completion.grpc {
            super::grpc::counted_status(status)
        } else {
            status.filter(|&s| s != 0)
        };
        let policies = engine.policies().count();
        let named = completion.charges.iter().map(|c| c.policy);
        if let Some(policy) = named
            .chain(completion.leases.iter().map(|l| l.policy))
            .find(|&p| p >= policies)
        {
            return Err(Error::config(
                "token",
                policy,
                "names a policy this limiter does not have (a token of another limiter?)",
            ));
        }
        let reserved = completion.cost as i64;
        // The actual cost, capped so the request's total is at most max_cost.
        let actual = match options.cost {
            None => reserved,
            Some(n) => {
                let cap = completion
                    .max_cost
                    .unwrap_or(crate::http::rules::DEFAULT_MAX_COST)
                    .max(completion.cost);
                n.min(cap) as i64
            }
        };
        // The charges to settle: those the status does not count (given back
        // whole), and, when the actual cost differs, those it counts (the
        // difference given back or charged).
        let settle = |local: bool, counted: bool| -> Vec<(usize, &str, Charged)> {
            completion
                .charges
                .iter()
                .filter(|c| first && c.local == local && c.count.counts(status) == counted)
                .map(|c| {
                    let charged = match (c.overridden, c.limited) {
                        (true, _) => Charged::Override,
                        (false, true) => Charged::Limit,
                        (false, false) => Charged::Base,
                    };
                    (c.policy, c.key.as_str(), charged)
                })
                .collect()
        };
        let mut given = 0;
        for local in [true, false] {
            // Not counted: the whole reservation back, at the decision's time.
            // Counted, smaller: the difference back, at the decision's time
            // (the exact inverse of that part of the admission).
            for (targets, amount) in [
                (settle(local, false), reserved),
                (settle(local, true), reserved - actual),
            ] {
                if targets.is_empty() || amount <= 0 {
                    continue;
                }
                given += if local {
                    engine.refund_memory(&targets, completion.now_ms, amount)
                } else {
                    engine.refund_guarded(&targets, completion.now_ms, amount).await
                };
            }
            // Counted, larger: the difference charged whatever the state
            // holds (a forced debit), at the completion's time by the
            // store's clock: the process's clock may run a ms ahead of the
            // decisions' estimate of Redis's, and a debit stamped after a
            // later decision would refuse that decision's refund.
            let targets = settle(local, true);
            if actual > reserved && !targets.is_empty() {
                let now = options.now_ms.unwrap_or_else(|| {
                    if local {
                        crate::engine::process_now_ms()
                    } else {
                        engine.store_now_ms()
                    }
                });
                let debit = -(actual - reserved);
                given += if local {
                    engine.refund_memory(&targets, now, debit)
                } else {
                    engine.refund_guarded(&targets, now, debit).await
                };
            }
        }
        if !completion.leases.is_empty() {
            // At the decision's time, like the refunds: a lease is live then.
            engine.release(&completion.leases, Some(completion.now_ms)).await?;
        }
        Ok(given)
    }
}

/// What a completion reports besides the status ([`Limiter::complete_with`](crate::Limiter::complete_with)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompleteOptions {
    /// The request's actual cost, learned from the response (`None`: the
    /// cost it was checked with). Smaller than that: the difference is
    /// given back by the exact inverse of the admission; larger: the
    /// difference is charged whatever the limit (a forced debit), the
    /// request's total capped at its rules' `max_cost`. Only charges the
    /// status counts are settled this way; the others are given back whole.
    pub cost: Option<u64>,
    /// The completion's clock for a forced debit, for tests and simulations
    /// only (`None`: this process's clock).
    pub now_ms: Option<i64>,
}

impl CompleteOptions {
    /// Options from loosely typed values (a binding's arguments): `cost` a
    /// whole number of at least 0, `now_ms` an integer; `null` or absent is `None`.
    pub fn from_values(cost: Option<&Value>, now_ms: Option<&Value>) -> Result<CompleteOptions> {
        let whole = |v: &Value| {
            v.as_u64().or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                    .map(|f| f as u64)
            })
        };
        let cost = match cost.filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(whole(v).ok_or_else(|| Error::config("cost", v, "is not a whole number of at least 0"))?),
        };
        let now_ms = match now_ms.filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(
                v.as_i64()
                    .or_else(|| {
                        v.as_f64()
                            .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                            .map(|f| f as i64)
                    })
                    .ok_or_else(|| Error::config("now_ms", v, "is not an integer"))?,
            ),
        };
        Ok(CompleteOptions { cost, now_ms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn count_values() {
        let p = |v: Value| Count::parse(&v, "rules[0].count");
        assert_eq!(p(json!("all")).unwrap(), Count::All);
        assert_eq!(p(json!("failed")).unwrap(), Count::Failed);
        assert_eq!(p(json!(["successful"])).unwrap(), Count::Successful);
        assert_eq!(p(json!("4xx")).unwrap(), Count::Statuses(vec![4]));
        assert_eq!(p(json!(["4xx", "5XX"])).unwrap(), Count::Statuses(vec![4, 5]));
        assert_eq!(
            p(json!([401, "403", 429.0])).unwrap(),
            Count::Statuses(vec![401, 403, 429])
        );
        for (bad, field) in [
            (json!("6xx"), "rules[0].count"),
            (json!("sometimes"), "rules[0].count"),
            (json!([]), "rules[0].count"),
            (json!(true), "rules[0].count"),
            (json!([401, 99]), "rules[0].count[1]"),
            (json!(["4xx", "failed"]), "rules[0].count[1]"),
            (json!(["40"]), "rules[0].count[0]"),
        ] {
            match p(bad.clone()) {
                Err(Error::Config { field: f, value, .. }) => {
                    assert_eq!(f, field, "{bad}");
                    assert!(!value.is_empty(), "{bad}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_counts() {
        let failed = Count::Failed;
        assert!(failed.counts(Some(401)) && failed.counts(Some(500)) && failed.counts(None));
        assert!(!failed.counts(Some(200)) && !failed.counts(Some(302)));
        let ok = Count::Successful;
        assert!(ok.counts(Some(200)) && ok.counts(Some(399)));
        assert!(!ok.counts(Some(400)) && !ok.counts(None));
        let list = Count::Statuses(vec![4, 503]);
        assert!(list.counts(Some(404)) && list.counts(Some(503)) && list.counts(None));
        assert!(!list.counts(Some(500)) && !list.counts(Some(200)));
    }

    #[test]
    fn unions_count_what_either_counts() {
        let list = |items: &[u16]| Count::Statuses(items.to_vec());
        for (a, b, want) in [
            (Count::Failed, Count::All, Count::All),
            (Count::All, list(&[401]), Count::All),
            (Count::Failed, Count::Successful, Count::All),
            (Count::Failed, Count::Failed, Count::Failed),
            (Count::Failed, list(&[401, 5]), Count::Failed),
            (Count::Failed, list(&[2]), list(&[4, 5, 2])),
            (Count::Successful, list(&[401]), list(&[1, 2, 3, 401])),
            (list(&[4, 503]), list(&[503, 401, 2]), list(&[4, 503, 2])),
            (list(&[1, 2, 3]), list(&[4, 5]), Count::All),
        ] {
            for (x, y) in [(&a, &b), (&b, &a)] {
                let u = x.union(y);
                for status in [
                    None,
                    Some(100),
                    Some(200),
                    Some(302),
                    Some(401),
                    Some(404),
                    Some(500),
                    Some(503),
                ] {
                    assert_eq!(
                        u.counts(status),
                        x.counts(status) || y.counts(status),
                        "{x:?} with {y:?} at {status:?}"
                    );
                }
            }
            let u = a.union(&b);
            match (&u, &want) {
                // The order of a list's items follows the operands.
                (Count::Statuses(have), Count::Statuses(items)) => {
                    assert_eq!(have.len(), items.len(), "{a:?} with {b:?}: {u:?}");
                    assert!(items.iter().all(|i| have.contains(i)), "{a:?} with {b:?}: {u:?}");
                }
                _ => assert_eq!(u, want, "{a:?} with {b:?}"),
            }
        }
    }

    #[test]
    fn tokens_round_trip_and_reject_garbage() {
        let c = Completion {
            now_ms: 1_700_000_000_123,
            cost: 2,
            nonce: 42,
            charges: vec![
                Charge {
                    policy: 0,
                    key: "ip=1.2.3.4|header:x-user=a;b%3B,c".into(),
                    local: false,
                    count: Count::Failed,
                    overridden: false,
                    limited: true,
                },
                Charge {
                    policy: 3,
                    key: String::new(),
                    local: true,
                    count: Count::Statuses(vec![4, 503]),
                    overridden: true,
                    limited: false,
                },
            ],
            leases: vec![Lease {
                policy: 1,
                id: "0123456789abcdef0123456789abcdef*2".into(),
                key: "user=a;b,c".into(),
            }],
            grpc: false,
            max_cost: None,
        };
        let token = c.encode();
        assert!(
            token.ends_with(";e1,0123456789abcdef0123456789abcdef*2,user=a%3Bb,c"),
            "{token}"
        );
        assert!(token.starts_with("pl1;n1700000000123;c2;t42;rsp0,failed,"), "{token}");
        assert!(token.contains(";rlo3,4xx+503,;"), "{token}");
        assert_eq!(Completion::decode(&token).unwrap(), c);
        let call = Completion {
            grpc: true,
            ..c.clone()
        };
        assert!(
            call.encode().starts_with("pl1;n1700000000123;c2;t42;g;rsp0"),
            "{}",
            call.encode()
        );
        assert_eq!(Completion::decode(&call.encode()).unwrap(), call);
        for bad in [
            "pl1;n1;c1;t1;gx",
            "",
            "pl2;n1;c1;t1",
            "pl1;n1",
            "pl1;n1;c1",
            "pl1;n1;c0;t1",
            "pl1;n1;c1;tx",
            "pl1;n1;c1;t1;x",
            "pl1;n1;c1;t1;rq0,failed,k",
            "pl1;n1;c1;t1;rs0,never,k",
            "pl1;n1;c1;t1;rsx0,failed,k",
            "pl1;n1;c1;t1;ex,id,k",
            "pl1;n1;c1;t1;e0,id",
        ] {
            assert!(
                matches!(Completion::decode(bad), Err(Error::Config { ref field, .. }) if field == "token"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_token_is_taken_once_and_the_oldest_are_forgotten() {
        let tokens = Tokens::default();
        let (a, b) = (tokens.issue(), tokens.issue());
        assert_eq!(b, a + 1);
        assert!(tokens.take(b) && !tokens.take(b), "once");
        assert!(!tokens.take(b + 1), "never given out");
        assert!(tokens.take(a));
        let first = tokens.issue();
        for _ in 0..MAX_OUTSTANDING {
            tokens.issue();
        }
        assert_eq!(tokens.len(), MAX_OUTSTANDING, "bounded");
        assert!(!tokens.take(first), "the oldest was forgotten");
        assert!(tokens.take(first + 1 + TOKEN_SHARDS as u64), "younger ones are kept");
        assert!(
            Tokens::default().issue() != first,
            "another limiter counts from elsewhere"
        );
    }
}

/// The status a request ends with, to pass to [`Limiter::complete`](crate::Limiter::complete) (SPEC
/// §6), from what the middleware saw rather than its own verdict:
///
/// - `status`: the response's status as the framework holds it (0: none);
/// - `handler_answered`: the handler wrote a status or ended the response
///   (headers written, `res.end()` called), even if the client had already
///   left;
/// - `handler_failed`: the handler raised or panicked;
/// - `client_gone`: the client went away before the response was done.
///
/// `None` is "no response": the handler wrote nothing, and either failed or
/// the client left (nothing is ever sent). A client that left after the
/// handler answered is charged as that answer's status, so a hang-up never
/// makes a request free under `count: successful`. A handler that returned
/// without writing, to a client still there, ends with the framework's
/// default `status` (200 for most).
pub fn ended_status(status: u16, handler_answered: bool, handler_failed: bool, client_gone: bool) -> Option<u16> {
    match status {
        0 => None,
        _ if handler_answered => Some(status),
        _ if handler_failed || client_gone => None,
        _ => Some(status),
    }
}

#[cfg(test)]
mod ended_status_tests {
    use super::ended_status;

    #[test]
    fn a_client_gone_after_the_handler_answered_is_charged_as_the_answer() {
        assert_eq!(ended_status(200, true, false, true), Some(200));
        assert_eq!(ended_status(500, true, true, true), Some(500));
        assert_eq!(ended_status(401, true, false, false), Some(401));
    }

    #[test]
    fn nothing_written_is_no_response_unless_the_framework_answers() {
        assert_eq!(ended_status(200, false, true, false), None);
        assert_eq!(ended_status(200, false, false, true), None);
        assert_eq!(ended_status(200, false, false, false), Some(200));
        assert_eq!(ended_status(0, true, false, false), None);
    }
}
