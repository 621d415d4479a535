//! What a request's matching rules make of it before the store is asked
//! ([`Plan`]): refused (denylisted), let through (allowlisted, not limited),
//! or the (policy, key) pairs to decide, each with the rules that own it.

use std::borrow::Cow;
use std::net::IpAddr;

use super::client_ip::{client_ip, parse_peer, push_ip_key};
use super::completion;
use super::request::RequestInfo;
use super::route::{self, normalize_path};
use super::rules::{glob_match, Dimension, HttpRules, InvalidCost, List, Rule, Target};
use crate::engine::Engine;
use crate::error::{Error, Result};

/// What a request's matching rules make of it before the store is asked.
pub(super) enum Plan<'r> {
    /// Denylisted: refused without the store.
    Forbidden,
    /// Allowlisted, or no rule limits it: let through without the store.
    Pass,
    /// The pairs to decide, at the request's cost.
    Decide(Targets<'r>, RequestCost),
    /// The request's cost is refused (a bad cost header): HTTP 400, nothing
    /// charged (the pairs are those a reset forgets).
    InvalidCost(Targets<'r>, InvalidCost),
}

/// A request's cost as its matching rules make it (`cost`, `max_cost`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RequestCost {
    /// What the request is charged now: the caller's cost (a cost function,
    /// or `cost` in the request), else the largest of its rules' costs, else 1.
    pub(super) cost: u64,
    /// Some rule has cost fields: the request carries a completion token, so
    /// its actual cost can be reported after the response; the most one
    /// request may be charged in all (the smallest `max_cost` of those rules).
    pub(super) max_cost: Option<u64>,
}

/// Folds the cost fields of the rules that decide a request into its cost,
/// or the first refusal.
fn request_cost<'r>(rules: impl Iterator<Item = &'r Rule>, req: &RequestInfo) -> Result<RequestCost, InvalidCost> {
    let (mut cost, mut max_cost): (Option<u64>, Option<u64>) = (None, None);
    for rule in rules {
        let Some(rc) = &rule.cost else { continue };
        max_cost = Some(max_cost.map_or(rc.max, |m| m.min(rc.max)));
        if req.cost.is_none() {
            if let Some(c) = rc.of(&req.headers) {
                let c = c?;
                cost = Some(cost.map_or(c, |m| m.max(c)));
            }
        }
    }
    let cost = match (req.cost, max_cost) {
        (Some(given), Some(max)) if given > max => {
            return Err(InvalidCost {
                field: "cost".into(),
                value: given.to_string(),
                max,
            })
        }
        (Some(given), _) => given,
        (None, _) => cost.unwrap_or(1),
    };
    // Several rules may give different costs: the request's is the largest,
    // within the tightest bound.
    let cost = match max_cost {
        Some(max) if cost > max => {
            return Err(InvalidCost {
                field: "cost".into(),
                value: cost.to_string(),
                max,
            })
        }
        _ => cost,
    };
    Ok(RequestCost { cost, max_cost })
}

/// The (policy index, key) pairs a request's rules name, each with its
/// [`Owner`], in one vector (a request has a few: one allocation).
pub(super) type Targets<'r> = Vec<Planned<'r>>;

/// One (policy index, key) pair of a request and its [`Owner`].
pub(super) struct Planned<'r> {
    pub(super) policy: usize,
    pub(super) key: String,
    pub(super) owner: Owner<'r>,
}

impl Planned<'_> {
    /// What the engine decides: (policy index, key, shadow).
    pub(super) fn check(&self) -> crate::engine::Target<'_> {
        (self.policy, &self.key, self.owner.shadow)
    }
}

/// What the matching rules that name one (policy, key) pair make of it
/// together: the pair is one limit, charged once (SPEC §6).
pub(super) struct Owner<'r> {
    /// The first of those rules: its label names the decision and the metrics.
    pub(super) rule: &'r Rule,
    /// Only observes: every one of those rules is `shadow` (or the file is).
    /// One enforced rule enforces the pair, whatever the order.
    pub(super) shadow: bool,
    /// The statuses that are charged: those any of the rules counts.
    pub(super) count: Cow<'r, completion::Count>,
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
    /// The client address (`None`: unknown) and the IPv6 prefix it is keyed by.
    ip: Option<IpAddr>,
    ipv6_subnet: u8,
    /// The route template in canonical form, computed once per request.
    route: Option<Cow<'a, str>>,
}

impl Resolved<'_> {
    /// Appends the client address key, or `unknown`, to `out` (written into
    /// the key, no string of its own: every request has one).
    fn push_ip(&self, out: &mut String) {
        match self.ip {
            Some(ip) => push_ip_key(out, ip, self.ipv6_subnet),
            None => out.push_str(UNKNOWN_CLIENT),
        }
    }

    /// The request's value of `dim`, borrowed from the request when it can be.
    fn value(&self, dim: &Dimension) -> Option<Cow<'_, str>> {
        let req = self.req;
        match dim {
            Dimension::Ip => {
                let mut ip = String::new();
                self.push_ip(&mut ip);
                Some(Cow::Owned(ip))
            }
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
            match dim {
                // An address key has no separator to escape.
                Dimension::Ip => self.push_ip(&mut key),
                _ => escape_part(&self.value(dim)?, &mut key),
            }
        }
        Some(key)
    }
}

/// What `candidates` make of `req` before the store is asked: an answer
/// (denylisted, allowlisted, or no rule limits it), or the (policy, key)
/// pairs a check decides and charges, each with its rule and whether it
/// only observes (shadow). The one computation of a request's targets,
/// shared by checks, peeks and resets.
pub(super) fn plan<'r>(
    engine: &Engine,
    rules: &HttpRules,
    candidates: &'r [Rule],
    req: &RequestInfo,
) -> Result<Plan<'r>> {
    if engine.is_closed() {
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
        return Ok(Plan::Forbidden);
    }
    if in_list(&rules.allowlist, ip, req) {
        return Ok(Plan::Pass);
    }

    let resolved = Resolved {
        req,
        ip,
        ipv6_subnet: rules.ipv6_subnet,
        route: req.route.as_deref().map(route::canonical),
    };
    let path = normalize_path(&req.path, req.case_insensitive, req.ignore_trailing_slash);
    let mut targets: Targets<'r> = Vec::new();
    // The rules that name a target (with a key): their cost fields make the request's cost.
    let mut costed: Vec<&'r Rule> = Vec::new();
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
        if rule.cost.is_some() {
            costed.push(rule);
        }
        let shadow = rule.shadow || rules.shadow;
        for (n, &p) in policies.iter().enumerate() {
            // The same policy on the same key is one limit, charged once
            // (a request has a few targets: a scan, no set): enforced if
            // any of its rules enforces it, a status charged if any of
            // them counts it, whatever the rules' order.
            if let Some(t) = targets.iter_mut().find(|t| t.policy == p && t.key == key) {
                let owner = &mut t.owner;
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
            targets.push(Planned {
                policy: p,
                key,
                owner: Owner {
                    rule,
                    shadow,
                    count: Cow::Borrowed(&rule.count),
                },
            });
        }
    }
    if targets.is_empty() {
        return Ok(Plan::Pass);
    }
    match request_cost(costed.into_iter(), req) {
        Ok(cost) => Ok(Plan::Decide(targets, cost)),
        Err(invalid) => Ok(Plan::InvalidCost(targets, invalid)),
    }
}
