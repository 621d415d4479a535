//! The HTTP layer every middleware shares: a framework request becomes a
//! [`RequestInfo`], the rules decide, and an [`Outcome`] says what to answer.
//! No binding computes a key, a client address, a header or a body itself.

pub(crate) mod client_ip;
#[cfg(test)]
mod client_ip_fuzz;
pub(crate) mod headers;
pub(crate) mod route;
pub(crate) mod rules;

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::IpAddr;

use serde_json::{json, Value};

use crate::decision::{CheckResult, Decision, Source};
use crate::error::{Error, Result};
use crate::limiter::{process_now_ms, CheckOptions, Limiter, Target as Check};
use client_ip::{client_ip, ip_key, parse_peer};
pub use headers::HeaderMode;
use rules::{glob_match, Dimension, HttpRules, List, Rule, Target};

/// What the limiter needs to know about a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The route template as the framework writes it (`/users/{id}`,
    /// `/users/:id`, `GET /users/{id}`); the core compares its canonical form.
    pub route: Option<String>,
    /// The TCP peer address (`203.0.113.7`, `[::1]:8080`, …).
    pub peer: Option<String>,
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
    /// `user`, `api_key`, `key`, `cost`, `now_ms`.
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
            const FIELDS: [&str; 10] = [
                "method", "path", "route", "peer", "headers", "user", "api_key", "key", "cost", "now_ms",
            ];
            if !FIELDS.contains(&k.as_str()) {
                return Err(Error::config(format!("request.{k}"), "", "is not a request field"));
            }
        }
        Ok(RequestInfo {
            method: text("method")?.unwrap_or_else(|| "GET".into()),
            path: text("path")?.unwrap_or_else(|| "/".into()),
            route: text("route")?,
            peer: text("peer")?,
            headers,
            user: text("user")?,
            api_key: text("api_key")?,
            key: text("key")?,
            cost: obj.get("cost").and_then(Value::as_u64),
            now_ms: obj.get("now_ms").and_then(Value::as_i64),
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
}

impl Outcome {
    fn pass() -> Outcome {
        Outcome {
            status: None,
            headers: Vec::new(),
            body: None,
            delay_ms: 0,
            decisions: Vec::new(),
        }
    }

    /// The outcome as the JSON object bindings read.
    pub fn to_value(&self) -> Value {
        json!({
            "status": self.status,
            "headers": self.headers.iter().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
            "body": self.body,
            "delay_ms": self.delay_ms,
            "decisions": self.decisions.iter().map(|d| json!({
                "rule": d.rule,
                "policy": d.policy,
                "allowed": d.decision.allowed,
                "limit": d.decision.limit,
                "remaining": d.decision.remaining,
                "reset_after_ms": d.decision.reset_after_ms,
                "retry_after_ms": d.decision.retry_after_ms,
                "delay_ms": d.decision.delay_ms,
                "source": d.decision.source.as_str(),
                "shadow": d.shadow,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Percent-escapes the separators of a composed key.
fn escape_part(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            '%' => out.push_str("%25"),
            '|' => out.push_str("%7C"),
            '=' => out.push_str("%3D"),
            _ => out.push(ch),
        }
    }
    out
}

fn in_list(list: &List, ip: Option<IpAddr>, req: &RequestInfo) -> bool {
    ip.is_some_and(|ip| list.networks.iter().any(|n| n.contains(ip)))
        || [&req.user, &req.api_key, &req.key]
            .iter()
            .any(|v| v.as_ref().is_some_and(|v| list.keys.contains(v)))
}

impl Rule {
    /// `route`: the request's route template in canonical form.
    fn matches(&self, req: &RequestInfo, route: Option<&str>) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|m| m.iter().any(|m| m.eq_ignore_ascii_case(&req.method)))
            && self.path.as_ref().is_none_or(|p| glob_match(p, &req.path))
            && self.route.as_ref().is_none_or(|r| route == Some(r.as_str()))
    }
}

struct Resolved<'a> {
    req: &'a RequestInfo,
    ip: Option<String>,
    /// The route template in canonical form, computed once per request.
    route: Option<Cow<'a, str>>,
}

impl Resolved<'_> {
    fn value(&self, dim: &Dimension) -> Option<String> {
        let req = self.req;
        match dim {
            Dimension::Ip => self.ip.clone(),
            Dimension::Route => Some(self.route.as_deref().unwrap_or(&req.path).to_string()),
            Dimension::Method => Some(req.method.to_ascii_uppercase()),
            Dimension::User => req.user.clone(),
            Dimension::ApiKey => req.api_key.clone(),
            Dimension::Header(name) => req.header(name).map(str::to_string),
            Dimension::Key => req.key.clone(),
            Dimension::Global => Some(String::new()),
        }
    }

    /// `ip=203.0.113.7|route=/x`; `None` when the request lacks a dimension
    /// (an anonymous request skips a per-user rule).
    fn key(&self, dims: &[Dimension]) -> Option<String> {
        let mut parts = Vec::with_capacity(dims.len());
        for dim in dims {
            parts.push(format!("{}={}", dim.name(), escape_part(&self.value(dim)?)));
        }
        Some(parts.join("|"))
    }
}

impl Limiter {
    /// Decides a request by the rules file: every matching rule is checked,
    /// the request passes only if all allow, and nothing is charged when one
    /// denies. Never fails because the store is down.
    pub async fn check_request(&self, req: &RequestInfo) -> Result<Outcome> {
        let rules = self
            .http_rules()
            .ok_or_else(|| Error::config("rules", "", "are not configured: build the limiter from a rules file"))?;
        let peer = req.peer.as_deref().and_then(parse_peer);
        let ip = client_ip(peer, &req.headers, &rules.trusted_proxies);

        if in_list(&rules.denylist, ip, req) {
            let mut outcome = Outcome::pass();
            outcome.status = Some(403);
            outcome.body = Some(headers::forbidden_body());
            return Ok(outcome);
        }
        if in_list(&rules.allowlist, ip, req) {
            return Ok(Outcome::pass());
        }

        let resolved = Resolved {
            req,
            ip: ip.map(|ip| ip_key(ip, rules.ipv6_subnet)),
            route: req.route.as_deref().map(route::canonical),
        };
        let mut targets: Vec<(usize, String)> = Vec::new();
        let mut owners: Vec<(&Rule, bool)> = Vec::new();
        let mut seen = HashSet::new();
        for rule in rules.rules.iter().filter(|r| r.matches(req, resolved.route.as_deref())) {
            let policies = match &rule.target {
                Target::Policies(p) => p.clone(),
                Target::Tiers { by, tiers, default } => {
                    let tier = resolved
                        .value(by)
                        .filter(|t| tiers.contains_key(t))
                        .or_else(|| default.clone());
                    match tier.and_then(|t| tiers.get(&t).cloned()) {
                        Some(Some(p)) => p,
                        _ => continue, // unlimited, or no tier and no default
                    }
                }
            };
            let Some(key) = resolved.key(&rule.key) else { continue };
            for p in policies {
                // The same policy on the same key is one limit, charged once.
                if seen.insert((p, key.clone())) {
                    targets.push((p, key.clone()));
                    owners.push((rule, rule.shadow || rules.shadow));
                }
            }
        }
        if targets.is_empty() {
            return Ok(Outcome::pass());
        }

        let options = CheckOptions {
            cost: req.cost.unwrap_or(1),
            now_ms: req.now_ms,
        };
        let pairs: Vec<Check<'_>> = targets
            .iter()
            .zip(&owners)
            .map(|((p, k), (_, shadow))| (*p, k.as_str(), *shadow))
            .collect();
        let result = match self.decide(&pairs, options).await {
            Ok(result) => result,
            // A key holding foreign data: answer this request as if the store were down.
            Err(Error::Store { .. }) => self.fallback(&pairs, options.now_ms, options.cost as i64),
            Err(e) => return Err(e),
        };
        Ok(self.outcome(rules, &targets, &owners, result))
    }

    fn outcome(
        &self,
        rules: &HttpRules,
        targets: &[(usize, String)],
        owners: &[(&Rule, bool)],
        result: CheckResult,
    ) -> Outcome {
        let decisions: Vec<RuleDecision> = targets
            .iter()
            .zip(owners)
            .zip(&result.decisions)
            .map(|(((p, _), (rule, shadow)), d)| RuleDecision {
                rule: rule.label.clone(),
                policy: self.policy_at(*p).name().to_string(),
                decision: *d,
                shadow: *shadow,
            })
            .collect();
        let blocking = |d: &RuleDecision| !d.decision.allowed && !d.shadow;
        let blocked = decisions.iter().any(blocking);
        for (d, (p, _)) in decisions.iter().zip(targets) {
            self.record_request(*p, &d.rule, &d.decision, blocking(d));
        }

        // Headers describe the enforced limits; shadow ones only when nothing is enforced.
        let enforced: Vec<usize> = (0..decisions.len()).filter(|&i| !decisions[i].shadow).collect();
        let shown = if enforced.is_empty() {
            result.closest_to_denying()
        } else {
            result.closest_among(enforced.into_iter())
        };
        let decision = result.decisions[shown];
        let policy = self.policy_at(targets[shown].0);
        let now_ms = if result.now_ms > 0 {
            result.now_ms
        } else {
            process_now_ms()
        };
        let mut outcome = Outcome::pass();
        outcome.headers = headers::rate_limit_headers(rules.headers, policy, &decision, now_ms);
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
        outcome.decisions = decisions;
        outcome
    }
}
