//! What to answer a request: its [`Outcome`], with every policy's
//! [`RuleDecision`], made from the engine's decision on a plan's targets:
//! status, headers, body, shaping delay, leases and completion token.

use crate::store::overrides::Charged;
use std::sync::Arc;

use super::completion::{Completion, Tokens};
use super::header_list::Headers;
use super::headers;
use super::plan::RequestCost;
use super::plan::Targets;
use super::request::RequestInfo;
use super::rules::{HttpRules, InvalidCost};
use crate::decision::{CheckResult, Decision, Lease, Source};
use crate::engine::{process_now_ms, Engine};
use crate::policy::Policy;

/// One policy's decision for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleDecision {
    /// The rule's label (its name, route or path pattern).
    pub rule: Arc<str>,
    /// The policy's name.
    pub policy: Arc<str>,
    /// The decision.
    pub decision: Decision,
    /// The rule only observes (`shadow: true`).
    pub shadow: bool,
}

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `None`: let the request through. Otherwise 429, 503 or 403 (a gRPC
    /// call: its status code 8, 14 or 7).
    pub status: Option<u16>,
    /// Headers to set on the response, allowed or not.
    pub headers: Headers,
    /// The JSON body of a refusal (a gRPC call's status message).
    pub body: Option<String>,
    /// A gRPC call's trailing metadata (`retry-after` on a refusal); empty
    /// for an HTTP request.
    pub trailers: Headers,
    /// Shape mode: hold the request this long before serving it.
    pub delay_ms: u64,
    /// Every policy's decision.
    pub decisions: Vec<RuleDecision>,
    /// The concurrency leases the request took: release them
    /// ([`Limiter::release`](crate::Limiter::release)) when its response is done.
    pub leases: Vec<Lease>,
    /// An allowed request some of whose rules do not count every response
    /// (`count`), or that has a rule with a cost (`cost`, `max_cost`): the
    /// token to pass to [`Limiter::complete`](crate::Limiter::complete) (or
    /// [`Limiter::complete_with`](crate::Limiter::complete_with) with the
    /// actual cost) with the response's status. Server-side only, never a header.
    pub completion: Option<String>,
}

impl Outcome {
    pub(super) fn pass() -> Outcome {
        Outcome {
            status: None,
            headers: Headers::new(),
            body: None,
            trailers: Headers::new(),
            delay_ms: 0,
            decisions: Vec::new(),
            leases: Vec::new(),
            completion: None,
        }
    }

    /// The answer to a request whose cost is refused: 400 (a gRPC call:
    /// INVALID_ARGUMENT, 3), `{"error":"invalid_cost",…}` naming the header
    /// (or `cost`) and the value; nothing was charged.
    pub(super) fn invalid_cost(invalid: &InvalidCost) -> Outcome {
        let mut outcome = Outcome::pass();
        outcome.status = Some(400);
        let message = format!(
            "{}: {:?} is not a whole number from 1 to {}",
            invalid.field, invalid.value, invalid.max
        );
        let body = serde_json::json!({
            "error": "invalid_cost",
            "message": message,
            "field": invalid.field,
            "value": invalid.value,
            "max_cost": invalid.max,
        });
        outcome.body = Some(body.to_string());
        outcome
    }

    /// The answer to a denylisted request.
    pub(super) fn forbidden() -> Outcome {
        let mut outcome = Outcome::pass();
        outcome.status = Some(403);
        outcome.body = Some(headers::forbidden_body());
        outcome
    }
}

/// The answer to decided request `req`; `record`: it was charged (not a
/// peek): count it in the metrics and give it its completion token
/// (`cost`: the request's, and its bound when a rule has cost fields).
#[allow(clippy::too_many_arguments)]
pub(super) fn outcome(
    engine: &Engine,
    tokens: &Tokens,
    rules: &HttpRules,
    planned: &Targets<'_>,
    result: CheckResult,
    record: bool,
    req: &RequestInfo,
    cost: RequestCost,
) -> Outcome {
    let decisions: Vec<RuleDecision> = planned
        .iter()
        .zip(&result.decisions)
        .map(|(t, d)| RuleDecision {
            rule: t.owner.rule.label.clone(),
            policy: engine.policy_at(t.policy).shared_name().clone(),
            decision: *d,
            shadow: t.owner.shadow,
        })
        .collect();
    let blocking = |d: &RuleDecision| !d.decision.allowed && !d.shadow;
    let blocked = decisions.iter().any(blocking);
    for (d, t) in decisions.iter().zip(planned).filter(|_| record) {
        engine.record_request(t.policy, &d.rule, &d.decision, blocking(d));
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
            engine
                .policy_at(planned[i].policy)
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
            .unwrap_or_else(|| engine.policy_at(planned[i].policy)),
        decision: &result.decisions[i],
        key: &planned[i].key,
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
        outcome
            .headers
            .push_with("Retry-After", |v| headers::push_decimal(v, retry));
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
        let overridden = |n: usize| match result.overridden.get(n) {
            Some(Some(_)) if result.limited.get(n).copied().unwrap_or(false) => Charged::Limit,
            Some(Some(_)) => Charged::Override,
            _ => Charged::Base,
        };
        let charges = planned
            .iter()
            .zip(&result.decisions)
            .enumerate()
            .map(|(n, (t, d))| (t.policy, t.key.as_str(), &*t.owner.count, *d, overridden(n)));
        outcome.completion = tokens.token(
            Completion::of(
                result.now_ms,
                cost.cost,
                cost.max_cost,
                charges,
                result.leases.clone(),
                req.grpc,
            ),
            engine,
        );
    }
    outcome.decisions = decisions;
    outcome.leases = result.leases;
    outcome
}
