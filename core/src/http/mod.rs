//! The HTTP layer every middleware shares: a framework request becomes a
//! [`RequestInfo`], the rules decide, and an [`Outcome`] says what to answer.
//! No binding computes a key, a client address, a header or a body itself.

pub(crate) mod client_ip;
#[cfg(test)]
mod client_ip_fuzz;
pub(crate) mod completion;
pub use completion::ended_status;
mod concurrency;
pub(crate) mod headers;
pub(crate) mod route;
pub(crate) mod rules;

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use crate::breaker::{BreakerState, Clock};
use crate::decision::{CheckResult, Decision, Lease, Source};
use crate::engine::{process_now_ms, CheckOptions, Engine, LimiterConfig, Target as Check};
use crate::error::{Error, Result};
use crate::overrides::{Override, OverrideSpec};
use crate::policy::Policy;
use client_ip::{client_ip, ip_key, parse_peer};
pub use concurrency::LeaseGuard;
pub use headers::{HeaderDraft, HeaderMode};
use route::normalize_path;
use rules::{glob_match, key_dimensions, middleware_key, Dimension, HttpRules, List, Rule, Target};

/// What the limiter needs to know about a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path the framework's router saw, or the request target: the core
    /// reduces an absolute-form target to its path, drops the query and
    /// fragment and decodes unreserved percent-escapes before matching.
    pub path: String,
    /// The route template as the framework writes it (`/users/{id}`,
    /// `/users/:id`, `GET /users/{id}`); the core compares its canonical form.
    /// Without one, the `route` dimension is `unmatched`.
    pub route: Option<String>,
    /// The TCP peer address (`203.0.113.7`, `[::1]:8080`, …). `None`, `""`,
    /// `"@"` or anything that is not an address is a peer without an address
    /// (a Unix socket): a trusted proxy with `unix` in `trusted_proxies`, else
    /// the one client `unknown`.
    pub peer: Option<String>,
    /// The framework matches paths case-insensitively (Express by default):
    /// `match: { path }` then ignores case too.
    pub case_insensitive: bool,
    /// The framework serves `/a/` as `/a` (Express by default): `match: { path }`
    /// then ignores one trailing slash too.
    pub ignore_trailing_slash: bool,
    /// Request headers, in order, names in any case.
    pub headers: Vec<(String, String)>,
    /// The authenticated user, if any.
    pub user: Option<String>,
    /// The API key, if any.
    pub api_key: Option<String>,
    /// A key chosen by the caller (the `key` dimension).
    pub key: Option<String>,
    /// Units the request costs (default 1).
    pub cost: Option<u64>,
    /// Decide at this time instead of the store's clock (tests, simulations).
    pub now_ms: Option<i64>,
}

impl RequestInfo {
    /// From the JSON object the bindings and the HTTP vectors use:
    /// `method`, `path`, `route`, `peer`, `headers` (object or list of pairs),
    /// `user`, `api_key`, `key`, `cost`, `now_ms`, `case_insensitive`,
    /// `ignore_trailing_slash`.
    pub fn from_value(value: &Value) -> Result<RequestInfo> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("request", value, "is not an object"))?;
        let text = |field: &str| -> Result<Option<String>> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(Error::config(format!("request.{field}"), other, "is not a string")),
            }
        };
        let mut headers = Vec::new();
        match obj.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    let v = v
                        .as_str()
                        .ok_or_else(|| Error::config(format!("request.headers.{k}"), v, "is not a string"))?;
                    headers.push((k.clone(), v.to_string()));
                }
            }
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_array().map(Vec::as_slice) {
                        Some([Value::String(k), Value::String(v)]) => headers.push((k.clone(), v.clone())),
                        _ => {
                            return Err(Error::config(
                                format!("request.headers[{i}]"),
                                item,
                                "is not a [name, value] pair",
                            ))
                        }
                    }
                }
            }
            Some(other) => {
                return Err(Error::config(
                    "request.headers",
                    other,
                    "is not an object or a list of pairs",
                ))
            }
        }
        for k in obj.keys() {
            const FIELDS: [&str; 12] = [
                "method",
                "path",
                "route",
                "peer",
                "headers",
                "user",
                "api_key",
                "key",
                "cost",
                "now_ms",
                "case_insensitive",
                "ignore_trailing_slash",
            ];
            if !FIELDS.contains(&k.as_str()) {
                return Err(Error::config(format!("request.{k}"), "", "is not a request field"));
            }
        }
        let options = CheckOptions::from_values(obj.get("cost"), obj.get("now_ms"))?;
        let flag = |field: &str| -> Result<bool> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(Error::config(format!("request.{field}"), other, "is not true or false")),
            }
        };
        Ok(RequestInfo {
            method: text("method")?.unwrap_or_else(|| "GET".into()),
            case_insensitive: flag("case_insensitive")?,
            ignore_trailing_slash: flag("ignore_trailing_slash")?,
            path: text("path")?.unwrap_or_else(|| "/".into()),
            route: text("route")?,
            peer: text("peer")?,
            headers,
            user: text("user")?,
            api_key: text("api_key")?,
            key: text("key")?,
            cost: obj.get("cost").filter(|v| !v.is_null()).map(|_| options.cost),
            now_ms: options.now_ms,
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One policy's decision for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleDecision {
    /// The rule's label (its name, route or path pattern).
    pub rule: String,
    /// The policy's name.
    pub policy: String,
    /// The decision.
    pub decision: Decision,
    /// The rule only observes (`shadow: true`).
    pub shadow: bool,
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `None`: let the request through. Otherwise 429, 503 or 403.
    pub status: Option<u16>,
    /// Headers to set on the response, allowed or not.
    pub headers: Vec<(String, String)>,
    /// The JSON body of a refusal.
    pub body: Option<String>,
    /// Shape mode: hold the request this long before serving it.
    pub delay_ms: u64,
    /// Every policy's decision.
    pub decisions: Vec<RuleDecision>,
    /// The concurrency leases the request took: release them
    /// ([`Limiter::release`]) when its response is done.
    pub leases: Vec<Lease>,
    /// An allowed request some of whose rules do not count every response
    /// (`count`): the token to pass to [`Limiter::complete`] with the
    /// response's status. Server-side only, never a header.
    pub completion: Option<String>,
}

impl Outcome {
    fn pass() -> Outcome {
        Outcome {
            status: None,
            headers: Vec::new(),
            body: None,
            delay_ms: 0,
            decisions: Vec::new(),
            leases: Vec::new(),
            completion: None,
        }
    }
}

/// Appends `value` to `out` with the separators of a composed key percent-escaped.
fn escape_part(value: &str, out: &mut String) {
    let mut rest = value;
    while let Some(i) = rest.find(['%', '|', '=']) {
        out.push_str(&rest[..i]);
        out.push_str(match rest.as_bytes()[i] {
            b'%' => "%25",
            b'|' => "%7C",
            _ => "%3D",
        });
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
}

fn in_list(list: &List, ip: Option<IpAddr>, req: &RequestInfo) -> bool {
    let has = |entries: &[String], value: &Option<String>| value.as_ref().is_some_and(|v| entries.contains(v));
    ip.is_some_and(|ip| list.networks.iter().any(|n| n.contains(ip)))
        || has(&list.users, &req.user)
        || has(&list.api_keys, &req.api_key)
        || has(&list.keys, &req.key)
}

/// The `ip` dimension of a request whose client address is unknown.
const UNKNOWN_CLIENT: &str = "unknown";

/// The `route` dimension of a request the framework routed nowhere.
const UNMATCHED_ROUTE: &str = "unmatched";

/// Says once per process that requests come without a client address.
fn warn_unknown_client(unix: bool) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        let advice = if unix {
            "the Unix-socket proxy sent no usable forwarding header"
        } else {
            "the peer has no address (a Unix socket?): add `unix` to trusted_proxies when a proxy connects over one"
        };
        // Not eprintln!: it panics when stderr cannot be written (see anomaly.rs).
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "polylimit: warning: a request's client address is unknown, so it is limited as the one client \"unknown\"; {advice}"
        );
    });
}

/// HEAD is GET without a body: GET rules apply to it and it is keyed as GET.
fn effective_method(method: &str) -> &str {
    if method.eq_ignore_ascii_case("HEAD") {
        "GET"
    } else {
        method
    }
}

impl Rule {
    /// `path`: the request's normalised path; `route`: its route template in canonical form.
    fn matches(&self, req: &RequestInfo, path: &str, route: Option<&str>) -> bool {
        let method = effective_method(&req.method);
        self.methods.as_ref().is_none_or(|m| {
            m.iter()
                .any(|m| m.eq_ignore_ascii_case(method) || m.eq_ignore_ascii_case(&req.method))
        }) && self.path.as_ref().is_none_or(|(exact, folded)| {
            let mut pattern = if req.case_insensitive { folded } else { exact }.as_str();
            if req.ignore_trailing_slash && pattern.len() > 1 {
                pattern = pattern.strip_suffix('/').unwrap_or(pattern);
            }
            glob_match(pattern, path)
        }) && self.route.as_ref().is_none_or(|r| route == Some(r.as_str()))
    }
}

/// A request's user, API key, key or header value, `None` when missing or
/// empty: the one place every language's empty string becomes absent.
fn present(value: Option<&str>) -> Option<&str> {
    value.filter(|v| !v.is_empty())
}

struct Resolved<'a> {
    req: &'a RequestInfo,
    /// The client address key, or `unknown`.
    ip: String,
    /// The route template in canonical form, computed once per request.
    route: Option<Cow<'a, str>>,
}

impl Resolved<'_> {
    /// The request's value of `dim`, borrowed from the request when it can be.
    fn value(&self, dim: &Dimension) -> Option<Cow<'_, str>> {
        let req = self.req;
        match dim {
            Dimension::Ip => Some(Cow::Borrowed(&self.ip)),
            Dimension::Route => Some(Cow::Borrowed(self.route.as_deref().unwrap_or(UNMATCHED_ROUTE))),
            Dimension::Method => {
                let method = effective_method(&req.method);
                Some(if method.bytes().any(|b| b.is_ascii_lowercase()) {
                    Cow::Owned(method.to_ascii_uppercase())
                } else {
                    Cow::Borrowed(method)
                })
            }
            // An empty value is absent, exactly like a missing one (SPEC §6):
            // anonymous requests must not share one `user=` bucket.
            Dimension::User => present(req.user.as_deref()).map(Cow::Borrowed),
            Dimension::ApiKey => present(req.api_key.as_deref()).map(Cow::Borrowed),
            Dimension::Header(name) => present(req.header(name)).map(Cow::Borrowed),
            Dimension::Key => present(req.key.as_deref()).map(Cow::Borrowed),
            Dimension::Global => Some(Cow::Borrowed("")),
        }
    }

    /// `ip=203.0.113.7|route=/x`; `None` when the request lacks a dimension
    /// (an anonymous request skips a per-user rule). Built in one string.
    fn key(&self, dims: &[Dimension]) -> Option<String> {
        let mut key = String::with_capacity(48);
        for (i, dim) in dims.iter().enumerate() {
            if i > 0 {
                key.push('|');
            }
            match dim {
                Dimension::Header(name) => {
                    key.push_str("header:");
                    key.push_str(name);
                }
                Dimension::Ip => key.push_str("ip"),
                Dimension::Route => key.push_str("route"),
                Dimension::Method => key.push_str("method"),
                Dimension::User => key.push_str("user"),
                Dimension::ApiKey => key.push_str("api_key"),
                Dimension::Key => key.push_str("key"),
                Dimension::Global => key.push_str("global"),
            }
            key.push('=');
            escape_part(&self.value(dim)?, &mut key);
        }
        Some(key)
    }
}

/// The metrics label of every [`RouteRule`]: bounded, never a key.
const ROUTE_RULE_LABEL: &str = "route_rule";

/// A rule for one route (a decorator's or a dependency's), built and
/// validated once by [`Limiter::route_rule`] and checked through the limiter
/// that built it by [`Limiter::check_route`]: same store, same state, same
/// metrics, same [`Limiter::close`].
#[derive(Clone)]
pub struct RouteRule {
    rule: Rule,
    /// The limiter whose policy indices `rule` holds.
    owner: Engine,
}

impl std::fmt::Debug for RouteRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key: Vec<String> = self.rule.key.iter().map(Dimension::name).collect();
        let policies: Vec<&str> = match &self.rule.target {
            Target::Policies(p) => p.iter().map(|&i| self.owner.policy_at(i).name()).collect(),
            Target::Tiers { .. } => Vec::new(),
        };
        f.debug_struct("RouteRule")
            .field("key", &key)
            .field("policies", &policies)
            .finish()
    }
}

/// What a per-route middleware form is given: Python's `@limiter.limit(...)`
/// and `depends(...)`, Express's `rateLimit({ limiter, key, policy })`, a
/// Fastify route's `config: { rateLimit: { key, policy } }`.
/// [`Limiter::route_rule_for`] makes it a [`RouteRule`] with the defaults
/// every language shares.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteShorthand {
    /// Key dimensions as the user gave them; `None`: `["key"]` with a key
    /// function, else `["ip"]`.
    pub key: Option<Vec<String>>,
    /// A policy name of the limiter; `None`: every policy.
    pub policy: Option<String>,
    /// The middleware has a key function whose result is the `key` dimension.
    pub key_function: bool,
    /// The form is declared on one route (a decorator, a dependency, a route's
    /// config): `route` joins the key unless it is there.
    pub per_route: bool,
    /// Which responses are charged, as a rule's `count` (`"failed"`,
    /// `["4xx", 503]`, …); `None`: all. Bad values are a config error naming `count`.
    pub count: Option<Value>,
}

/// What a request's matching rules make of it before the store is asked.
enum Plan<'r> {
    /// Answered without the store: denylisted, allowlisted, or not limited.
    Answer(Outcome),
    /// The (policy index, key) pairs to decide, and each one's [`Owner`].
    Decide {
        targets: Vec<(usize, String)>,
        owners: Vec<Owner<'r>>,
    },
}

/// What the matching rules that name one (policy, key) pair make of it
/// together: the pair is one limit, charged once (SPEC §6).
struct Owner<'r> {
    /// The first of those rules: its label names the decision and the metrics.
    rule: &'r Rule,
    /// Only observes: every one of those rules is `shadow` (or the file is).
    /// One enforced rule enforces the pair, whatever the order.
    shadow: bool,
    /// The statuses that are charged: those any of the rules counts.
    count: Cow<'r, completion::Count>,
}

/// A rate limiter: policies on a store guarded by a timeout, a circuit
/// breaker and each policy's fallback, and, when built from a rules file,
/// the rules that decide HTTP requests. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Limiter {
    engine: Engine,
    rules: Option<Arc<HttpRules>>,
    /// The completion tokens given out and not completed yet.
    tokens: Arc<completion::Tokens>,
}

impl Limiter {
    /// Builds a limiter. Fails only on bad configuration; a Redis store is
    /// connected lazily, so an unreachable Redis is handled by the fallback.
    pub fn new(config: LimiterConfig) -> Result<Limiter> {
        Limiter::with_rules(config, None)
    }

    /// A limiter whose requests are decided by `rules` (built against
    /// `config`'s policies: rule targets are indices into them).
    pub(crate) fn with_rules(config: LimiterConfig, rules: Option<HttpRules>) -> Result<Limiter> {
        Ok(Limiter {
            engine: Engine::new(config)?,
            rules: rules.map(Arc::new),
            tokens: Arc::default(),
        })
    }

    /// The policies, in order.
    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.engine.policies()
    }

    /// Checks `key` with cost 1 on the store's clock. With several policies,
    /// returns the one closest to denying.
    pub async fn check(&self, key: &str) -> Result<Decision> {
        self.check_with(key, CheckOptions::default()).await
    }

    /// Checks `key` with options.
    pub async fn check_with(&self, key: &str, options: CheckOptions) -> Result<Decision> {
        if let Some(decision) = self.engine.check_one_now(key, options) {
            return decision;
        }
        self.refuse_concurrency()?;
        let result = self.check_all(key, options).await?;
        Ok(result.decision())
    }

    /// Checks `key` against every policy in one atomic decision: allowed only
    /// if all allow, and then all are charged; otherwise none is.
    pub async fn check_all(&self, key: &str, options: CheckOptions) -> Result<CheckResult> {
        self.engine.check_all(key, options).await
    }

    /// Forgets `key` under every policy (in the store and the local fallback).
    pub async fn reset(&self, key: &str) -> Result<()> {
        self.engine.reset(key).await
    }

    /// Sets a per-key override: `key` (for a rules file, the key its rules
    /// compose, e.g. `user=acme`) is decided under `spec`'s rate and burst
    /// instead of the policy's, by every process on the store, until removed
    /// or until its TTL ends. Bad input is an error naming the field.
    pub async fn set_override(&self, key: &str, spec: &OverrideSpec) -> Result<Override> {
        self.engine.set_override(key, spec).await
    }

    /// The override in force for `key` under `policy` (`None`: the limiter's
    /// only policy) at `now_ms` (`None`: the store's clock).
    pub async fn get_override(&self, key: &str, policy: Option<&str>, now_ms: Option<i64>) -> Result<Option<Override>> {
        self.engine.get_override(key, policy, now_ms).await
    }

    /// Removes the override of `key` under `policy`; whether one was in force.
    pub async fn remove_override(&self, key: &str, policy: Option<&str>) -> Result<bool> {
        self.engine.remove_override(key, policy).await
    }

    /// The store's breaker state (`Closed` for the memory store).
    pub fn breaker_state(&self) -> BreakerState {
        self.engine.breaker_state()
    }

    /// For tests: the store's circuit breaker reads the time from `clock`
    /// (a [`crate::breaker::ManualClock`]) instead of the process's clock, so
    /// a test moves it past a cooldown instead of sleeping. Set it before the
    /// first check; clones of this limiter share it.
    #[doc(hidden)]
    pub fn set_breaker_clock(&self, clock: Arc<dyn Clock>) {
        self.engine.set_breaker_clock(clock)
    }

    /// Metrics in Prometheus text format.
    pub fn metrics_text(&self) -> String {
        self.engine.metrics_text()
    }

    /// Sends every alert of the adaptive policies (a key became anomalous or
    /// recovered) to `sink`, or to nobody with `None`. The sink runs on a
    /// thread of its own (`polylimit-alerts`), in order, never on the
    /// deciding task, as in every language; a panic in it is caught and
    /// counted, as are alerts dropped when 1024 are waiting.
    pub fn on_anomaly(&self, sink: Option<crate::adaptive::AnomalySink>) {
        let Some(sink) = sink else {
            return self.engine.alerts().set_sink(None);
        };
        let errors = self.engine.alerts().sink_error_counter();
        let counted = errors.clone();
        let deliver = move |event: crate::adaptive::AnomalyEvent| {
            let call = std::panic::AssertUnwindSafe(|| sink(&event));
            if std::panic::catch_unwind(call).is_err() {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        };
        match crate::adaptive::on_a_thread("polylimit-alerts", deliver, errors) {
            Ok(threaded) => self.engine.alerts().set_sink(Some(threaded)),
            // No thread to be had: no callback rather than one on the request's path.
            Err(_) => {
                self.engine.alerts().count_sink_error();
                self.engine.alerts().set_sink(None)
            }
        }
    }

    /// Sets the sink every alert goes to as it is, on the deciding task: for
    /// a binding whose sink already hands the alert to its own thread or
    /// queue ([`crate::adaptive::on_a_thread`]) and never blocks.
    #[doc(hidden)]
    pub fn set_anomaly_sink(&self, sink: Option<crate::adaptive::AnomalySink>) {
        self.engine.alerts().set_sink(sink);
    }

    /// Whether each alert also writes one JSON line to stderr (on by default).
    pub fn set_anomaly_log(&self, on: bool) {
        self.engine.alerts().set_log(on);
    }

    /// Counts an alert callback that failed outside the core (a binding's
    /// exception), in `polylimit_anomaly_callback_errors_total`.
    pub fn count_anomaly_callback_error(&self) {
        self.engine.alerts().count_sink_error();
    }

    /// The counter behind `polylimit_anomaly_callback_errors_total`, for a
    /// binding's callback to add to without holding the limiter.
    pub fn anomaly_callback_errors(&self) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        self.engine.alerts().sink_error_counter()
    }

    /// Closes the limiter: later checks fail with [`Error::Closed`]. Idempotent.
    pub fn close(&self) {
        self.engine.close()
    }

    /// Whether [`Limiter::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.engine.is_closed()
    }

    /// Decides a request by the rules file: every matching rule is checked,
    /// the request passes only if all allow, and nothing is charged when one
    /// denies. Never fails because the store is down; fails with
    /// [`Error::Closed`] once the limiter is closed.
    pub async fn check_request(&self, req: &RequestInfo) -> Result<Outcome> {
        let rules = self.rules_file()?;
        self.decide_request(rules, &rules.rules, req).await
    }

    /// The outcome [`Limiter::check_request`] would give `req` now, charging
    /// nothing and recording no penalty (a peek): the same status, headers,
    /// body and decisions, as if the request were decided. While the store
    /// is down, each policy's `on_store_error` decides as for a check.
    /// Peeks are not counted in the request metrics.
    pub async fn peek_request(&self, req: &RequestInfo) -> Result<Outcome> {
        let rules = self.rules_file()?;
        self.decide_request_as(rules, &rules.rules, req, false).await
    }

    /// Forgets every (policy, key) that [`Limiter::check_request`] would
    /// charge for `req` (the same matching rules, tiers and keys), penalty
    /// records included, so a blocked client starts afresh. Returns how many
    /// (policy, key) pairs were forgotten: 0 when no rule limits `req` (or
    /// it is allowlisted or denylisted).
    pub async fn reset_request(&self, req: &RequestInfo) -> Result<usize> {
        let rules = self.rules_file()?;
        match self.plan(rules, &rules.rules, req)? {
            Plan::Answer(_) => Ok(0),
            Plan::Decide { targets, .. } => {
                let pairs: Vec<(usize, &str)> = targets.iter().map(|(p, k)| (*p, k.as_str())).collect();
                self.engine.forget(&pairs).await?;
                Ok(pairs.len())
            }
        }
    }

    /// Peeks `key` with cost 1 on the store's clock: the decision
    /// [`Limiter::check`] would return now, charging nothing and recording
    /// no penalty. Not counted in the request metrics.
    pub async fn peek(&self, key: &str) -> Result<Decision> {
        self.peek_with(key, CheckOptions::default()).await
    }

    /// Peeks `key` with options (a cost, a time): the decision
    /// [`Limiter::check_with`] would return, charging nothing.
    pub async fn peek_with(&self, key: &str, options: CheckOptions) -> Result<Decision> {
        Ok(self.engine.peek_all(key, options).await?.decision())
    }

    /// Whether [`Limiter::check_request`], [`Limiter::peek_request`] or
    /// [`Limiter::reset_request`] may read a request's header `name` (any
    /// case): a binding that copies headers into a [`RequestInfo`] may leave
    /// out those it is `false` for, and get the same outcome.
    pub fn reads_header(&self, name: &str) -> bool {
        self.rules.as_deref().is_some_and(|r| r.reads_header(name))
    }

    /// The rules of a limiter built from a rules file.
    fn rules_file(&self) -> Result<&HttpRules> {
        self.rules
            .as_deref()
            .ok_or_else(|| Error::config("rules", "", "are not configured: build the limiter from a rules file"))
    }

    /// A rule for one route, checked by [`Limiter::check_route`]: the request
    /// is limited by `policy` (a policy name of this limiter; `None`: every
    /// policy) on a key made of the dimensions `key` (as a rules file's `key`:
    /// `ip`, `route`, `method`, `user`, `api_key`, `header:<name>`, `key`,
    /// `global`). Bad input is a config error naming `key` or `policy`.
    pub fn route_rule(&self, key: &[&str], policy: Option<&str>) -> Result<RouteRule> {
        if key.is_empty() {
            return Err(Error::config("key", "[]", "names no key dimension"));
        }
        let key = key_dimensions(key, "key")?;
        let policies = match policy {
            None => (0..self.engine.policies().count()).collect(),
            Some(name) => {
                let index =
                    self.engine.policies().position(|p| p.name() == name).ok_or_else(|| {
                        Error::config("policy", format!("{name:?}"), "is not a policy of this limiter")
                    })?;
                vec![index]
            }
        };
        Ok(RouteRule {
            rule: Rule {
                label: ROUTE_RULE_LABEL.into(),
                methods: None,
                path: None,
                route: None,
                key,
                target: Target::Policies(policies),
                shadow: false,
                count: completion::Count::All,
            },
            owner: self.engine.clone(),
        })
    }

    /// The [`RouteRule`] of a middleware's per-route form, with the defaults
    /// every language shares: key `["ip"]`, `["key"]` with a key function,
    /// `route` added first for a per-route form (SPEC: one default, in the
    /// core). Bad input is a config error naming `key` or `policy`.
    pub fn route_rule_for(&self, shorthand: &RouteShorthand) -> Result<RouteRule> {
        let key = middleware_key(shorthand.key.as_deref(), shorthand.key_function, shorthand.per_route)?;
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        let count = match &shorthand.count {
            None | Some(Value::Null) => completion::Count::All,
            Some(v) => completion::Count::parse(v, "count")?,
        };
        let mut rule = self.route_rule(&key, shorthand.policy.as_deref())?;
        rule.rule.count = count;
        Ok(rule)
    }

    /// Decides a request by one [`RouteRule`] of this limiter, instead of the
    /// rules file's rules, on this limiter's state: the same outcome, headers,
    /// bodies and metrics (labelled `route_rule`) as [`Limiter::check_request`].
    /// The client address, IPv6 prefix, header mode, allowlist, denylist and
    /// `shadow` come from the rules file, when the limiter was built from one.
    /// Fails with [`Error::Closed`] once the limiter is closed.
    pub async fn check_route(&self, req: &RequestInfo, rule: &RouteRule) -> Result<Outcome> {
        if !rule.owner.same(&self.engine) {
            return Err(Error::config("rule", "", "was built by another limiter"));
        }
        match self.rules.as_deref() {
            Some(rules) => self.decide_request(rules, std::slice::from_ref(&rule.rule), req).await,
            None => {
                let defaults = HttpRules::default();
                self.decide_request(&defaults, std::slice::from_ref(&rule.rule), req)
                    .await
            }
        }
    }

    /// Decides `req` by the `candidates` that match it, with `rules`'
    /// client-address, list, shadow and header rules.
    async fn decide_request(&self, rules: &HttpRules, candidates: &[Rule], req: &RequestInfo) -> Result<Outcome> {
        self.decide_request_as(rules, candidates, req, true).await
    }

    /// [`Limiter::decide_request`], charging only with `charge` (`false`: a
    /// peek, which the request metrics do not count).
    async fn decide_request_as(
        &self,
        rules: &HttpRules,
        candidates: &[Rule],
        req: &RequestInfo,
        charge: bool,
    ) -> Result<Outcome> {
        let (targets, owners) = match self.plan(rules, candidates, req)? {
            Plan::Answer(outcome) => return Ok(outcome),
            Plan::Decide { targets, owners } => (targets, owners),
        };
        let options = CheckOptions {
            cost: req.cost.unwrap_or(1),
            now_ms: req.now_ms,
        };
        let pairs: Vec<Check<'_>> = targets
            .iter()
            .zip(&owners)
            .map(|((p, k), owner)| (*p, k.as_str(), owner.shadow))
            .collect();
        let decided = if charge {
            self.engine.decide(&pairs, options).await
        } else {
            self.engine.peek(&pairs, options).await
        };
        let result = match decided {
            Ok(result) => result,
            // A key holding foreign data: answer this request as if the store were down.
            Err(Error::Store { .. }) => self
                .engine
                .fallback(&pairs, options.now_ms, options.cost as i64, charge),
            Err(e) => return Err(e),
        };
        Ok(self.outcome(rules, &targets, &owners, result, charge, options.cost))
    }

    /// What `candidates` make of `req` before the store is asked: an answer
    /// (denylisted, allowlisted, or no rule limits it), or the (policy, key)
    /// pairs a check decides and charges, each with its rule and whether it
    /// only observes (shadow). The one computation of a request's targets,
    /// shared by checks, peeks and resets.
    fn plan<'r>(&self, rules: &HttpRules, candidates: &'r [Rule], req: &RequestInfo) -> Result<Plan<'r>> {
        if self.engine.is_closed() {
            return Err(Error::Closed);
        }
        if present(req.key.as_deref()).is_some() && !candidates.iter().any(Rule::reads_key) && !rules.reads_key() {
            // A key function whose result nothing reads: say so, rather than key by something else.
            return Err(Error::config(
                "key",
                "",
                "is given by the middleware's key function, but no rule of this limiter keys by `key` \
                 (and no allowlist or denylist entry is a key:…): add \"key\" to the rule's key \
                 (key, KeyBy, or the rules file's rules)",
            ));
        }
        let peer = req.peer.as_deref().and_then(parse_peer);
        let ip = client_ip(peer, &req.headers, &rules.trusted_proxies);
        if ip.is_none() {
            warn_unknown_client(rules.trusted_proxies.unix);
        }

        if in_list(&rules.denylist, ip, req) {
            let mut outcome = Outcome::pass();
            outcome.status = Some(403);
            outcome.body = Some(headers::forbidden_body());
            return Ok(Plan::Answer(outcome));
        }
        if in_list(&rules.allowlist, ip, req) {
            return Ok(Plan::Answer(Outcome::pass()));
        }

        let resolved = Resolved {
            req,
            ip: ip.map_or_else(|| UNKNOWN_CLIENT.to_string(), |ip| ip_key(ip, rules.ipv6_subnet)),
            route: req.route.as_deref().map(route::canonical),
        };
        let path = normalize_path(&req.path, req.case_insensitive, req.ignore_trailing_slash);
        let mut targets: Vec<(usize, String)> = Vec::new();
        let mut owners: Vec<Owner<'r>> = Vec::new();
        for rule in candidates
            .iter()
            .filter(|r| r.matches(req, &path, resolved.route.as_deref()))
        {
            let policies: &[usize] = match &rule.target {
                Target::Policies(p) => p,
                Target::Tiers { by, tiers, default } => {
                    let chosen = match resolved.value(by).and_then(|t| tiers.get(t.as_ref())) {
                        Some(tier) => Some(tier),
                        None => default.as_ref().and_then(|d| tiers.get(d)),
                    };
                    match chosen {
                        Some(Some(p)) => p,
                        _ => continue, // unlimited, or no tier and no default
                    }
                }
            };
            let Some(mut key) = resolved.key(&rule.key) else {
                continue;
            };
            let shadow = rule.shadow || rules.shadow;
            for (n, &p) in policies.iter().enumerate() {
                // The same policy on the same key is one limit, charged once
                // (a request has a few targets: a scan, no set): enforced if
                // any of its rules enforces it, a status charged if any of
                // them counts it, whatever the rules' order.
                if let Some(i) = targets.iter().position(|(q, k)| *q == p && *k == key) {
                    let owner = &mut owners[i];
                    owner.shadow &= shadow;
                    if *owner.count != rule.count {
                        owner.count = Cow::Owned(owner.count.union(&rule.count));
                    }
                    continue;
                }
                let key = if n + 1 == policies.len() {
                    std::mem::take(&mut key)
                } else {
                    key.clone()
                };
                targets.push((p, key));
                owners.push(Owner {
                    rule,
                    shadow,
                    count: Cow::Borrowed(&rule.count),
                });
            }
        }
        if targets.is_empty() {
            return Ok(Plan::Answer(Outcome::pass()));
        }
        Ok(Plan::Decide { targets, owners })
    }

    /// The answer to a decided request; `record`: it was charged (not a
    /// peek): count it in the metrics and give it its completion token.
    fn outcome(
        &self,
        rules: &HttpRules,
        targets: &[(usize, String)],
        owners: &[Owner<'_>],
        result: CheckResult,
        record: bool,
        cost: u64,
    ) -> Outcome {
        let decisions: Vec<RuleDecision> = targets
            .iter()
            .zip(owners)
            .zip(&result.decisions)
            .map(|(((p, _), owner), d)| RuleDecision {
                rule: owner.rule.label.clone(),
                policy: self.engine.policy_at(*p).name().to_string(),
                decision: *d,
                shadow: owner.shadow,
            })
            .collect();
        let blocking = |d: &RuleDecision| !d.decision.allowed && !d.shadow;
        let blocked = decisions.iter().any(blocking);
        for (d, (p, _)) in decisions.iter().zip(targets).filter(|_| record) {
            self.engine.record_request(*p, &d.rule, &d.decision, blocking(d));
        }

        // Headers describe the enforced limits; shadow ones only when nothing is enforced.
        // (Indices of the enforced ones: no vector of them.)
        let enforced = || (0..decisions.len()).filter(|&i| !decisions[i].shadow);
        let none_enforced = decisions.iter().all(|d| d.shadow);
        let shown = if none_enforced {
            result.closest_to_denying()
        } else {
            result.closest_among(enforced())
        };
        let decision = result.decisions[shown];
        // Under a per-key override, the headers describe the override's limit
        // (empty, no allocation, when no override decided).
        let overridden: Vec<Option<Policy>> = result
            .overridden
            .iter()
            .enumerate()
            .map(|(i, o)| {
                let [count, period, burst] = (*o)?;
                self.engine
                    .policy_at(targets[i].0)
                    .with_limit(count, period, burst)
                    .ok()
            })
            .collect();
        let now_ms = if result.now_ms > 0 {
            result.now_ms
        } else {
            process_now_ms()
        };
        let mut outcome = Outcome::pass();
        let described = |i: usize| headers::Shown {
            policy: overridden
                .get(i)
                .and_then(Option::as_ref)
                .unwrap_or_else(|| self.engine.policy_at(targets[i].0)),
            decision: &result.decisions[i],
            key: &targets[i].1,
        };
        // Only draft-8 lists every enforced policy (no allocation for the other modes).
        let listed: Vec<headers::Shown<'_>> = if !rules.headers.lists_every_policy() {
            Vec::new()
        } else if none_enforced {
            vec![described(shown)]
        } else {
            enforced().map(described).collect()
        };
        outcome.headers = headers::rate_limit_headers(rules.headers, &described(shown), &listed, now_ms);
        if blocked {
            let denial = decisions
                .iter()
                .find(|d| blocking(d))
                .map(|d| d.decision)
                .unwrap_or(decision);
            let fail_closed = decisions
                .iter()
                .any(|d| blocking(d) && d.decision.source == Source::FailClosed);
            let retry = headers::retry_after_secs(&if fail_closed { denial } else { decision });
            outcome.headers.push(("Retry-After".into(), retry.to_string()));
            if fail_closed {
                outcome.status = Some(503);
                outcome.body = Some(headers::unavailable_body(retry));
            } else {
                outcome.status = Some(429);
                outcome.body = Some(headers::too_many_requests_body(retry));
            }
        } else if result.allowed {
            outcome.delay_ms = result.decisions.iter().map(|d| d.delay_ms).max().unwrap_or(0);
        }
        if result.allowed && !blocked && record {
            let overridden = |n: usize| result.overridden.get(n).is_some_and(Option::is_some);
            let charges = targets
                .iter()
                .zip(owners)
                .zip(&result.decisions)
                .enumerate()
                .map(|(n, (((p, k), owner), d))| (*p, k.as_str(), &*owner.count, *d, overridden(n)));
            outcome.completion = self.completion_token(completion::Completion::of(
                result.now_ms,
                cost,
                charges,
                result.leases.clone(),
            ));
        }
        outcome.decisions = decisions;
        outcome.leases = result.leases;
        outcome
    }
}
