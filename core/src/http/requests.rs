//! The HTTP side of a limiter ([`Requests`]): the rules of its rules file and
//! the completion tokens it gave out; a request is planned by the rules,
//! decided by the engine and answered with an [`Outcome`].

use std::sync::Arc;

use super::completion::{CompleteOptions, Tokens};
use super::grpc;
use super::outcome::{outcome, Outcome};
use super::plan::{plan, Plan, Planned};
use super::request::RequestInfo;
use super::route_rule::RouteRule;
use super::rules::{HttpRules, Rule};
use crate::engine::{CheckOptions, Engine, Target as Check};
use crate::error::{Error, Result};

/// A limiter's rules file (when built from one) and its outstanding
/// completion tokens. Cheap to clone; clones share the tokens.
#[derive(Clone)]
pub(crate) struct Requests {
    pub(super) rules: Option<Arc<HttpRules>>,
    /// The completion tokens given out and not completed yet.
    pub(super) tokens: Arc<Tokens>,
}

impl Requests {
    /// The HTTP side of a limiter whose requests are decided by `rules`
    /// (built against its engine's policies: rule targets are indices into them).
    pub(crate) fn new(rules: Option<HttpRules>) -> Requests {
        Requests {
            rules: rules.map(Arc::new),
            tokens: Arc::default(),
        }
    }

    /// The same HTTP side with other `rules` (a reload's): the completion
    /// tokens given out stay outstanding.
    pub(crate) fn with_rules(&self, rules: Option<HttpRules>) -> Requests {
        Requests {
            rules: rules.map(Arc::new),
            tokens: self.tokens.clone(),
        }
    }

    /// [`Limiter::check_request`](crate::Limiter::check_request) on `engine`.
    pub(crate) async fn check(&self, engine: &Engine, req: &RequestInfo) -> Result<Outcome> {
        let rules = self.rules_file()?;
        self.decide(engine, rules, &rules.rules, req, true).await
    }

    /// [`Limiter::peek_request`](crate::Limiter::peek_request) on `engine`.
    pub(crate) async fn peek(&self, engine: &Engine, req: &RequestInfo) -> Result<Outcome> {
        let rules = self.rules_file()?;
        self.decide(engine, rules, &rules.rules, req, false).await
    }

    /// [`Limiter::reset_request`](crate::Limiter::reset_request) on `engine`.
    pub(crate) async fn reset(&self, engine: &Engine, req: &RequestInfo) -> Result<usize> {
        let rules = self.rules_file()?;
        match plan(engine, rules, &rules.rules, &grpc::as_http(req))? {
            Plan::Forbidden | Plan::Pass => Ok(0),
            Plan::Decide(planned, _) | Plan::InvalidCost(planned, _) => {
                let pairs: Vec<(usize, &str)> = planned.iter().map(|t| (t.policy, t.key.as_str())).collect();
                engine.forget(&pairs).await?;
                Ok(pairs.len())
            }
        }
    }

    /// [`Limiter::check_route`](crate::Limiter::check_route) on `engine`.
    pub(crate) async fn check_route(&self, engine: &Engine, req: &RequestInfo, rule: &RouteRule) -> Result<Outcome> {
        let rule = rule.rule_of(engine)?;
        let rule: &Rule = &rule;
        match self.rules.as_deref() {
            Some(rules) => self.decide(engine, rules, std::slice::from_ref(rule), req, true).await,
            None => {
                let defaults = HttpRules::default();
                self.decide(engine, &defaults, std::slice::from_ref(rule), req, true)
                    .await
            }
        }
    }

    /// [`Limiter::complete_with`](crate::Limiter::complete_with) on `engine`.
    pub(crate) async fn complete(
        &self,
        engine: &Engine,
        token: &str,
        status: Option<u16>,
        options: CompleteOptions,
    ) -> Result<usize> {
        self.tokens.complete(engine, token, status, options).await
    }

    /// Whether [`Limiter::check_request`](crate::Limiter::check_request),
    /// [`Limiter::peek_request`](crate::Limiter::peek_request) or
    /// [`Limiter::reset_request`](crate::Limiter::reset_request) may read a
    /// request's header `name` (any case): a binding that copies headers into a
    /// [`RequestInfo`] may leave out those it is `false` for, and get the same
    /// outcome.
    pub(crate) fn reads_header(&self, name: &str) -> bool {
        self.rules.as_deref().is_some_and(|r| r.reads_header(name))
    }

    /// Whether those calls may read a request's route template: a binding
    /// may leave [`RequestInfo::route`] out when `false`, and get the same
    /// outcome.
    pub(crate) fn reads_route(&self) -> bool {
        self.rules.as_deref().is_some_and(HttpRules::reads_route)
    }

    /// The rules of a limiter built from a rules file.
    fn rules_file(&self) -> Result<&HttpRules> {
        self.rules
            .as_deref()
            .ok_or_else(|| Error::config("rules", "", "are not configured: build the limiter from a rules file"))
    }

    /// Decides `req` by the `candidates` that match it, with `rules`'
    /// client-address, list, shadow and header rules; charging only with
    /// `charge` (`false`: a peek, which the request metrics do not count).
    async fn decide(
        &self,
        engine: &Engine,
        rules: &HttpRules,
        candidates: &[Rule],
        req: &RequestInfo,
        charge: bool,
    ) -> Result<Outcome> {
        let outcome = self
            .decide_http(engine, rules, candidates, &grpc::as_http(req), charge)
            .await?;
        Ok(if req.grpc { grpc::answer(outcome) } else { outcome })
    }

    /// [`Requests::decide`] of an HTTP request (or a call's HTTP form).
    async fn decide_http(
        &self,
        engine: &Engine,
        rules: &HttpRules,
        candidates: &[Rule],
        req: &RequestInfo,
        charge: bool,
    ) -> Result<Outcome> {
        let planned = match plan(engine, rules, candidates, req)? {
            Plan::Forbidden => return Ok(Outcome::forbidden()),
            Plan::Pass => return Ok(Outcome::pass()),
            Plan::InvalidCost(planned, invalid) => {
                // Counted under each (policy, key) the request would have charged
                // (a peek is not counted, as it never is).
                if charge {
                    for t in &planned {
                        engine.record_invalid_cost(t.policy, &t.owner.rule.label);
                    }
                }
                return Ok(Outcome::invalid_cost(&invalid));
            }
            Plan::Decide(planned, cost) => (planned, cost),
        };
        let (planned, cost) = planned;
        let options = CheckOptions {
            cost: cost.cost,
            now_ms: req.now_ms,
        };
        // One target (most requests): no vector of them.
        let (one, many): ([Check<'_>; 1], Vec<Check<'_>>);
        let pairs: &[Check<'_>] = match planned.as_slice() {
            [t] => {
                one = [t.check()];
                &one
            }
            all => {
                many = all.iter().map(Planned::check).collect();
                &many
            }
        };
        let decided = if charge {
            engine.decide(pairs, options).await
        } else {
            engine.peek(pairs, options).await
        };
        let result = match decided {
            Ok(result) => result,
            // A key holding foreign data: answer this request as if the store were down.
            Err(Error::Store { .. }) => engine.fallback(pairs, options.now_ms, options.cost as i64, charge),
            Err(e) => return Err(e),
        };
        Ok(outcome(
            engine,
            &self.tokens,
            rules,
            &planned,
            result,
            charge,
            req,
            cost,
        ))
    }
}
