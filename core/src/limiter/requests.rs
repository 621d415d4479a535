//! HTTP requests: decided, peeked or reset by the rules file, or by one
//! route's rule (the `http` layer plans and answers them).

use super::Limiter;
use crate::error::Result;
use crate::http::{Outcome, RequestInfo, RouteRule, RouteShorthand};

impl Limiter {
    /// Decides a request by the rules file: every matching rule is checked,
    /// the request passes only if all allow, and nothing is charged when one
    /// denies. Never fails because the store is down; fails with
    /// [`Error::Closed`](crate::Error::Closed) once the limiter is closed.
    pub async fn check_request(&self, req: &RequestInfo) -> Result<Outcome> {
        let live = self.live();
        live.http.check(&live.engine, req).await
    }

    /// The outcome [`Limiter::check_request`] would give `req` now, charging
    /// nothing and recording no penalty (a peek): the same status, headers,
    /// body and decisions, as if the request were decided. While the store
    /// is down, each policy's `on_store_error` decides as for a check.
    /// Peeks are not counted in the request metrics.
    pub async fn peek_request(&self, req: &RequestInfo) -> Result<Outcome> {
        let live = self.live();
        live.http.peek(&live.engine, req).await
    }

    /// Forgets every (policy, key) that [`Limiter::check_request`] would
    /// charge for `req` (the same matching rules, tiers and keys), penalty
    /// records included, so a blocked client starts afresh. Returns how many
    /// (policy, key) pairs were forgotten: 0 when no rule limits `req` (or
    /// it is allowlisted or denylisted).
    pub async fn reset_request(&self, req: &RequestInfo) -> Result<usize> {
        let live = self.live();
        live.http.reset(&live.engine, req).await
    }

    /// Whether [`Limiter::check_request`], [`Limiter::peek_request`] or
    /// [`Limiter::reset_request`] may read a request's header `name` (any
    /// case): a binding that copies headers into a [`RequestInfo`] may leave
    /// out those it is `false` for, and get the same outcome.
    pub fn reads_header(&self, name: &str) -> bool {
        self.live().http.reads_header(name)
    }

    /// Whether [`Limiter::check_request`], [`Limiter::peek_request`] or
    /// [`Limiter::reset_request`] may read a request's route template (a
    /// rule matches on `route`, or keys or tiers by it): a middleware may
    /// skip finding the route when `false`, and get the same outcome.
    pub fn reads_route(&self) -> bool {
        self.live().http.reads_route()
    }

    /// A rule for one route, checked by [`Limiter::check_route`]: the request
    /// is limited by `policy` (a policy name of this limiter; `None`: every
    /// policy) on a key made of the dimensions `key` (as a rules file's `key`:
    /// `ip`, `route`, `method`, `user`, `api_key`, `header:<name>`, `key`,
    /// `global`). Bad input is a config error naming `key` or `policy`.
    pub fn route_rule(&self, key: &[&str], policy: Option<&str>) -> Result<RouteRule> {
        RouteRule::new(&self.engine(), key, policy)
    }

    /// The [`RouteRule`] of a middleware's per-route form, with the defaults
    /// every language shares: key `["ip"]`, `["key"]` with a key function,
    /// `route` added first for a per-route form (SPEC: one default, in the
    /// core). Bad input is a config error naming `key` or `policy`.
    pub fn route_rule_for(&self, shorthand: &RouteShorthand) -> Result<RouteRule> {
        RouteRule::of(&self.engine(), shorthand)
    }

    /// Decides a request by one [`RouteRule`] of this limiter, instead of the
    /// rules file's rules, on this limiter's state: the same outcome, headers,
    /// bodies and metrics (labelled `route_rule`) as [`Limiter::check_request`].
    /// The client address, IPv6 prefix, header mode, allowlist, denylist and
    /// `shadow` come from the rules file, when the limiter was built from one.
    /// Fails with [`Error::Closed`](crate::Error::Closed) once the limiter is closed.
    pub async fn check_route(&self, req: &RequestInfo, rule: &RouteRule) -> Result<Outcome> {
        let live = self.live();
        live.http.check_route(&live.engine, req, rule).await
    }
}
