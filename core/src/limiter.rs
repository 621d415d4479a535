//! The public entry point: a limiter holds policies and a store, and guards
//! the store with a timeout, a circuit breaker and each policy's fallback.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::algorithm::penalty::PenaltyParams;
use crate::algorithm::{Params, Verdict};
use crate::breaker::{BreakerConfig, BreakerState, CircuitBreaker};
use crate::decision::{CheckResult, Decision, Source};
use crate::duration::parse_duration_ms;
use crate::error::{Error, Result};
use crate::http::rules::{HttpRules, HTTP_FIELDS};
use crate::metrics::Metrics;
use crate::policy::{check_name, OnStoreError, Policy, MAX_COST};
use crate::store::keys::{key_head, store_key};
use crate::store::memory::{MemoryCheck, MemoryStore};
use crate::store::redis::{RedisCheck, RedisStore, Timeouts};

/// Everything a limiter is built from.
#[derive(Debug, Clone)]
pub struct LimiterConfig {
    /// The policies; a check applies all of them to its key, atomically.
    pub policies: Vec<Policy>,
    /// `memory`, `redis://…`, `rediss://…` or `redis+cluster://h1:p1,h2:p2`.
    pub store: String,
    /// First segment of every store key.
    pub prefix: String,
    /// Most keys the memory store (and the local fallback) holds.
    pub max_keys: usize,
    /// Longest wait of a check for the store, waiting for a connection included.
    pub timeout: Duration,
    /// Deadline of opening a store connection (TCP, TLS and the handshake),
    /// in the background: checks wait for it only their `timeout`.
    pub connect_timeout: Duration,
    /// The store's circuit breaker.
    pub breaker: BreakerConfig,
}

impl LimiterConfig {
    /// One policy on the memory store, with the defaults.
    pub fn new(policy: Policy) -> LimiterConfig {
        LimiterConfig {
            policies: vec![policy],
            store: "memory".into(),
            prefix: "polylimit".into(),
            max_keys: 1_000_000,
            timeout: Duration::from_millis(100),
            connect_timeout: Duration::from_secs(1),
            breaker: BreakerConfig::default(),
        }
    }

    /// The same, on another store.
    pub fn with_store(mut self, store: impl Into<String>) -> LimiterConfig {
        self.store = store.into();
        self
    }

    /// Builds a configuration from the options object every binding passes:
    /// `policy` (or `policies`: a list, or a map of name → policy), `store`,
    /// `prefix`, `max_keys`, `timeout`, `connect_timeout`, `failure_threshold`, `cooldown`,
    /// `half_open_probes`. Unknown fields are errors.
    pub fn from_value(value: &Value) -> Result<LimiterConfig> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("options", value, "is not an object"))?;
        const FIELDS: [&str; 10] = [
            "policy",
            "policies",
            "store",
            "prefix",
            "max_keys",
            "timeout",
            "connect_timeout",
            "failure_threshold",
            "cooldown",
            "half_open_probes",
        ];
        for key in obj.keys() {
            if !FIELDS.contains(&key.as_str()) {
                return Err(Error::config(
                    key.as_str(),
                    "",
                    format!("is not a limiter option (expected one of {})", FIELDS.join(", ")),
                ));
            }
        }
        let policies = match (obj.get("policy"), obj.get("policies")) {
            (Some(_), Some(_)) => return Err(Error::config("policies", "", "cannot be given together with policy")),
            (Some(p), None) => vec![Policy::from_value(p, "policy")?],
            (None, Some(Value::Array(list))) => list
                .iter()
                .enumerate()
                .map(|(i, p)| Policy::from_value(p, &format!("policies[{i}]")))
                .collect::<Result<_>>()?,
            (None, Some(Value::Object(map))) => map
                .iter()
                .map(|(name, p)| {
                    check_name("policies", name)?;
                    let path = format!("policies.{name}");
                    let policy = Policy::from_value(p, &path)?;
                    Ok(if p.get("name").is_some() {
                        policy
                    } else {
                        policy.with_name(name.as_str())
                    })
                })
                .collect::<Result<_>>()?,
            (None, Some(other)) => return Err(Error::config("policies", other, "is not a list or a map of policies")),
            (None, None) => return Err(Error::config("policy", "", "is required")),
        };
        let mut config = LimiterConfig::new(policies[0].clone());
        config.policies = policies;
        if let Some(v) = obj.get("store") {
            config.store = v
                .as_str()
                .ok_or_else(|| Error::config("store", v, "is not a string"))?
                .to_string();
        }
        if let Some(v) = obj.get("prefix") {
            config.prefix = v
                .as_str()
                .ok_or_else(|| Error::config("prefix", v, "is not a string"))?
                .to_string();
        }
        if let Some(v) = obj.get("max_keys") {
            config.max_keys =
                v.as_u64()
                    .filter(|n| *n > 0 && *n <= 1 << 32)
                    .ok_or_else(|| Error::config("max_keys", v, "is not a positive integer"))? as usize;
        }
        let duration = |field: &str| -> Result<Option<Duration>> {
            obj.get(field)
                .map(|v| {
                    v.as_str()
                        .and_then(parse_duration_ms)
                        .filter(|ms| *ms > 0)
                        .map(Duration::from_millis)
                        .ok_or_else(|| Error::config(field, v, "is not a duration like \"100ms\", \"30s\" above zero"))
                })
                .transpose()
        };
        if let Some(d) = duration("timeout")? {
            config.timeout = d;
        }
        if let Some(d) = duration("connect_timeout")? {
            config.connect_timeout = d;
        }
        if let Some(d) = duration("cooldown")? {
            config.breaker.cooldown = d;
        }
        let count = |field: &str| -> Result<Option<u32>> {
            obj.get(field)
                .map(|v| {
                    v.as_u64()
                        .filter(|n| *n > 0 && *n <= 1_000_000)
                        .map(|n| n as u32)
                        .ok_or_else(|| Error::config(field, v, "is not a positive integer"))
                })
                .transpose()
        };
        if let Some(n) = count("failure_threshold")? {
            config.breaker.threshold = n;
        }
        if let Some(n) = count("half_open_probes")? {
            config.breaker.half_open_max = n;
        }
        Ok(config)
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

/// One policy on one key; `true` for a shadow check (its denial blocks nothing).
pub(crate) type Target<'a> = (usize, &'a str, bool);

/// A policy ready to run: its numbers and the head of its store keys.
struct Compiled {
    policy: Policy,
    params: Params,
    penalty: Option<PenaltyParams>,
    key_head: String,
}

enum Backend {
    Memory,
    Redis(Box<RedisStore>),
}

struct Inner {
    policies: Vec<Compiled>,
    backend: Backend,
    /// The memory store; for Redis, the `local` fallback.
    memory: MemoryStore,
    breaker: CircuitBreaker,
    closed: AtomicBool,
    metrics: Metrics,
    rules: Option<HttpRules>,
}

/// A rate limiter. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

/// The process clock in ms since the epoch.
pub(crate) fn process_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Limiter {
    /// Builds a limiter. Fails only on bad configuration; a Redis store is
    /// connected lazily, so an unreachable Redis is handled by the fallback.
    pub fn new(config: LimiterConfig) -> Result<Limiter> {
        if config.policies.is_empty() {
            return Err(Error::config("policies", "[]", "is empty"));
        }
        for (i, p) in config.policies.iter().enumerate() {
            check_name(&format!("policies[{i}].name"), p.name())?;
            if config.policies[..i].iter().any(|q| q.name() == p.name()) {
                return Err(Error::config(
                    "policies",
                    format!("{:?}", p.name()),
                    "names two policies the same",
                ));
            }
        }
        if config.prefix.is_empty() || config.prefix.contains(['{', '}']) {
            return Err(Error::config(
                "prefix",
                format!("{:?}", config.prefix),
                "is not a non-empty string without '{' or '}'",
            ));
        }
        let backend = match config.store.as_str() {
            "memory" => Backend::Memory,
            url if url.starts_with("redis://")
                || url.starts_with("rediss://")
                || url.starts_with("redis+cluster://")
                || url.starts_with("rediss+cluster://") =>
            {
                Backend::Redis(Box::new(RedisStore::open(
                    url,
                    Timeouts {
                        call: config.timeout,
                        connect: config.connect_timeout,
                    },
                )?))
            }
            other => {
                return Err(Error::config(
                    "store",
                    format!("{other:?}"),
                    "is not \"memory\", \"redis://…\", \"rediss://…\" or \"redis+cluster://…\"",
                ))
            }
        };
        let policies = config
            .policies
            .into_iter()
            .map(|policy| {
                let params = Params::new(&policy);
                let key_head = key_head(&config.prefix, params.kind, policy.name());
                let penalty = policy.penalty().map(PenaltyParams::new);
                Compiled {
                    policy,
                    params,
                    penalty,
                    key_head,
                }
            })
            .collect::<Vec<_>>();
        let metrics = Metrics::new(policies.iter().map(|c| c.policy.name()));
        Ok(Limiter {
            inner: Arc::new(Inner {
                policies,
                backend,
                memory: MemoryStore::new(config.max_keys),
                breaker: CircuitBreaker::new(config.breaker),
                closed: AtomicBool::new(false),
                metrics,
                rules: None,
            }),
        })
    }

    /// A limiter from a rules file (YAML or JSON, `${NAME:-default}` expanded
    /// from the environment): limiter options, `policies`
    /// (a map of name → policy), `rules`, `trusted_proxies`, `ipv6_subnet`,
    /// `headers`, `shadow`, `allowlist`, `denylist`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Limiter> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::config(
                "rules file",
                format!("{:?}", path.display().to_string()),
                format!("cannot be read: {e}"),
            )
        })?;
        Limiter::from_rules(&text)
    }

    /// A limiter from the text of a rules file. `${NAME}` and
    /// `${NAME:-default}` are replaced by environment variables, one value at
    /// a time, after parsing.
    pub fn from_rules(text: &str) -> Result<Limiter> {
        Limiter::from_document(&crate::document::parse_rules(text)?)
    }

    /// A limiter from a parsed rules document whose variables are already
    /// expanded ([`crate::parse_rules`] or [`crate::expand_document`]).
    pub fn from_document(value: &Value) -> Result<Limiter> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("rules file", "", "is not a map"))?;
        let (http, options): (serde_json::Map<_, _>, serde_json::Map<_, _>) = obj
            .clone()
            .into_iter()
            .partition(|(k, _)| HTTP_FIELDS.contains(&k.as_str()));
        if !options.contains_key("policies") {
            return Err(Error::config("policies", "", "is required in a rules file"));
        }
        let config = LimiterConfig::from_value(&Value::Object(options))?;
        let names: Vec<String> = config.policies.iter().map(|p| p.name().to_string()).collect();
        let rules = HttpRules::from_value(&http, &|name| names.iter().position(|n| n == name))?;
        let mut limiter = Limiter::new(config)?;
        Arc::get_mut(&mut limiter.inner).expect("not shared yet").rules = Some(rules);
        Ok(limiter)
    }

    pub(crate) fn http_rules(&self) -> Option<&HttpRules> {
        self.inner.rules.as_ref()
    }

    pub(crate) fn policy_at(&self, index: usize) -> &Policy {
        &self.inner.policies[index].policy
    }

    pub(crate) fn record_request(&self, policy: usize, rule: &str, decision: &Decision, blocked: bool) {
        self.inner
            .metrics
            .request(self.policy_at(policy).name(), rule, decision, blocked);
    }

    /// A limiter from the options object of [`LimiterConfig::from_value`].
    pub fn from_value(options: &Value) -> Result<Limiter> {
        Limiter::new(LimiterConfig::from_value(options)?)
    }

    /// The policies, in order.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.inner.policies.iter().map(|c| &c.policy)
    }

    /// Checks `key` with cost 1 on the store's clock. With several policies,
    /// returns the one closest to denying.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        self.check_with(key, CheckOptions::default()).await
    }

    /// Checks `key` with options.
    pub async fn check_with(&self, key: &str, options: CheckOptions) -> Result<Decision> {
        let result = self.check_all(key, options).await?;
        Ok(result.decision())
    }

    /// Checks `key` against every policy in one atomic decision: allowed only
    /// if all allow, and then all are charged; otherwise none is.
    pub async fn check_all(&self, key: &str, options: CheckOptions) -> Result<CheckResult> {
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

    /// Decides `(policy index, key)` pairs atomically.
    pub(crate) async fn decide(&self, targets: &[Target<'_>], options: CheckOptions) -> Result<CheckResult> {
        let inner = &*self.inner;
        if inner.closed.load(Ordering::Acquire) {
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
        if let Some(&(i, _, _)) = targets.iter().find(|(i, _, _)| *i >= inner.policies.len()) {
            return Err(Error::Internal(format!("no policy at index {i}")));
        }
        let cost = options.cost as i64;
        let result = match &inner.backend {
            Backend::Memory => {
                let now = options.now_ms.unwrap_or_else(process_now_ms);
                self.decide_memory(targets, now, cost, Source::Store, true)
            }
            Backend::Redis(redis) => self.decide_redis(redis, targets, options.now_ms, cost).await?,
        };
        Ok(result)
    }

    fn decide_memory(&self, targets: &[Target<'_>], now: i64, cost: i64, source: Source, charge: bool) -> CheckResult {
        let inner = &*self.inner;
        let checks: Vec<MemoryCheck<'_>> = targets
            .iter()
            .map(|&(i, key, shadow)| {
                let compiled = &inner.policies[i];
                MemoryCheck {
                    slot: i as u32,
                    params: &compiled.params,
                    key,
                    shadow,
                    penalty: compiled.penalty.as_ref(),
                }
            })
            .collect();
        let (allowed, verdicts) = inner.memory.decide(&checks, now, cost, charge);
        self.result(targets, now, allowed, verdicts, source)
    }

    fn result(
        &self,
        targets: &[Target<'_>],
        now: i64,
        allowed: bool,
        verdicts: Vec<Verdict>,
        source: Source,
    ) -> CheckResult {
        let decisions = targets
            .iter()
            .zip(verdicts)
            .map(|(&(i, _, _), v)| {
                let source = if v.penalized { Source::Penalty } else { source };
                Decision::from_verdict(v, self.inner.policies[i].policy.limit(), source)
            })
            .collect();
        CheckResult {
            allowed,
            now_ms: now,
            decisions,
        }
    }

    /// The policy's keys for `key`: its state (and log), then its penalty record.
    fn store_keys(&self, i: usize, key: &str) -> Vec<String> {
        let compiled = &self.inner.policies[i];
        let main = store_key(&compiled.key_head, key);
        let mut keys = Vec::with_capacity(3);
        if compiled.params.key_count() == 2 {
            keys.push(format!("{main}:log"));
        }
        if compiled.penalty.is_some() {
            keys.push(format!("{main}:penalty"));
        }
        keys.insert(0, main);
        keys
    }

    async fn decide_redis(
        &self,
        redis: &RedisStore,
        targets: &[Target<'_>],
        now: Option<i64>,
        cost: i64,
    ) -> Result<CheckResult> {
        let inner = &*self.inner;
        let Some(permit) = inner.breaker.acquire() else {
            return Ok(self.fallback(targets, now, cost));
        };
        let keys: Vec<Vec<String>> = targets.iter().map(|&(i, key, _)| self.store_keys(i, key)).collect();
        let checks: Vec<RedisCheck<'_>> = targets
            .iter()
            .zip(&keys)
            .map(|(&(i, _, shadow), keys)| {
                let compiled = &inner.policies[i];
                RedisCheck {
                    params: &compiled.params,
                    keys,
                    shadow,
                    penalty: compiled.penalty.as_ref(),
                }
            })
            .collect();
        // The store bounds the call by `timeout`, a connect included. If
        // this future is dropped first, the permit reports a failure.
        let started = Instant::now();
        let outcome = redis.decide(&checks, now, cost).await;
        inner.metrics.store_latency(started.elapsed());
        match outcome {
            Ok((store_now, verdicts)) => {
                permit.success();
                let allowed = targets.iter().zip(&verdicts).all(|(t, v)| v.allowed || t.2);
                Ok(self.result(targets, store_now, allowed, verdicts, Source::Store))
            }
            Err(e @ Error::Store { .. }) => {
                // The server answered: it is up, only this key is wrong.
                permit.success();
                inner.metrics.store_error();
                Err(e)
            }
            Err(_) => {
                permit.failure();
                inner.metrics.store_error();
                Ok(self.fallback(targets, now, cost))
            }
        }
    }

    /// Decides while the store cannot, per each policy's `on_store_error`.
    pub(crate) fn fallback(&self, targets: &[Target<'_>], now: Option<i64>, cost: i64) -> CheckResult {
        let inner = &*self.inner;
        let now = now.unwrap_or_else(process_now_ms);
        let mode = |i: usize| inner.policies[i].policy.on_store_error();
        let any_closed = targets
            .iter()
            .any(|&(i, _, shadow)| mode(i) == OnStoreError::FailClosed && !shadow);
        let local: Vec<Target<'_>> = targets
            .iter()
            .copied()
            .filter(|&(i, _, _)| mode(i) == OnStoreError::Local)
            .collect();
        // Local policies are charged only if nothing else denies.
        let local_result =
            (!local.is_empty()).then(|| self.decide_memory(&local, now, cost, Source::Local, !any_closed));
        let retry_ms = inner.breaker.retry_in().as_millis().max(1000) as u64;
        let mut local_decisions = local_result.iter().flat_map(|r| r.decisions.iter().copied());
        let decisions: Vec<Decision> = targets
            .iter()
            .map(|&(i, _, _)| {
                let limit = inner.policies[i].policy.limit();
                match mode(i) {
                    OnStoreError::Local => local_decisions.next().unwrap_or(Decision {
                        allowed: false,
                        limit,
                        remaining: 0,
                        reset_after_ms: 0,
                        retry_after_ms: None,
                        delay_ms: 0,
                        source: Source::Local,
                    }),
                    OnStoreError::FailOpen => Decision {
                        allowed: true,
                        limit,
                        remaining: limit,
                        reset_after_ms: 0,
                        retry_after_ms: None,
                        delay_ms: 0,
                        source: Source::FailOpen,
                    },
                    OnStoreError::FailClosed => Decision {
                        allowed: false,
                        limit,
                        remaining: 0,
                        reset_after_ms: 0,
                        retry_after_ms: Some(retry_ms),
                        delay_ms: 0,
                        source: Source::FailClosed,
                    },
                }
            })
            .collect();
        let allowed = targets.iter().zip(&decisions).all(|(t, d)| d.allowed || t.2);
        CheckResult {
            allowed,
            now_ms: now,
            decisions,
        }
    }

    /// Forgets `key` under every policy (in the store and the local fallback).
    pub async fn reset(&self, key: &str) -> Result<()> {
        let inner = &*self.inner;
        if inner.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        for i in 0..inner.policies.len() {
            inner.memory.reset(i as u32, key);
        }
        if let Backend::Redis(redis) = &inner.backend {
            let keys: Vec<String> = (0..inner.policies.len())
                .flat_map(|i| self.store_keys(i, key))
                .collect();
            redis.delete(&keys).await?;
        }
        Ok(())
    }

    /// The store's breaker state (`Closed` for the memory store).
    pub fn breaker_state(&self) -> BreakerState {
        match self.inner.backend {
            Backend::Memory => BreakerState::Closed,
            Backend::Redis(_) => self.inner.breaker.state(),
        }
    }

    /// Metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        let breaker = matches!(self.inner.backend, Backend::Redis(_)).then(|| self.inner.breaker.state());
        self.inner.metrics.render(breaker)
    }

    /// Closes the limiter: later checks fail with [`Error::Closed`]. Idempotent.
    pub fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
    }

    /// Whether [`Limiter::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }
}
