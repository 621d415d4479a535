//! The engine: policies and a store, the store guarded by the `resilience` module.
//! It decides (policy, key) targets atomically; the public `Limiter`
//! (`crate::limiter`) holds it, with the rules of a rules file (`crate::http`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::algorithm::penalty::PenaltyParams;
use crate::algorithm::{Kind, Params, Verdict};
use crate::breaker::{BreakerConfig, BreakerState, Clock};
use crate::decision::{CheckResult, Decision, Lease, Source};
use crate::error::{Error, Result};
use crate::metrics::{MetricKind, Metrics, MetricsSnapshot};
use crate::policy::{check_name, Policy, MAX_COST};
use crate::resilience::Resilience;
pub(crate) use crate::resilience::Target;
use crate::store::keys::{fingerprint, key_head, state_head, store_key};
use crate::store::memory::{MemoryCheck, MemoryStore, LIMIT_SLOT, OVERRIDE_SLOT};
use crate::store::overrides::Charged;
use crate::store::redis::{ChargedGroups, KeyLayout, RedisCheck, RedisStore, Timeouts};
use block_cache::{BlockCache, Now};

pub(crate) mod block_cache;
pub(crate) mod region;
mod sans_io;
mod sans_io_request;
mod synced;

/// Everything a limiter is built from.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// The policies; a check applies all of them to its key, atomically.
    pub policies: Vec<Policy>,
    /// `memory`, `redis://…`, `rediss://…`, `redis+cluster://h1:p1,h2:p2` or
    /// `redis+sentinel://s1:p1,s2:p2/<service>`.
    pub store: String,
    /// First segment of every store key.
    pub prefix: String,
    /// Most keys the memory store (and the local fallback) holds.
    pub max_keys: usize,
    /// Every check reads the key's per-key override (`Limiter::set_override`).
    /// Off by default: on Redis, looking one up costs every check a key read
    /// inside the script. Every limiter that should honour overrides needs it.
    pub overrides: bool,
    /// Longest wait of a check for the store, waiting for a connection included.
    pub timeout: Duration,
    /// Deadline of opening a store connection (TCP, TLS and the handshake),
    /// in the background: checks wait for it only their `timeout`.
    pub connect_timeout: Duration,
    /// The store's circuit breaker.
    pub breaker: BreakerConfig,
    /// A PEM file of the CA (or CAs) that signs the Redis servers'
    /// certificates, for `rediss…` stores; without it, the public web CAs.
    pub tls_ca: Option<String>,
    /// Most (policy, key) denials the blocked-key cache holds; 0: no cache
    /// (`block_cache`, Redis stores only: see `block_cache`).
    pub block_cache: usize,
    /// Multi-region quotas: the regions' stores and shares, and this
    /// process's region (`region`). `None`: one store.
    pub regions: Option<region::RegionConfig>,
    /// Whether each adaptive alert also writes one JSON line to stderr
    /// (`anomaly_log`, on by default).
    pub anomaly_log: bool,
}

impl LimiterConfig {
    /// One policy on the memory store, with the defaults.
    pub fn new(policy: Policy) -> LimiterConfig {
        LimiterConfig {
            policies: vec![policy],
            store: "memory".into(),
            prefix: "polylimit".into(),
            max_keys: 1_000_000,
            overrides: false,
            timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
            tls_ca: None,
            block_cache: 0,
            regions: None,
            anomaly_log: true,
        }
    }

    /// The same, on another store.
    pub fn with_store(mut self, store: impl Into<String>) -> LimiterConfig {
        self.store = store.into();
        self
    }
}

/// Options of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// Units the request consumes, at least 1.
    pub cost: u64,
    /// The time to decide at, in ms since the epoch; for tests and
    /// simulations. `None`: the store's clock (Redis `TIME`).
    pub now_ms: Option<i64>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { cost: 1, now_ms: None }
    }
}

impl CheckOptions {
    /// From the loosely typed values a binding receives (a JSON request, a
    /// JavaScript number, a Python object): `cost` a whole number of at least
    /// 1 (default 1), `now_ms` a whole number of ms. A negative, fractional,
    /// boolean or string value is an error naming the field, never the default.
    pub fn from_values(cost: Option<&Value>, now_ms: Option<&Value>) -> Result<CheckOptions> {
        let cost = match cost.filter(|v| !v.is_null()) {
            None => 1,
            Some(v) => whole(v)
                .and_then(|n| u64::try_from(n).ok())
                .filter(|n| (1..=MAX_COST).contains(n))
                .ok_or_else(|| Error::config("cost", v, format!("is not an integer from 1 to {MAX_COST}")))?,
        };
        let now_ms = match now_ms.filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(whole(v).ok_or_else(|| Error::config("now_ms", v, "is not a time in ms since the epoch"))?),
        };
        Ok(CheckOptions { cost, now_ms })
    }
}

/// A JSON number without a fractional part (JavaScript has no integers: `2`
/// arrives as `2.0`), as an i64.
fn whole(value: &Value) -> Option<i64> {
    if let Some(n) = value.as_i64() {
        return Some(n);
    }
    let f = value.as_f64()?;
    const EXACT: f64 = 9_007_199_254_740_991.0; // 2^53 - 1: above it, not every whole number is exact
    (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i64)
}

/// A policy ready to run: its numbers and the heads of its store keys.
struct Compiled {
    policy: Policy,
    params: Params,
    penalty: Option<PenaltyParams>,
    /// The head of its per-key records (override, penalty, adaptive).
    key_head: String,
    /// The head of its state keys: `key_head` with the fingerprint of the
    /// numbers the state is measured in (`store::keys`).
    state_head: String,
    /// The memory store's slot of its state (one per `state_head`, so a
    /// reload that keeps the numbers keeps the state).
    slot: u32,
    /// The memory store's slot of its records (one per `key_head`).
    records: u32,
}

/// The memory store's slot numbers, one per store key head, kept by every
/// engine a reload makes from this one: the same head is the same state in
/// both stores.
#[derive(Default)]
pub(crate) struct Slots(parking_lot::Mutex<std::collections::HashMap<String, u32>>);

impl Slots {
    /// The slot of `head`, numbered on first use.
    fn of(&self, head: &str) -> u32 {
        let mut map = self.0.lock();
        let next = map.len() as u32;
        *map.entry(head.to_string()).or_insert(next)
    }
}

enum Backend {
    Memory,
    Redis(Box<RedisStore>),
}

struct Inner {
    policies: Vec<Compiled>,
    /// What follows up to `background`, and `alerts`, is the limiter's own:
    /// shared by every engine a reload makes from this one.
    backend: Arc<Backend>,
    /// The memory store; for Redis, the `local` fallback.
    memory: Arc<MemoryStore>,
    resilience: Arc<Resilience>,
    closed: Arc<AtomicBool>,
    /// Per-policy counters of these policies, on the limiter's registry.
    metrics: Metrics,
    /// The memory store's slots of every head the limiter has used.
    slots: Arc<Slots>,
    /// The settings it was built with (no policies): those a reload cannot change.
    settings: Arc<LimiterConfig>,
    /// Checks read per-key overrides ([`LimiterConfig::overrides`]).
    overrides: bool,
    /// The blocked-key cache (`block_cache`), on Redis stores.
    block_cache: Option<BlockCache>,
    /// The local credits of `sync` policies (`synced`).
    sync: synced::SyncCache,
    /// The other regions, to borrow from (multi-region quotas).
    regions: Option<region::Regions>,
    /// Alerts of adaptive policies, shared with the limiters this one builds
    /// for itself (its regional lenders): one callback, one log setting.
    alerts: Arc<crate::anomaly::Alerts>,
    /// The budget of one check's store calls (`timeout`).
    timeout: std::time::Duration,
    /// Without `overrides: true`, on Redis: the overrides it ignores, said once.
    ignored_overrides: Option<crate::store::overrides::IgnoredOverrides>,
    /// The work it runs off the request's path, to wait for ([`Engine::settled`]).
    background: Arc<crate::background::Background>,
    /// On Redis Cluster with overrides: each policy's limit record as last
    /// read (when, on the breaker's clock, and its text; `None`: read it at
    /// the next check), read again after [`crate::store::overrides::CLUSTER_REFRESH_MS`].
    cluster_limits: Option<Vec<parking_lot::Mutex<CachedLimit>>>,
}

/// A policy-wide limit record as a process on Redis Cluster last read it:
/// when (on the breaker's clock; `None`: read it at the next check), and its text.
type CachedLimit = (Option<std::time::Instant>, Arc<str>);

/// The limiter's engine: compiled policies, the store, its resilience and
/// the metrics. Cheap to clone; clones share state.
#[derive(Clone)]
pub(crate) struct Engine {
    inner: Arc<Inner>,
}

/// Fails unless `policies` is a non-empty list of well-named, distinct policies.
fn check_policies(policies: &[Policy]) -> Result<()> {
    if policies.is_empty() {
        return Err(Error::config("policies", "[]", "is empty"));
    }
    for (i, p) in policies.iter().enumerate() {
        check_name(&format!("policies[{i}].name"), p.name())?;
        if policies[..i].iter().any(|q| q.name() == p.name()) {
            return Err(Error::config(
                "policies",
                format!("{:?}", p.name()),
                "names two policies the same",
            ));
        }
    }
    Ok(())
}

/// Policies ready to run, their keys under `prefix`, their memory slots from
/// `slots`; `shares[i]`, when given, is the policy `i` runs on (its region's share).
fn compile(policies: Vec<Policy>, prefix: &str, slots: &Slots, mut shares: Vec<Option<Policy>>) -> Vec<Compiled> {
    policies
        .into_iter()
        .enumerate()
        .map(|(i, policy)| {
            let params = match shares.get_mut(i).and_then(Option::take) {
                Some(share) => Params::new(&share),
                None => Params::new(&policy),
            };
            let key_head = key_head(prefix, params.kind, policy.name());
            let fingerprint = fingerprint(params.kind, params.period, params.count);
            let state_head = state_head(prefix, params.kind, policy.name(), &fingerprint);
            let penalty = policy.penalty().map(PenaltyParams::new);
            Compiled {
                policy,
                params,
                penalty,
                slot: slots.of(&state_head),
                records: slots.of(&key_head),
                key_head,
                state_head,
            }
        })
        .collect()
}

/// The process clock in ms since the epoch.
pub(crate) fn process_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A lease id: 128 random bits in hex, then `*<slots>` when it holds more
/// than one slot.
fn new_lease_id(slots: i64) -> String {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        // No OS randomness (it does not happen on supported systems): the
        // time, the process and a counter still make ids distinct.
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes[..8].copy_from_slice(&(nanos ^ u64::from(std::process::id()) << 32).to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    let mut id = String::with_capacity(40);
    for byte in bytes {
        use std::fmt::Write;
        let _ = write!(id, "{byte:02x}");
    }
    if slots > 1 {
        id.push('*');
        id.push_str(&slots.to_string());
    }
    id
}

/// The lease id of target `n` ([`Engine::lease_ids`]).
fn lease_at(leases: &[Option<String>], n: usize) -> Option<&str> {
    leases.get(n).and_then(Option::as_deref)
}

impl Engine {
    /// Builds a limiter. Fails only on bad configuration; a Redis store is
    /// connected lazily, so an unreachable Redis is handled by the fallback.
    pub(crate) fn new(config: LimiterConfig) -> Result<Engine> {
        let alerts = Arc::new(crate::anomaly::Alerts::logging(config.anomaly_log));
        Engine::with_alerts(config, alerts)
    }

    /// [`Engine::new`] sending its alerts to `alerts` (a lender: its
    /// borrower's sinks, SPEC §13).
    pub(crate) fn with_alerts(mut config: LimiterConfig, alerts: Arc<crate::anomaly::Alerts>) -> Result<Engine> {
        check_policies(&config.policies)?;
        // With regions: the local region's store, each policy run on its share.
        let (regions, shares) = match region::Regions::build(&mut config, &alerts)? {
            Some((regions, shares)) => (Some(regions), shares.into_iter().map(Some).collect()),
            None => (None, Vec::new()),
        };
        if config.prefix.is_empty() || config.prefix.contains(['{', '}']) {
            return Err(Error::config(
                "prefix",
                format!("{:?}", config.prefix),
                "is not a non-empty string without '{' or '}'",
            ));
        }
        let backend =
            match config.store.as_str() {
                "memory" => Backend::Memory,
                url if url.starts_with("redis://")
                    || url.starts_with("rediss://")
                    || url.starts_with("redis+cluster://")
                    || url.starts_with("rediss+cluster://")
                    || url.starts_with("redis+sentinel://")
                    || url.starts_with("rediss+sentinel://") =>
                {
                    let tls_ca = match &config.tls_ca {
                        Some(path) => Some(std::fs::read(path).map_err(|e| {
                            Error::config("tls_ca", format!("{path:?}"), format!("cannot be read: {e}"))
                        })?),
                        None => None,
                    };
                    Backend::Redis(Box::new(RedisStore::open(
                        url,
                        Timeouts {
                            call: config.timeout,
                            connect: config.connect_timeout,
                        },
                        tls_ca,
                    )?))
                }
                other => return Err(Error::config(
                    "store",
                    format!("{other:?}"),
                    "is not \"memory\", \"redis://…\", \"rediss://…\", \"redis+cluster://…\" or \"redis+sentinel://…\"",
                )),
            };
        let slots = Arc::new(Slots::default());
        let policies = compile(std::mem::take(&mut config.policies), &config.prefix, &slots, shares);
        let metrics = Metrics::new(policies.iter().map(|c| c.policy.name()));
        Ok(Engine::assemble(
            policies,
            Arc::new(backend),
            Arc::new(MemoryStore::new(config.max_keys)),
            Arc::new(Resilience::new(config.breaker)),
            Arc::default(),
            metrics,
            slots,
            Arc::new(config),
            regions,
            alerts,
            Arc::default(),
        ))
    }

    /// An engine of `policies` on the limiter's own parts.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        policies: Vec<Compiled>,
        backend: Arc<Backend>,
        memory: Arc<MemoryStore>,
        resilience: Arc<Resilience>,
        closed: Arc<AtomicBool>,
        metrics: Metrics,
        slots: Arc<Slots>,
        settings: Arc<LimiterConfig>,
        regions: Option<region::Regions>,
        alerts: Arc<crate::anomaly::Alerts>,
        background: Arc<crate::background::Background>,
    ) -> Engine {
        let redis = matches!(*backend, Backend::Redis(_));
        let block_cache =
            (settings.block_cache > 0 && redis).then(|| BlockCache::new(policies.len(), settings.block_cache));
        let ignored_overrides =
            (!settings.overrides && redis).then(|| crate::store::overrides::IgnoredOverrides::new(policies.len()));
        let cluster_limits =
            (settings.overrides && matches!(&*backend, Backend::Redis(r) if r.is_cluster())).then(|| {
                (0..policies.len())
                    .map(|_| parking_lot::Mutex::new((None, Arc::from(""))))
                    .collect()
            });
        Engine {
            inner: Arc::new(Inner {
                policies,
                backend,
                memory,
                resilience,
                closed,
                metrics,
                slots,
                overrides: settings.overrides,
                block_cache,
                sync: synced::SyncCache::new(settings.max_keys),
                regions,
                ignored_overrides,
                alerts,
                timeout: settings.timeout,
                background,
                settings,
                cluster_limits,
            }),
        }
    }

    /// The engine of a reload: `config`'s policies on this engine's store,
    /// fallback, breaker, metrics, alerts and background work. The state of
    /// a policy whose state heads are unchanged is kept (`store::keys`).
    /// `config`'s other settings must be this engine's: one that differs is
    /// a config error naming it (it needs a restart). The blocked-key cache
    /// and `sync` credit start empty (a cached denial may be one the new
    /// numbers would not make).
    pub(crate) fn reloaded(&self, mut config: LimiterConfig) -> Result<Engine> {
        check_policies(&config.policies)?;
        let old = &*self.inner.settings;
        if old.regions.is_some() || config.regions.is_some() {
            return Err(Error::config(
                "regions",
                "",
                "cannot be reloaded: a multi-region limiter needs a restart to change",
            ));
        }
        let fixed: [(&str, String, String); 11] = [
            ("store", format!("{:?}", old.store), format!("{:?}", config.store)),
            ("prefix", format!("{:?}", old.prefix), format!("{:?}", config.prefix)),
            ("max_keys", old.max_keys.to_string(), config.max_keys.to_string()),
            ("overrides", old.overrides.to_string(), config.overrides.to_string()),
            ("timeout", format!("{:?}", old.timeout), format!("{:?}", config.timeout)),
            (
                "connect_timeout",
                format!("{:?}", old.connect_timeout),
                format!("{:?}", config.connect_timeout),
            ),
            (
                "failure_threshold",
                old.breaker.threshold.to_string(),
                config.breaker.threshold.to_string(),
            ),
            (
                "cooldown",
                format!("{:?}", old.breaker.cooldown),
                format!("{:?}", config.breaker.cooldown),
            ),
            (
                "half_open_probes",
                old.breaker.half_open_max.to_string(),
                config.breaker.half_open_max.to_string(),
            ),
            ("tls_ca", format!("{:?}", old.tls_ca), format!("{:?}", config.tls_ca)),
            (
                "block_cache",
                old.block_cache.to_string(),
                config.block_cache.to_string(),
            ),
        ];
        for (field, was, now) in fixed {
            if was != now {
                return Err(Error::config(
                    field,
                    now,
                    format!("cannot change on reload (it is {was}): it needs a restart"),
                ));
            }
        }
        if old.anomaly_log != config.anomaly_log {
            return Err(Error::config(
                "anomaly_log",
                config.anomaly_log,
                "cannot change on reload: it needs a restart",
            ));
        }
        let inner = &*self.inner;
        let policies = compile(
            std::mem::take(&mut config.policies),
            &config.prefix,
            &inner.slots,
            Vec::new(),
        );
        let metrics = inner.metrics.for_policies(policies.iter().map(|c| c.policy.name()));
        Ok(Engine::assemble(
            policies,
            inner.backend.clone(),
            inner.memory.clone(),
            inner.resilience.clone(),
            inner.closed.clone(),
            metrics,
            inner.slots.clone(),
            inner.settings.clone(),
            None,
            inner.alerts.clone(),
            inner.background.clone(),
        ))
    }

    /// Whether `other` is an engine of the same limiter (this one, a clone,
    /// or one a reload made from it).
    pub(crate) fn same_limiter(&self, other: &Engine) -> bool {
        Arc::ptr_eq(&self.inner.background, &other.inner.background)
    }

    /// The counters that outlive a reload.
    pub(crate) fn metrics_registry(&self) -> &crate::metrics::Registry {
        &self.inner.metrics
    }

    /// The memory store's slot of policy `i`'s records (its override,
    /// penalty and adaptive records).
    pub(crate) fn records_slot(&self, i: usize) -> u32 {
        self.inner.policies[i].records
    }

    /// Whether `other` is this engine or a clone of it (the same limiter).
    pub(crate) fn same(&self, other: &Engine) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn policy_at(&self, index: usize) -> &Policy {
        &self.inner.policies[index].policy
    }

    pub(crate) fn record_request(&self, policy: usize, rule: &str, decision: &Decision, blocked: bool) {
        self.inner
            .metrics
            .request(self.policy_at(policy).name(), rule, decision, blocked);
    }

    /// Counts a request of the policy at `policy` refused for its cost.
    pub(crate) fn record_invalid_cost(&self, policy: usize, rule: &str) {
        self.inner.metrics.invalid_cost(self.policy_at(policy).name(), rule);
    }

    /// The policies, in order.
    pub(crate) fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.inner.policies.iter().map(|c| &c.policy)
    }

    /// Checks `key` against every policy in one atomic decision: allowed only
    /// if all allow, and then all are charged; otherwise none is.
    pub(crate) async fn check_all(&self, key: &str, options: CheckOptions) -> Result<CheckResult> {
        let result = if let [_] = self.inner.policies.as_slice() {
            self.decide(&[(0, key, false)], options).await?
        } else {
            let targets: Vec<Target<'_>> = (0..self.inner.policies.len()).map(|i| (i, key, false)).collect();
            self.decide(&targets, options).await?
        };
        for (i, decision) in result.decisions.iter().enumerate() {
            self.inner.metrics.decision(i, decision);
        }
        Ok(result)
    }

    /// The decision [`Engine::check_all`] would make now, charging nothing
    /// and recording no penalty; not counted in the request metrics.
    pub(crate) async fn peek_all(&self, key: &str, options: CheckOptions) -> Result<CheckResult> {
        let targets: Vec<Target<'_>> = (0..self.inner.policies.len()).map(|i| (i, key, false)).collect();
        self.peek(&targets, options).await
    }

    /// [`Engine::check_all`] of a limiter with one policy and no penalty on
    /// the memory store, decided now: the hot path, with no future to poll
    /// and nothing to allocate. `None` for any other limiter.
    #[inline]
    pub(crate) fn check_one_now(&self, key: &str, options: CheckOptions) -> Option<Result<Decision>> {
        let inner = &*self.inner;
        let (Backend::Memory, [compiled]) = (&*inner.backend, inner.policies.as_slice()) else {
            return None;
        };
        if compiled.penalty.is_some()
            || compiled.params.adaptive.is_some()
            || compiled.params.kind == Kind::Concurrency
            || inner.memory.overrides.any()
            || inner.memory.limits.any()
        {
            return None;
        }
        let cost = match self.validate(options) {
            Ok(cost) => cost,
            Err(e) => return Some(Err(e)),
        };
        let now = options.now_ms.unwrap_or_else(process_now_ms);
        let check = MemoryCheck {
            slot: compiled.slot,
            records: compiled.records,
            params: &compiled.params,
            key,
            shadow: false,
            penalty: None,
            lease: None,
        };
        let verdict = inner.memory.decide_one(&check, now, cost);
        let decision = Decision::from_verdict(verdict, compiled.policy.limit(), Source::Store);
        inner.metrics.decision(0, &decision);
        Some(Ok(decision))
    }

    /// The cost of a check whose options are valid on an open limiter.
    #[inline]
    fn validate(&self, options: CheckOptions) -> Result<i64> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if options.cost == 0 || options.cost > MAX_COST {
            return Err(Error::config(
                "cost",
                options.cost,
                format!("is not an integer from 1 to {MAX_COST}"),
            ));
        }
        if let Some(now) = options.now_ms {
            if !(0..=1 << 50).contains(&now) {
                return Err(Error::config("now_ms", now, "is not a time in ms since the epoch"));
            }
        }
        Ok(options.cost as i64)
    }

    /// Decides `(policy index, key)` pairs atomically.
    pub(crate) async fn decide(&self, targets: &[Target<'_>], options: CheckOptions) -> Result<CheckResult> {
        self.decide_as(targets, options, true).await
    }

    /// The decision [`Engine::decide`] would make, charging nothing and
    /// recording no penalty (a peek): on a cluster every slot group is
    /// peeked; while the store is down, each policy's `on_store_error`
    /// decides as for a check, `local` peeking the local memory store.
    pub(crate) async fn peek(&self, targets: &[Target<'_>], options: CheckOptions) -> Result<CheckResult> {
        self.decide_as(targets, options, false).await
    }

    async fn decide_as(&self, targets: &[Target<'_>], options: CheckOptions, charge: bool) -> Result<CheckResult> {
        if let Backend::Memory = *self.inner.backend {
            return self.decide_local(targets, options, charge).await;
        }
        if let Some(notice) = &self.inner.ignored_overrides {
            self.notice_overrides(notice, targets);
        }
        // One budget for every store call of this check (SPEC §5).
        crate::store::budget::within_budget(self.inner.timeout, self.decide_budgeted(targets, options, charge)).await
    }

    async fn decide_budgeted(
        &self,
        targets: &[Target<'_>],
        options: CheckOptions,
        charge: bool,
    ) -> Result<CheckResult> {
        let result = self.decide_local(targets, options, charge).await?;
        match (&self.inner.regions, charge) {
            (Some(regions), true) => {
                let limit = |i: usize| self.inner.policies[i].policy.limit();
                regions.borrow(targets, options, result, limit).await
            }
            _ => Ok(result),
        }
    }

    /// [`Engine::decide_as`] in this region's store only.
    pub(crate) async fn decide_local(
        &self,
        targets: &[Target<'_>],
        options: CheckOptions,
        charge: bool,
    ) -> Result<CheckResult> {
        let inner = &*self.inner;
        let cost = self.validate(options)?;
        if let Some(&(i, _, _)) = targets.iter().find(|(i, _, _)| *i >= inner.policies.len()) {
            return Err(Error::Internal(format!("no policy at index {i}")));
        }
        match &*inner.backend {
            Backend::Memory => {
                let now = options.now_ms.unwrap_or_else(process_now_ms);
                Ok(self.decide_memory(targets, now, cost, Source::Store, charge))
            }
            // One synced policy's key: from the process's credit (`synced`).
            Backend::Redis(_) if charge && self.synced(targets) => {
                let (i, key, _) = targets[0];
                match Box::pin(synced::decide(self, &inner.sync, i, key, options, cost)).await? {
                    Some(result) => Ok(result),
                    None => self.decide_as_exact(targets, options, cost, charge).await,
                }
            }
            Backend::Redis(_) => self.decide_as_exact(targets, options, cost, charge).await,
        }
    }

    /// Whether a check of `targets` is decided from a local credit: one
    /// target, of a policy with `sync`, not shadowed, no per-key overrides.
    fn synced(&self, targets: &[Target<'_>]) -> bool {
        matches!(targets, [(i, _, false)] if self.inner.policies[*i].policy.sync().is_some()) && !self.inner.overrides
    }

    async fn decide_as_exact(
        &self,
        targets: &[Target<'_>],
        options: CheckOptions,
        cost: i64,
        charge: bool,
    ) -> Result<CheckResult> {
        match &*self.inner.backend {
            Backend::Memory => Err(Error::Internal("an exact store decision on the memory store".into())),
            // Boxed: the Redis call's state machine is large, and every
            // future that awaits this one (the memory path's too) would
            // otherwise carry it and copy it on each move.
            Backend::Redis(redis) => Box::pin(self.decide_redis(redis, targets, options.now_ms, cost, charge)).await,
        }
    }

    fn decide_memory(&self, targets: &[Target<'_>], now: i64, cost: i64, source: Source, charge: bool) -> CheckResult {
        let inner = &*self.inner;
        let leases = self.lease_ids(targets, cost);
        if inner.overrides && (inner.memory.overrides.any() || inner.memory.limits.any()) {
            // Per-key overrides and policy-wide limits, read under their
            // locks: a change waits for this decision.
            let view = inner.memory.overrides.view();
            let limits = inner.memory.limits.view();
            let checks: Vec<MemoryCheck<'_>> = targets
                .iter()
                .enumerate()
                .map(|(n, &(i, key, shadow))| {
                    let compiled = &inner.policies[i];
                    let (slot, params) = match (
                        view.params(compiled.records, key, now),
                        limits.params(compiled.records, now),
                    ) {
                        (Some(params), _) => (compiled.records | OVERRIDE_SLOT, params),
                        (None, Some(params)) if compiled.params.kind != Kind::Concurrency => {
                            (compiled.records | LIMIT_SLOT, params)
                        }
                        _ => (compiled.slot, &compiled.params),
                    };
                    MemoryCheck {
                        records: compiled.records,
                        slot,
                        params,
                        key,
                        shadow,
                        penalty: compiled.penalty.as_ref(),
                        lease: lease_at(&leases, n),
                    }
                })
                .collect();
            let (allowed, mut verdicts) = inner.memory.decide(&checks, now, cost, charge);
            for (v, c) in verdicts.iter_mut().zip(&checks) {
                if c.slot & (OVERRIDE_SLOT | LIMIT_SLOT) != 0 {
                    v.overridden = Some([c.params.count as u64, c.params.period as u64, c.params.burst as u64]);
                    v.limited = c.slot & LIMIT_SLOT != 0;
                }
            }
            let leases = if charge { leases } else { Vec::new() };
            return self.result(targets, now, allowed, verdicts, source, &leases);
        }
        if let ([(i, key, shadow)], true) = (targets, charge) {
            let compiled = &inner.policies[*i];
            if compiled.penalty.is_none() && compiled.params.adaptive.is_none() {
                // One key, charged, no penalty record: no vector of checks.
                let check = MemoryCheck {
                    slot: compiled.slot,
                    records: compiled.records,
                    params: &compiled.params,
                    key,
                    shadow: *shadow,
                    penalty: None,
                    lease: lease_at(&leases, 0),
                };
                let verdict = inner.memory.decide_one(&check, now, cost);
                let allowed = verdict.allowed || *shadow;
                return self.result(targets, now, allowed, [verdict], source, &leases);
            }
        }
        let checks: Vec<MemoryCheck<'_>> = targets
            .iter()
            .enumerate()
            .map(|(n, &(i, key, shadow))| {
                let compiled = &inner.policies[i];
                MemoryCheck {
                    slot: compiled.slot,
                    records: compiled.records,
                    params: &compiled.params,
                    key,
                    shadow,
                    penalty: compiled.penalty.as_ref(),
                    lease: lease_at(&leases, n),
                }
            })
            .collect();
        let (allowed, verdicts) = inner.memory.decide(&checks, now, cost, charge);
        let leases = if charge { leases } else { Vec::new() };
        self.result(targets, now, allowed, verdicts, source, &leases)
    }

    fn result(
        &self,
        targets: &[Target<'_>],
        now: i64,
        allowed: bool,
        verdicts: impl IntoIterator<Item = Verdict>,
        source: Source,
        lease_ids: &[Option<String>],
    ) -> CheckResult {
        let mut overridden = Vec::new();
        let mut limited = Vec::new();
        let decisions: Vec<Decision> = targets
            .iter()
            .zip(verdicts)
            .enumerate()
            .map(|(n, (&(i, key, _), v))| {
                let source = match v.adaptive {
                    _ if v.penalized => Source::Penalty,
                    Some(a) if a.denied => Source::Adaptive,
                    _ => source,
                };
                if let (Some(report), Some(adaptive)) = (&v.adaptive, self.inner.policies[i].policy.adaptive()) {
                    let name = self.inner.policies[i].policy.name();
                    self.inner.alerts.transition(name, adaptive, key, report, now);
                }
                let limit = match v.overridden {
                    Some([_, _, burst]) => {
                        overridden.resize(n, None);
                        overridden.push(v.overridden);
                        if v.limited {
                            limited.resize(n, false);
                            limited.push(true);
                        }
                        burst
                    }
                    None => self.inner.policies[i].policy.limit(),
                };
                Decision::from_verdict(v, limit, source)
            })
            .collect();
        // The leases taken: an admitted concurrency policy's, when the check
        // was charged (every enforced policy allowed).
        let leases = if allowed && !lease_ids.is_empty() {
            targets
                .iter()
                .zip(lease_ids)
                .zip(&decisions)
                .filter_map(|((&(policy, key, _), id), d)| {
                    let id = id.as_ref().filter(|_| d.allowed)?;
                    Some(Lease {
                        policy,
                        key: key.to_string(),
                        id: id.clone(),
                    })
                })
                .collect()
        } else {
            Vec::new()
        };
        CheckResult {
            allowed,
            now_ms: now,
            decisions,
            leases,
            overridden,
            limited,
        }
    }

    /// A new lease id for each concurrency target (`None` for the others;
    /// nothing at all, and no allocation, when no target is one): 128 random
    /// bits in hex, then `*<cost>` when the lease holds more than one slot
    /// (the release script reads how many members to remove).
    fn lease_ids(&self, targets: &[Target<'_>], cost: i64) -> Vec<Option<String>> {
        let concurrency = |&(i, _, _): &Target<'_>| self.inner.policies[i].params.kind == Kind::Concurrency;
        if !targets.iter().any(concurrency) {
            return Vec::new();
        }
        targets
            .iter()
            .map(|&(i, _, _)| (self.inner.policies[i].params.kind == Kind::Concurrency).then(|| new_lease_id(cost)))
            .collect()
    }

    /// The policy's keys for `key`, in the order [`KeyLayout`] names: its
    /// state (and log), its penalty record, its override record and the
    /// override's state keys, its adaptive record.
    fn store_keys(&self, i: usize, key: &str) -> Vec<String> {
        let compiled = &self.inner.policies[i];
        let main = store_key(&compiled.state_head, key);
        let records = store_key(&compiled.key_head, key);
        KeyLayout::new(
            &compiled.params,
            compiled.penalty.is_some(),
            self.inner.overrides,
            self.inner.cluster_limits.is_none(),
        )
        .keys(main, &records, &compiled.params, || self.limit_record_key(i))
    }

    /// The store key of policy `i`'s policy-wide limit record (`%` is
    /// escaped in every user key, so none is `{%limit}`).
    pub(crate) fn limit_record_key(&self, i: usize) -> String {
        format!("{}:{{%limit}}", self.inner.policies[i].key_head)
    }

    /// On Redis Cluster with overrides, the limit record of each policy of
    /// `policies` as this process knows it (read again when older than
    /// [`crate::store::overrides::CLUSTER_REFRESH_MS`]); `None` elsewhere (the
    /// decision script reads the record itself).
    async fn cluster_limit_records(
        &self,
        redis: &RedisStore,
        policies: impl Iterator<Item = usize>,
    ) -> Result<Vec<Option<Arc<str>>>> {
        let Some(cache) = &self.inner.cluster_limits else {
            return Ok(policies.map(|_| None).collect());
        };
        let mut out = Vec::new();
        for i in policies {
            if self.inner.policies[i].params.kind == Kind::Concurrency {
                out.push(Some(Arc::from("")));
                continue;
            }
            let now = self.inner.resilience.now();
            let (read_at, text) = cache[i].lock().clone();
            let refresh = std::time::Duration::from_millis(crate::store::overrides::CLUSTER_REFRESH_MS as u64);
            if read_at.is_some_and(|at| now.saturating_duration_since(at) < refresh) {
                out.push(Some(text));
                continue;
            }
            let text: Arc<str> = Arc::from(redis.get_text(&self.limit_record_key(i)).await?);
            *cache[i].lock() = (Some(now), text.clone());
            out.push(Some(text));
        }
        Ok(out)
    }

    /// Makes the next check of policy `i` read its limit record again (on a cluster).
    pub(crate) fn forget_cached_limit(&self, i: usize) {
        if let Some(entry) = self.inner.cluster_limits.as_ref().and_then(|c| c.get(i)) {
            entry.lock().0 = None;
        }
    }

    /// Drops the blocked-key cache's entries of policy `i`.
    pub(crate) fn block_cache_forget_policy(&self, i: usize) {
        if let Some(cache) = &self.inner.block_cache {
            cache.invalidate_policy(i);
        }
    }

    /// Counts a policy-wide limit change of policy `i` (`set` or `remove`).
    pub(crate) fn count_limit_change(&self, i: usize, action: &str) {
        if let Some(compiled) = self.inner.policies.get(i) {
            self.inner
                .metrics
                .limit_change(compiled.policy.name(), action == "remove");
        }
    }

    /// The override record of `key` under policy `i`, then the override's state keys.
    pub(crate) fn override_keys(&self, i: usize, key: &str) -> Vec<String> {
        let compiled = &self.inner.policies[i];
        let main = store_key(&compiled.key_head, key);
        crate::store::overrides::redis_keys(&main, &compiled.params)
            .into_iter()
            .flatten()
            .collect()
    }

    /// The store key marking that policy `i` has per-key overrides (`%` is
    /// escaped in every user key, so none is `{%overrides}`).
    pub(crate) fn override_marker(&self, i: usize) -> String {
        format!("{}:{{%overrides}}", self.inner.policies[i].key_head)
    }

    /// The overrides this limiter ignores (no `overrides: true`, on Redis).
    pub(crate) fn ignored_overrides(&self) -> Option<&crate::store::overrides::IgnoredOverrides> {
        self.inner.ignored_overrides.as_ref()
    }

    /// Whether checks read per-key overrides ([`LimiterConfig::overrides`]).
    pub(crate) fn overrides_enabled(&self) -> bool {
        self.inner.overrides
    }

    /// The numbers of policy `i`.
    pub(crate) fn params_at(&self, i: usize) -> &Params {
        &self.inner.policies[i].params
    }

    /// The memory store (for Redis, the local fallback).
    pub(crate) fn memory_store(&self) -> &MemoryStore {
        &self.inner.memory
    }

    /// The Redis store, if the limiter has one.
    pub(crate) fn redis_store(&self) -> Option<&RedisStore> {
        match &*self.inner.backend {
            Backend::Redis(redis) => Some(redis),
            Backend::Memory => None,
        }
    }

    /// Fails with [`Error::Closed`] once the limiter is closed.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        Ok(())
    }

    async fn decide_redis(
        &self,
        redis: &RedisStore,
        targets: &[Target<'_>],
        now: Option<i64>,
        cost: i64,
        charge: bool,
    ) -> Result<CheckResult> {
        let inner = &*self.inner;
        // Read before the call is sent: no later than the store's decision.
        let sent = (
            Now::of(now),
            inner.block_cache.as_ref().map_or(0, BlockCache::generation),
        );
        if let Some(hit) = inner.block_cache.as_ref().and_then(|c| c.lookup(targets, cost, sent.0)) {
            inner.metrics.block_cache_hit(hit.1);
            return Ok(hit.0);
        }
        let leases = self.lease_ids(targets, cost);
        let lease_ids = &leases;
        // What a cross-slot decision charged, given back if it stops half-way.
        let give_back = GiveBack {
            engine: self,
            targets,
            leases: lease_ids,
            cost,
            charged: ChargedGroups::default(),
        };
        let charged = &give_back.charged;
        let answer = inner
            .resilience
            .call(&inner.metrics, || async move {
                let keys: Vec<Vec<String>> = targets.iter().map(|&(i, key, _)| self.store_keys(i, key)).collect();
                let records = self.cluster_limit_records(redis, targets.iter().map(|t| t.0)).await?;
                let checks: Vec<RedisCheck<'_>> = targets
                    .iter()
                    .zip(&keys)
                    .enumerate()
                    .map(|(n, (&(i, _, shadow), keys))| {
                        let compiled = &inner.policies[i];
                        RedisCheck {
                            params: &compiled.params,
                            keys,
                            shadow,
                            penalty: compiled.penalty.as_ref(),
                            lease: lease_at(lease_ids, n),
                            overrides: inner.overrides,
                            limit_record: records[n].as_deref(),
                        }
                    })
                    .collect();
                if charge {
                    redis.decide(&checks, now, cost, Some(charged)).await
                } else {
                    redis.peek(&checks, now, cost).await
                }
            })
            .await?;
        Ok(match answer {
            Some((store_now, verdicts)) => {
                let allowed = targets.iter().zip(&verdicts).all(|(t, v)| v.allowed || t.2);
                let result = self.result(targets, store_now, allowed, verdicts, Source::Store, &leases);
                if let (Some(cache), true) = (&inner.block_cache, charge) {
                    cache.fill(targets, cost, sent, &result, |i, d| self.block_cacheable(i, d));
                }
                result
            }
            None => self.fallback(targets, now, cost, charge),
        })
    }

    /// One check of `cost` on (policy `i`, `key`) in the store, through the
    /// breaker: the store's clock and verdict, `None` when the store cannot
    /// answer (nothing charged anywhere). A sync's call (`synced`).
    pub(crate) async fn store_take(
        &self,
        i: usize,
        key: &str,
        now: Option<i64>,
        cost: i64,
    ) -> Result<Option<(i64, Verdict)>> {
        let inner = &*self.inner;
        let Backend::Redis(redis) = &*inner.backend else {
            return Err(Error::Internal("a sync on the memory store".into()));
        };
        let compiled = &inner.policies[i];
        let keys = self.store_keys(i, key);
        let answer = inner
            .resilience
            .call(&inner.metrics, || async {
                let records = self.cluster_limit_records(redis, std::iter::once(i)).await?;
                let check = RedisCheck {
                    params: &compiled.params,
                    keys: &keys,
                    shadow: false,
                    penalty: compiled.penalty.as_ref(),
                    lease: None,
                    overrides: inner.overrides,
                    limit_record: records[0].as_deref(),
                };
                redis.decide(&[check], now, cost, None).await
            })
            .await?;
        Ok(answer.map(|(store_now, mut verdicts)| (store_now, verdicts.remove(0))))
    }

    /// Decides while the store cannot, per each policy's `on_store_error`
    /// ([`Resilience::fallback`]), `local` policies on the memory store.
    /// `charge`: `false` for a peek, which charges no `local` policy either.
    pub(crate) fn fallback(&self, targets: &[Target<'_>], now: Option<i64>, cost: i64, charge: bool) -> CheckResult {
        let inner = &*self.inner;
        let now = now.unwrap_or_else(process_now_ms);
        inner.resilience.fallback(
            targets,
            now,
            |i| {
                let policy = &inner.policies[i].policy;
                (policy.on_store_error(), policy.limit())
            },
            |local, all_allow| self.decide_memory(local, now, cost, Source::Local, all_allow && charge),
        )
    }

    /// Gives back admissions of `cost` at `now` for `(policy index, key)`
    /// targets, as a cross-slot decision does when a later slot denies.
    /// Returns how many targets' charges were given back.
    pub(crate) async fn refund(&self, targets: &[(usize, &str)], now: i64, cost: i64) -> Result<usize> {
        let targets: Vec<(usize, &str, Charged)> = targets.iter().map(|&(i, key)| (i, key, Charged::Now)).collect();
        self.refund_charged(&targets, now, cost).await
    }

    /// [`Engine::refund`] of admissions that charged the state each target names.
    pub(crate) async fn refund_charged(
        &self,
        targets: &[(usize, &str, Charged)],
        now: i64,
        cost: i64,
    ) -> Result<usize> {
        let inner = &*self.inner;
        if let Some(&(i, _, _)) = targets.iter().find(|(i, _, _)| *i >= inner.policies.len()) {
            return Err(Error::Internal(format!("no policy at index {i}")));
        }
        match &*inner.backend {
            Backend::Memory => Ok(self.refund_memory(targets, now, cost)),
            Backend::Redis(redis) => {
                let keys: Vec<Vec<String>> = targets.iter().map(|&(i, key, _)| self.store_keys(i, key)).collect();
                let records = self.cluster_limit_records(redis, targets.iter().map(|t| t.0)).await?;
                let checks: Vec<RedisCheck<'_>> = targets
                    .iter()
                    .zip(&keys)
                    .zip(&records)
                    .map(|((&(i, _, _), keys), record)| RedisCheck {
                        params: &inner.policies[i].params,
                        keys,
                        shadow: false,
                        // Its record is among the keys (the refund skips it).
                        penalty: inner.policies[i].penalty.as_ref(),
                        lease: None,
                        overrides: inner.overrides,
                        limit_record: record.as_deref(),
                    })
                    .collect();
                let charged: Vec<Charged> = targets.iter().map(|t| t.2).collect();
                let given = redis.refund(&checks, &charged, now, cost).await;
                // After the store's change: a check sent before it is not remembered.
                for &(i, key, _) in targets {
                    self.block_cache_forget(i, key);
                }
                given
            }
        }
    }

    /// Releases concurrency leases, at `now` (the store's clock when
    /// `None`), in the local store (where the `local` fallback took them)
    /// and in Redis. Returns how many were live. A store that cannot answer
    /// is counted (`polylimit_store_errors_total`) and its leases end with
    /// their lease; a lease of another limiter is a config error.
    pub(crate) async fn release(&self, leases: &[Lease], now: Option<i64>) -> Result<usize> {
        let inner = &*self.inner;
        for (n, lease) in leases.iter().enumerate() {
            if inner
                .policies
                .get(lease.policy)
                .is_none_or(|c| c.params.kind != Kind::Concurrency)
            {
                return Err(Error::config(
                    format!("leases[{n}].policy"),
                    lease.policy,
                    "is not a concurrency policy of this limiter",
                ));
            }
        }
        let local_now = now.unwrap_or_else(process_now_ms);
        let mut released = 0;
        for lease in leases {
            self.block_cache_forget(lease.policy, &lease.key);
            if inner
                .memory
                .release(self.inner.policies[lease.policy].slot, &lease.key, &lease.id, local_now)
            {
                released += 1;
            }
        }
        if let (Backend::Redis(redis), false) = (&*inner.backend, leases.is_empty()) {
            let keys: Vec<Vec<String>> = leases.iter().map(|l| self.store_keys(l.policy, &l.key)).collect();
            let checks: Vec<RedisCheck<'_>> = leases
                .iter()
                .zip(&keys)
                .map(|(l, keys)| RedisCheck {
                    params: &inner.policies[l.policy].params,
                    keys,
                    shadow: false,
                    penalty: None,
                    lease: Some(&l.id),
                    // Leases live in the policy's own state: a concurrency policy takes no override.
                    overrides: false,
                    limit_record: None,
                })
                .collect();
            let answer = inner
                .resilience
                .call(&inner.metrics, || redis.release(&checks, now))
                .await;
            // A key holding foreign data releases nothing either.
            if let Ok(Some(n)) = answer {
                released += n;
            }
        }
        Ok(released)
    }

    /// Releases leases in the local store only (no runtime to reach Redis).
    pub(crate) fn release_local(&self, leases: &[Lease], now: Option<i64>) {
        let now = now.unwrap_or_else(process_now_ms);
        for lease in leases.iter().filter(|l| l.policy < self.inner.policies.len()) {
            let slot = self.inner.policies[lease.policy].slot;
            self.inner.memory.release(slot, &lease.key, &lease.id, now);
        }
    }

    /// [`Engine::refund`] on the memory store (for Redis, the local
    /// fallback's): what a `local` decision charged.
    pub(crate) fn refund_memory(&self, targets: &[(usize, &str, Charged)], now: i64, cost: i64) -> usize {
        let inner = &*self.inner;
        // The numbers and state the decision used: an override's when one
        // is in force, else a policy-wide limit's.
        let view = inner.memory.overrides.any().then(|| inner.memory.overrides.view());
        let limits = inner.memory.limits.any().then(|| inner.memory.limits.view());
        let checks: Vec<MemoryCheck<'_>> = targets
            .iter()
            .filter(|(i, _, _)| *i < inner.policies.len())
            .filter_map(|&(i, key, charged)| {
                let overridden = match charged {
                    Charged::Base => None,
                    Charged::Now | Charged::Override | Charged::Limit => view
                        .as_ref()
                        .and_then(|v| v.params(inner.policies[i].records, key, now)),
                };
                let records = inner.policies[i].records;
                let limited = match charged {
                    Charged::Now | Charged::Limit if inner.overrides => {
                        limits.as_ref().and_then(|v| v.params(records, now))
                    }
                    _ => None,
                };
                let (slot, params) = match (overridden, limited, charged) {
                    // Charged under a limit, now under an override: that state is not read.
                    (Some(_), _, Charged::Limit) => return None,
                    (Some(params), _, _) => (records | OVERRIDE_SLOT, params),
                    (None, Some(params), _) => (records | LIMIT_SLOT, params),
                    // Charged under an override or a limit that is gone: nothing to give back.
                    (None, None, Charged::Override | Charged::Limit) => return None,
                    (None, None, _) => (inner.policies[i].slot, &inner.policies[i].params),
                };
                Some(MemoryCheck {
                    slot,
                    records: inner.policies[i].records,
                    params,
                    key,
                    shadow: false,
                    penalty: None,
                    lease: None,
                })
            })
            .collect();
        inner.memory.refund(&checks, now, cost)
    }

    /// The store's clock now, ms: on Redis the server's as the decisions
    /// estimate it, so a write stamped with it orders with them (the
    /// process's clock until the first decision, and on the memory store).
    pub(crate) fn store_now_ms(&self) -> i64 {
        match &*self.inner.backend {
            Backend::Redis(redis) => redis.now_ms(),
            Backend::Memory => None,
        }
        .unwrap_or_else(process_now_ms)
    }

    /// [`Engine::refund`] through the store's breaker, for a refund that may
    /// not fail (after a response): a store that cannot answer keeps the
    /// charges (a spurious denial later, never an over-admission), and the
    /// failure is metered.
    pub(crate) async fn refund_guarded(&self, targets: &[(usize, &str, Charged)], now: i64, cost: i64) -> usize {
        let inner = &*self.inner;
        if let Backend::Memory = *inner.backend {
            return self.refund_memory(targets, now, cost);
        }
        if let Some(regions) = &inner.regions {
            // A borrowed admission is given back to its lender (regions
            // take no overrides: every charge is the policy's own).
            let pairs: Vec<(usize, &str)> = targets.iter().map(|&(i, key, _)| (i, key)).collect();
            return Box::pin(regions.refund(self, &pairs, now, cost)).await;
        }
        match inner
            .resilience
            .call(&inner.metrics, || self.refund_charged(targets, now, cost))
            .await
        {
            Ok(Some(given)) => given,
            Ok(None) | Err(_) => 0,
        }
    }

    /// [`Engine::refund_guarded`] in this region's store.
    pub(crate) async fn refund_store(&self, targets: &[(usize, &str)], now: i64, cost: i64) -> usize {
        let inner = &*self.inner;
        match inner
            .resilience
            .call(&inner.metrics, || self.refund(targets, now, cost))
            .await
        {
            Ok(Some(given)) => given,
            Ok(None) | Err(_) => 0,
        }
    }

    /// Forgets `key` under every policy (in the store and the local fallback).
    pub(crate) async fn reset(&self, key: &str) -> Result<()> {
        let targets: Vec<(usize, &str)> = (0..self.inner.policies.len()).map(|i| (i, key)).collect();
        self.forget(&targets).await
    }

    /// Forgets `(policy index, key)` targets, penalty records included (in
    /// the store and the local fallback).
    pub(crate) async fn forget(&self, targets: &[(usize, &str)]) -> Result<()> {
        self.forget_local(targets).await?;
        if let Some(regions) = &self.inner.regions {
            // And in the other regions' shares, those that answer.
            regions.forget(targets).await;
        }
        Ok(())
    }

    /// [`Engine::forget`] in this region's store.
    pub(crate) async fn forget_local(&self, targets: &[(usize, &str)]) -> Result<()> {
        let inner = &*self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if let Some(&(i, _)) = targets.iter().find(|(i, _)| *i >= inner.policies.len()) {
            return Err(Error::Internal(format!("no policy at index {i}")));
        }
        inner.sync.forget(targets);
        for &(i, key) in targets {
            self.block_cache_forget(i, key);
            let compiled = &inner.policies[i];
            inner.memory.reset(compiled.slot, compiled.records, key);
            let overridden = compiled.records | OVERRIDE_SLOT;
            inner.memory.reset(overridden, overridden, key);
            let limited = compiled.records | LIMIT_SLOT;
            inner.memory.reset(limited, limited, key);
        }
        if let Backend::Redis(redis) = &*inner.backend {
            // The state, not an override: that is removed by remove_override;
            // nor the policy-wide limit (remove_limit).
            let record = crate::store::overrides::RECORD_SUFFIX;
            let keys: Vec<String> = targets
                .iter()
                .flat_map(|&(i, key)| {
                    let limit = self.limit_record_key(i);
                    self.store_keys(i, key).into_iter().filter(move |k| *k != limit)
                })
                .filter(|k| !k.ends_with(record))
                .collect();
            let deleted = redis.delete(&keys).await;
            // After the store's change too: a check sent before it is not remembered.
            for &(i, key) in targets {
                self.block_cache_forget(i, key);
            }
            deleted?;
        }
        Ok(())
    }

    /// Whether a denied check may be served from the blocked-key cache as
    /// far as policy `i`'s `decision` goes: never a concurrency policy, and
    /// for a policy with a penalty only a running block (the store records
    /// its other denials toward the threshold).
    fn block_cacheable(&self, i: usize, decision: &Decision) -> bool {
        let compiled = &self.inner.policies[i];
        // An adaptive policy's store counts every attempt toward the key's
        // rate: a denial answered here would hide the attacker from it.
        compiled.params.kind != Kind::Concurrency
            && compiled.params.adaptive.is_none()
            && (compiled.penalty.is_none() || decision.allowed || decision.source == Source::Penalty)
    }

    /// Drops the blocked-key cache's entry of `key` under policy `i`.
    pub(crate) fn block_cache_forget(&self, i: usize, key: &str) {
        if let Some(cache) = &self.inner.block_cache {
            cache.invalidate(i, key);
        }
    }

    /// The store's breaker state (`Closed` for the memory store).
    pub(crate) fn breaker_state(&self) -> BreakerState {
        match *self.inner.backend {
            Backend::Memory => BreakerState::Closed,
            Backend::Redis(_) => self.inner.resilience.state(),
        }
    }

    /// The store's breaker reads the time from `clock` from now on.
    pub(crate) fn set_breaker_clock(&self, clock: Arc<dyn Clock>) {
        self.inner.resilience.set_clock(clock);
    }

    /// Metrics in Prometheus text format, rendered from the snapshot.
    pub(crate) fn metrics_text(&self) -> String {
        self.metrics_snapshot().to_prometheus()
    }

    /// Every metric family this limiter exports, read now.
    pub(crate) fn metrics_snapshot(&self) -> MetricsSnapshot {
        let breaker = matches!(*self.inner.backend, Backend::Redis(_)).then(|| self.inner.resilience.state());
        let mut families = self.inner.metrics.families(breaker);
        if let Some(cache) = &self.inner.block_cache {
            families.extend(self.inner.metrics.block_cache_families(cache.len(), cache.max_keys()));
        }
        if let Some(regions) = &self.inner.regions {
            families.push(regions.family());
        }
        if let Some(notice) = &self.inner.ignored_overrides {
            let found = notice.found(self.policies().map(|p| p.name().to_string()));
            if !found.is_empty() {
                families.push(crate::metrics::family(
                    "polylimit_overrides_ignored",
                    MetricKind::Gauge,
                    "Policies with per-key overrides in the store, which this limiter (without overrides: true) ignores.",
                    found.iter().map(|name| (vec![("policy", name.as_str())], 1)),
                ));
            }
        }
        if self.inner.policies.iter().any(|c| c.params.adaptive.is_some()) {
            families.extend(self.inner.alerts.families());
        }
        MetricsSnapshot {
            start_unix_nanos: self.inner.metrics.started_unix_nanos(),
            families,
        }
    }

    /// The alerts of adaptive policies: their callback, log line and metrics.
    pub(crate) fn alerts(&self) -> &crate::anomaly::Alerts {
        &self.inner.alerts
    }

    /// Counts background work until the returned value is dropped.
    pub(crate) fn background(&self) -> &Arc<crate::background::Background> {
        &self.inner.background
    }

    /// Returns once the work this engine started off the request's path has
    /// finished.
    pub(crate) async fn settled(&self) {
        self.inner.background.settled().await
    }

    /// Closes the limiter: later checks fail with [`Error::Closed`]. Idempotent.
    pub(crate) fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        if let Some(regions) = &self.inner.regions {
            regions.close();
        }
    }

    /// Whether [`Engine::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}

/// The charges of a cross-slot decision that stopped half-way (its deadline
/// passed, a call failed, its caller gave up: [`ChargedGroups`]), given back when
/// it is dropped, in a task of their own: off the request's path, which has
/// no budget left, and whole even when the request's future is gone. The
/// refund has the store's own `timeout`; a store that cannot answer keeps
/// the charge (an under-admission, never an over-admission).
/// Tries of a [`GiveBack`] refund before the charge is left in place.
const GIVE_BACK_TRIES: u32 = 5;

struct GiveBack<'a> {
    engine: &'a Engine,
    targets: &'a [Target<'a>],
    leases: &'a [Option<String>],
    cost: i64,
    charged: ChargedGroups,
}

impl Drop for GiveBack<'_> {
    fn drop(&mut self) {
        let Some((now, indices)) = self.charged.get_mut().take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = &*self.engine.inner;
        let mut refunds: Vec<(usize, String)> = Vec::new();
        let mut leases: Vec<Lease> = Vec::new();
        for n in indices {
            let Some(&(i, key, _)) = self.targets.get(n) else {
                continue;
            };
            match lease_at(self.leases, n) {
                // A lease is given back by releasing it.
                Some(id) if inner.policies[i].params.kind == Kind::Concurrency => leases.push(Lease {
                    policy: i,
                    key: key.to_string(),
                    id: id.to_string(),
                }),
                _ => refunds.push((i, key.to_string())),
            }
        }
        let (engine, cost) = (self.engine.clone(), self.cost);
        let running = engine.background().start();
        runtime.spawn(async move {
            let _running = running;
            let targets: Vec<(usize, &str)> = refunds.iter().map(|(i, key)| (*i, key.as_str())).collect();
            // The store may still be reconnecting (the cut dropped its
            // connection): a few tries over about 1.5 s.
            let mut pause = Duration::from_millis(100);
            for attempt in 0..GIVE_BACK_TRIES {
                if attempt > 0 {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                let refunded = targets.is_empty() || {
                    match engine.refund(&targets, now, cost).await {
                        Ok(_) | Err(Error::Store { .. }) => true,
                        Err(_) => false,
                    }
                };
                // A release is idempotent: sent again with the refund.
                let released = leases.is_empty() || engine.release(&leases, Some(now)).await.is_ok_and(|_| true);
                if refunded && released {
                    return;
                }
                engine.inner.metrics.store_error();
            }
        });
    }
}

/// Test support for refunds (issue 17): decides and refunds `(policy index,
/// key)` targets directly, and hooks the gap between the two passes of a
/// cross-slot decision. Not part of the API.
#[doc(hidden)]
#[derive(Clone)]
pub struct RefundProbe {
    engine: Engine,
}

#[doc(hidden)]
impl RefundProbe {
    /// A limiter's engine, built from `config`.
    pub fn new(config: LimiterConfig) -> Result<RefundProbe> {
        Ok(RefundProbe {
            engine: Engine::new(config)?,
        })
    }

    /// Decides `(policy index, key)` targets atomically (across slots on a cluster).
    pub async fn check(&self, targets: &[(usize, &str)], options: CheckOptions) -> Result<CheckResult> {
        let targets: Vec<Target<'_>> = targets.iter().map(|&(i, key)| (i, key, false)).collect();
        self.engine.decide(&targets, options).await
    }

    /// The decision [`RefundProbe::check`] would make, charging nothing.
    pub async fn peek(&self, targets: &[(usize, &str)], options: CheckOptions) -> Result<CheckResult> {
        let targets: Vec<Target<'_>> = targets.iter().map(|&(i, key)| (i, key, false)).collect();
        self.engine.peek(&targets, options).await
    }

    /// The engine (per-key overrides set through it in tests).
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Gives back admissions of `cost` at `now_ms`; how many were given back.
    pub async fn refund(&self, targets: &[(usize, &str)], cost: u64, now_ms: i64) -> Result<usize> {
        self.engine.refund(targets, now_ms, cost as i64).await
    }

    /// Forgets `key` under every policy ([`crate::Limiter::reset`]).
    pub async fn reset(&self, key: &str) -> Result<()> {
        self.engine.reset(key).await
    }

    /// Runs `hook` between the peek and the charge pass of every cross-slot
    /// decision (Redis stores only).
    pub fn between_slot_passes(&self, hook: Option<Arc<dyn Fn() + Send + Sync>>) {
        if let Backend::Redis(redis) = &*self.engine.inner.backend {
            redis.set_between_passes(hook);
        }
    }

    /// Metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.engine.metrics_text()
    }

    /// [`crate::Limiter::settled`].
    pub async fn settled(&self) {
        self.engine.settled().await
    }
}
