//! A rule for one route ([`RouteRule`]), from a key and a policy or from a
//! middleware's per-route form ([`RouteShorthand`]) with the defaults every
//! language shares.

use serde_json::Value;

use super::completion;
use super::rules::{key_dimensions, middleware_key, Dimension, Rule, Target};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// The metrics label of every [`RouteRule`]: bounded, never a key.
const ROUTE_RULE_LABEL: &str = "route_rule";

/// A rule for one route (a decorator's or a dependency's), built and validated
/// once by [`Limiter::route_rule`](crate::Limiter::route_rule) and checked
/// through the limiter that built it by
/// [`Limiter::check_route`](crate::Limiter::check_route): same store, same
/// state, same metrics, same [`Limiter::close`](crate::Limiter::close).
#[derive(Clone)]
pub struct RouteRule {
    rule: Rule,
    /// The limiter whose policy indices `rule` holds.
    owner: Engine,
    /// It limits by every policy (no `policy` was named).
    every: bool,
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
/// [`Limiter::route_rule_for`](crate::Limiter::route_rule_for) makes it a
/// [`RouteRule`] with the defaults every language shares.
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

impl RouteRule {
    /// [`Limiter::route_rule`](crate::Limiter::route_rule) of `engine`.
    pub(crate) fn new(engine: &Engine, key: &[&str], policy: Option<&str>) -> Result<RouteRule> {
        if key.is_empty() {
            return Err(Error::config("key", "[]", "names no key dimension"));
        }
        let key = key_dimensions(key, "key")?;
        let policies = match policy {
            None => (0..engine.policies().count()).collect(),
            Some(name) => {
                let index = engine
                    .policies()
                    .position(|p| p.name() == name)
                    .ok_or_else(|| Error::config("policy", format!("{name:?}"), "is not a policy of this limiter"))?;
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
                cost: None,
            },
            owner: engine.clone(),
            every: policy.is_none(),
        })
    }

    /// [`Limiter::route_rule_for`](crate::Limiter::route_rule_for) of `engine`.
    pub(crate) fn of(engine: &Engine, shorthand: &RouteShorthand) -> Result<RouteRule> {
        let key = middleware_key(shorthand.key.as_deref(), shorthand.key_function, shorthand.per_route)?;
        let key: Vec<&str> = key.iter().map(String::as_str).collect();
        let count = match &shorthand.count {
            None | Some(Value::Null) => completion::Count::All,
            Some(v) => completion::Count::parse(v, "count")?,
        };
        let mut rule = RouteRule::new(engine, &key, shorthand.policy.as_deref())?;
        rule.rule.count = count;
        Ok(rule)
    }

    /// The rule, when `engine` built it (else a config error naming `rule`).
    /// After a reload of its limiter, the rule names the reloaded policies
    /// (by name; every policy when it named none): a middleware's per-route
    /// limits follow a reload. A policy a reload removed is a config error
    /// naming `policy`.
    pub(super) fn rule_of(&self, engine: &Engine) -> Result<std::borrow::Cow<'_, Rule>> {
        if self.owner.same(engine) {
            return Ok(std::borrow::Cow::Borrowed(&self.rule));
        }
        if !self.owner.same_limiter(engine) {
            return Err(Error::config("rule", "", "was built by another limiter"));
        }
        let Target::Policies(indices) = &self.rule.target else {
            return Ok(std::borrow::Cow::Borrowed(&self.rule));
        };
        let policies = if self.every {
            (0..engine.policies().count()).collect()
        } else {
            indices
                .iter()
                .map(|&i| {
                    let name = self.owner.policy_at(i).name();
                    engine.policies().position(|p| p.name() == name).ok_or_else(|| {
                        Error::config(
                            "policy",
                            format!("{name:?}"),
                            "is no longer a policy of this limiter (a reload removed it)",
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?
        };
        let mut rule = self.rule.clone();
        rule.target = Target::Policies(policies);
        Ok(std::borrow::Cow::Owned(rule))
    }
}
