//! A request's sans-I/O path ([`crate::Limiter::sans_io_request_start`]):
//! the request is planned as [`Requests::check`] or
//! [`Requests::check_route`] plans it, and when the plan is the common case
//! (one enforced (policy, key) target, no completion token to give: every
//! response counted, no cost fields; no `now_ms`) the host's own socket
//! carries its one store call; the reply (or none) makes the same
//! [`Outcome`] the usual path makes, by the same function. Anything else is
//! refused at the start, and the host takes the usual path.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::completion::{Count, Tokens};
use super::grpc;
use super::outcome::{outcome, Outcome};
use super::plan::{plan, Owner, Plan, Planned, RequestCost};
use super::request::RequestInfo;
use super::requests::Requests;
use super::route_rule::RouteRule;
use super::rules::{HttpRules, Rule};
use crate::decision::CheckResult;
use crate::engine::{CheckOptions, Engine};

/// A request sent by a host's own socket, to finish with its reply
/// ([`crate::Limiter::sans_io_request_finish`]) or without one
/// ([`crate::Limiter::sans_io_request_unanswered`]).
pub struct SansIoRequest {
    /// The rules file's rules at the start (`None`: built without one).
    rules: Option<Arc<HttpRules>>,
    /// The route's rule, when decided by one.
    route: Option<Arc<RouteRule>>,
    /// Without `route`: the index in `rules` of the rule that owns the target.
    rule: usize,
    policy: usize,
    key: String,
    cost: RequestCost,
    /// The cost the store call charges, and the server's time it sent.
    charged: i64,
    now: i64,
    grpc: bool,
    started: Instant,
    /// The engine and completion tokens in force at the start: the request
    /// finishes on them, as a call of the usual path does, even after a
    /// reload (deciding it again on new rules would charge it twice).
    engine: Engine,
    tokens: Arc<Tokens>,
}

impl std::fmt::Debug for SansIoRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SansIoRequest")
            .field("policy", &self.policy)
            .field("key", &self.key)
            .field("cost", &self.charged)
            .finish()
    }
}

/// The HTTP settings of a route rule's limiter built without a rules file
/// (as [`Requests::check_route`] makes them), made once.
fn default_rules() -> &'static HttpRules {
    static DEFAULTS: OnceLock<HttpRules> = OnceLock::new();
    DEFAULTS.get_or_init(HttpRules::default)
}

impl Requests {
    /// The request's call appended to `out`, or `None` (nothing appended):
    /// the usual path ([`Requests::check`], or [`Requests::check_route`]
    /// with `route`) decides it.
    pub(crate) fn sans_io_start(
        &self,
        engine: &Engine,
        req: &RequestInfo,
        route: Option<&Arc<RouteRule>>,
        out: &mut Vec<u8>,
    ) -> Option<SansIoRequest> {
        if req.now_ms.is_some() {
            return None;
        }
        let routed;
        let (rules, candidates): (&HttpRules, &[Rule]) = match route {
            Some(rule) => {
                routed = rule.rule_of(engine).ok()?;
                let rules = match self.rules.as_deref() {
                    Some(rules) => rules,
                    None => default_rules(),
                };
                (rules, std::slice::from_ref(&*routed))
            }
            None => {
                let rules = self.rules.as_deref()?;
                (rules, rules.rules.as_slice())
            }
        };
        let http = grpc::as_http(req);
        let Ok(Plan::Decide(mut planned, cost)) = plan(engine, rules, candidates, &http) else {
            return None;
        };
        let [one] = planned.as_mut_slice() else {
            return None;
        };
        // A completion token (count modes, cost fields) or a shadow target: the usual path.
        if one.owner.shadow || *one.owner.count != Count::All || cost.max_cost.is_some() {
            return None;
        }
        let rule = match route {
            Some(_) => 0,
            None => rules.rules.iter().position(|r| std::ptr::eq(r, one.owner.rule))?,
        };
        let options = CheckOptions {
            cost: cost.cost,
            now_ms: None,
        };
        let (charged, now) = engine.sans_io_target_start(one.policy, &one.key, options, out)?;
        Some(SansIoRequest {
            rules: self.rules.clone(),
            route: route.cloned(),
            rule,
            policy: one.policy,
            key: std::mem::take(&mut one.key),
            cost,
            charged,
            now,
            grpc: req.grpc,
            started: Instant::now(),
            engine: engine.clone(),
            tokens: self.tokens.clone(),
        })
    }
}

impl SansIoRequest {
    /// The outcome from the `reply`, or `None`: the usual path decides the
    /// request (nothing was charged).
    pub(crate) fn finish(self, reply: &[u8]) -> Option<Outcome> {
        let elapsed = self.started.elapsed();
        let result =
            (self.engine).sans_io_target_finish(self.policy, &self.key, self.charged, self.now, reply, elapsed)?;
        self.outcome(result)
    }

    /// The outcome when no reply came: its policy's `on_store_error`.
    /// `None`: the policy's engine cannot say (the usual path decides).
    pub(crate) fn unanswered(self) -> Option<Outcome> {
        let elapsed = self.started.elapsed();
        let result = (self.engine).sans_io_target_unanswered(self.policy, &self.key, self.charged, elapsed)?;
        self.outcome(result)
    }

    /// The outcome the usual path makes of `result` for this plan.
    fn outcome(self, result: CheckResult) -> Option<Outcome> {
        let call = self;
        let engine = &call.engine;
        let rules: &HttpRules = match call.rules.as_deref() {
            Some(rules) => rules,
            None => default_rules(),
        };
        let routed;
        let rule: &Rule = match &call.route {
            Some(route) => {
                routed = route.rule_of(engine).ok()?;
                &routed
            }
            None => rules.rules.get(call.rule)?,
        };
        let planned = vec![Planned {
            policy: call.policy,
            key: call.key,
            owner: Owner {
                rule,
                shadow: false,
                count: Cow::Owned(Count::All),
            },
        }];
        // What `outcome` reads of the request: whether it is a gRPC call.
        let req = RequestInfo {
            grpc: call.grpc,
            ..RequestInfo::default()
        };
        let answer = outcome(engine, &call.tokens, rules, &planned, result, true, &req, call.cost);
        Some(if call.grpc { grpc::answer(answer) } else { answer })
    }
}
