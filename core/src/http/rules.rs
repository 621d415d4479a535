//! The rules file: which requests are limited, by which policies, on which key.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::client_ip::{Cidr, ForwardedHeader, TrustedProxies};
use super::completion::Count;
use super::headers::HeaderMode;
use crate::error::{Error, Result};

/// One dimension of a rate-limit key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dimension {
    Ip,
    Route,
    Method,
    User,
    ApiKey,
    Header(String),
    /// The key given by the caller.
    Key,
    /// One key for every request.
    Global,
}

impl Dimension {
    pub fn parse(text: &str) -> Option<Dimension> {
        Some(match text {
            "ip" => Dimension::Ip,
            "route" => Dimension::Route,
            "method" => Dimension::Method,
            "user" => Dimension::User,
            "api_key" => Dimension::ApiKey,
            "key" => Dimension::Key,
            "global" => Dimension::Global,
            _ => match text.strip_prefix("header:") {
                Some(name) if !name.is_empty() => Dimension::Header(name.to_ascii_lowercase()),
                _ => return None,
            },
        })
    }

    pub fn name(&self) -> String {
        match self {
            Dimension::Ip => "ip".into(),
            Dimension::Route => "route".into(),
            Dimension::Method => "method".into(),
            Dimension::User => "user".into(),
            Dimension::ApiKey => "api_key".into(),
            Dimension::Header(h) => format!("header:{h}"),
            Dimension::Key => "key".into(),
            Dimension::Global => "global".into(),
        }
    }
}

/// What a rule limits with: policies, or tiers chosen by a request attribute.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    Policies(Vec<usize>),
    Tiers {
        by: Dimension,
        /// Tier value → policies; `None` means unlimited.
        tiers: HashMap<String, Option<Vec<usize>>>,
        default: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// Bounded label for metrics: the rule's name, route or path pattern
    /// (shared: every decision of the rule names it, without a copy).
    pub label: Arc<str>,
    pub methods: Option<Vec<String>>,
    /// The path glob, its unreserved percent-escapes decoded, as written and in lower case.
    pub path: Option<(String, String)>,
    pub route: Option<String>,
    pub key: Vec<Dimension>,
    pub target: Target,
    pub shadow: bool,
    /// Which responses are charged (`count`); anything but `all` is settled after the response.
    pub count: Count,
    /// The rule's cost fields (`cost`, `cost_default`, `max_cost`), when it has any.
    pub cost: Option<RuleCost>,
}

/// Where a rule's cost comes from (`cost`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CostFrom {
    /// `cost: 5`: every request the rule matches costs this (a route's cost).
    Fixed(u64),
    /// `cost: header:x-cost`: the request's header (lower case), a whole number.
    Header(String),
}

/// A rule's cost: the request's cost and the bound of what one request may
/// be charged, at the check and after the response (`complete` with a cost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RuleCost {
    /// `None`: only `max_cost` was given (the cost is the caller's, or 1).
    pub from: Option<CostFrom>,
    /// The cost of a request without the header (`cost_default`, default 1).
    pub default: u64,
    /// The most one request may be charged (`max_cost`, default [`DEFAULT_MAX_COST`]).
    pub max: u64,
}

/// `max_cost` of a rule that has cost fields but does not say.
pub(crate) const DEFAULT_MAX_COST: u64 = 1000;

/// A request's cost that the core refuses (HTTP 400, `invalid_cost`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvalidCost {
    /// `header:<name>`, or `cost` (given by the caller: a cost function).
    pub field: String,
    /// The value as received (several field lines joined by `, `).
    pub value: String,
    /// The largest cost allowed.
    pub max: u64,
}

/// A whole number from 1 to `max` written in decimal digits (surrounding
/// spaces and tabs ignored), or `None`.
fn whole_number(text: &str, max: u64) -> Option<u64> {
    let t = text.trim_matches([' ', '\t']);
    if t.is_empty() || t.len() > 20 || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse::<u64>().ok().filter(|n| (1..=max).contains(n))
}

impl RuleCost {
    /// This rule's cost for `headers`: the fixed cost, the header's value
    /// (several field lines must agree), or the default when it is missing
    /// or empty; `None` when the rule gives no cost (only `max_cost`).
    pub(crate) fn of(&self, headers: &[(String, String)]) -> Option<Result<u64, InvalidCost>> {
        match self.from.as_ref()? {
            CostFrom::Fixed(n) => Some(Ok(*n)),
            CostFrom::Header(name) => {
                let mut lines = headers
                    .iter()
                    .filter(|(k, _)| k.trim().eq_ignore_ascii_case(name))
                    .map(|(_, v)| v.as_str());
                let Some(first) = lines.next() else {
                    return Some(Ok(self.default));
                };
                let mut shown = first.to_string();
                let mut agree = true;
                for line in lines {
                    agree &= line.trim() == first.trim();
                    shown.push_str(", ");
                    shown.push_str(line);
                }
                if first.trim().is_empty() && agree {
                    return Some(Ok(self.default));
                }
                let bad = || InvalidCost {
                    field: format!("header:{name}"),
                    value: shown.clone(),
                    max: self.max,
                };
                Some(match whole_number(first, self.max) {
                    Some(n) if agree => Ok(n),
                    _ => Err(bad()),
                })
            }
        }
    }
}

/// Parses a rule's `cost`, `cost_default` and `max_cost` (`None`: it has none).
fn parse_cost(obj: &serde_json::Map<String, Value>, path: &str) -> Result<Option<RuleCost>> {
    let (cost, default, max) = (obj.get("cost"), obj.get("cost_default"), obj.get("max_cost"));
    if cost.is_none() && default.is_none() && max.is_none() {
        return Ok(None);
    }
    let at = |f: &str| format!("{path}.{f}");
    let number = |v: &Value, field: &str, max: u64| {
        v.as_u64()
            .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 1.0).map(|f| f as u64))
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| Error::config(at(field), v, format!("is not a whole number from 1 to {max}")))
    };
    let max = match max {
        None => DEFAULT_MAX_COST,
        Some(v) => number(v, "max_cost", crate::policy::MAX_COST)?,
    };
    let from = match cost {
        None => None,
        Some(Value::String(s)) if s.trim_start().starts_with("header:") => {
            let name = s.trim_start()["header:".len()..].trim();
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(Error::config(at("cost"), s, "names no header (cost: header:<name>)"));
            }
            Some(CostFrom::Header(name.to_ascii_lowercase()))
        }
        Some(Value::String(s)) => match whole_number(s, max) {
            Some(n) => Some(CostFrom::Fixed(n)),
            None => {
                return Err(Error::config(
                    at("cost"),
                    s,
                    format!("is not a whole number from 1 to max_cost ({max}) or header:<name>"),
                ))
            }
        },
        Some(v) => Some(CostFrom::Fixed(number(v, "cost", max).map_err(|_| {
            Error::config(
                at("cost"),
                v,
                format!("is not a whole number from 1 to max_cost ({max}) or header:<name>"),
            )
        })?)),
    };
    let default = match default {
        None => 1,
        Some(v) if matches!(from, Some(CostFrom::Header(_))) => number(v, "cost_default", max)?,
        Some(v) => {
            return Err(Error::config(
                at("cost_default"),
                v,
                "is only used with cost: header:<name> (the cost of a request without the header)",
            ))
        }
    };
    Ok(Some(RuleCost { from, default, max }))
}

/// An allowlist or denylist: networks match the client address; typed
/// entries (`user:…`, `api_key:…`, `key:…`) match that dimension only.
#[derive(Debug, Clone, Default)]
pub(crate) struct List {
    pub networks: Vec<Cidr>,
    pub users: Vec<String>,
    pub api_keys: Vec<String>,
    pub keys: Vec<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct HttpRules {
    pub trusted_proxies: TrustedProxies,
    pub ipv6_subnet: u8,
    pub headers: HeaderMode,
    pub shadow: bool,
    pub allowlist: List,
    pub denylist: List,
    pub rules: Vec<Rule>,
}

/// Keys an IPv6 client by its /64 unless the rules file says otherwise.
const DEFAULT_IPV6_SUBNET: u8 = 64;

impl Default for HttpRules {
    /// The HTTP settings of a limiter built without a rules file: the peer is
    /// the client, IPv6 keyed by /64, both header sets, no lists, no rules.
    fn default() -> HttpRules {
        HttpRules {
            trusted_proxies: TrustedProxies::default(),
            ipv6_subnet: DEFAULT_IPV6_SUBNET,
            headers: HeaderMode::Both,
            shadow: false,
            allowlist: List::default(),
            denylist: List::default(),
            rules: Vec::new(),
        }
    }
}

/// Top-level fields of a rules file that belong to the HTTP layer.
pub(crate) const HTTP_FIELDS: [&str; 8] = [
    "trusted_proxies",
    "forwarded_header",
    "ipv6_subnet",
    "headers",
    "shadow",
    "allowlist",
    "denylist",
    "rules",
];

pub(crate) fn strings(value: &Value, field: &str) -> Result<Vec<String>> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::config(format!("{field}[{i}]"), v, "is not a string"))
            })
            .collect(),
        other => Err(Error::config(field, other, "is not a string or a list of strings")),
    }
}

fn list(value: Option<&Value>, field: &str) -> Result<List> {
    let mut out = List::default();
    for (i, entry) in value
        .map(|v| strings(v, field))
        .transpose()?
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        if let Some(net) = Cidr::parse(&entry) {
            out.networks.push(net);
            continue;
        }
        let typed = entry.split_once(':').and_then(|(kind, value)| {
            let bucket = match kind {
                "user" => &mut out.users,
                "api_key" => &mut out.api_keys,
                "key" => &mut out.keys,
                _ => return None,
            };
            (!value.is_empty()).then(|| bucket.push(value.to_string()))
        });
        if typed.is_none() {
            return Err(Error::config(
                format!("{field}[{i}]"),
                format!("{entry:?}"),
                "is not a CIDR or a typed key (user:…, api_key:…, key:…)",
            ));
        }
    }
    Ok(out)
}

impl HttpRules {
    /// Parses the HTTP part of a rules file; `policy_index` resolves names.
    pub fn from_value(
        obj: &serde_json::Map<String, Value>,
        policy_index: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<HttpRules> {
        let mut trusted_proxies = TrustedProxies::default();
        let entries = obj.get("trusted_proxies").map(|v| strings(v, "trusted_proxies"));
        for (i, s) in entries.transpose()?.unwrap_or_default().iter().enumerate() {
            if s == "unix" {
                trusted_proxies.unix = true;
                continue;
            }
            let net = Cidr::parse(s).ok_or_else(|| {
                Error::config(
                    format!("trusted_proxies[{i}]"),
                    format!("{s:?}"),
                    "is not an address, a CIDR network or unix",
                )
            })?;
            trusted_proxies.networks.push(net);
        }
        if let Some(v) = obj.get("forwarded_header") {
            trusted_proxies.header = v
                .as_str()
                .and_then(ForwardedHeader::parse)
                .ok_or_else(|| Error::config("forwarded_header", v, "is not one of x-forwarded-for, forwarded"))?;
        }
        let ipv6_subnet = match obj.get("ipv6_subnet") {
            None => DEFAULT_IPV6_SUBNET,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=128).contains(n))
                .ok_or_else(|| Error::config("ipv6_subnet", v, "is not a prefix length from 1 to 128"))?
                as u8,
        };
        let headers = match obj.get("headers") {
            None => HttpRules::default().headers,
            Some(v) => HeaderMode::from_value(v)?,
        };
        let shadow = match obj.get("shadow") {
            None => false,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| Error::config("shadow", v, "is not true or false"))?,
        };
        let rules = match obj.get("rules") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, r)| parse_rule(r, &format!("rules[{i}]"), policy_index))
                .collect::<Result<_>>()?,
            Some(other) => return Err(Error::config("rules", other, "is not a list")),
        };
        Ok(HttpRules {
            trusted_proxies,
            ipv6_subnet,
            headers,
            shadow,
            allowlist: list(obj.get("allowlist"), "allowlist")?,
            denylist: list(obj.get("denylist"), "denylist")?,
            rules,
        })
    }
}

/// A rule's `key`: each entry a dimension, or an error naming `field` and the entry.
pub(crate) fn key_dimensions(names: &[impl AsRef<str>], field: &str) -> Result<Vec<Dimension>> {
    names
        .iter()
        .map(|d| {
            let d = d.as_ref();
            Dimension::parse(d).ok_or_else(|| {
                Error::config(
                    field,
                    format!("{d:?}"),
                    "is not a key dimension (ip, route, method, user, api_key, header:<name>, key, global)",
                )
            })
        })
        .collect()
}

/// The key dimensions of a middleware's shorthand, the one default every
/// language shares: `key` as given, else `["key"]` when the middleware has a
/// key function (Python `key=callable`, JavaScript `keyGenerator`: its result
/// is the `key` dimension), else `["ip"]`. A per-route form (a decorator, a
/// dependency, a Fastify route's config) puts `route` first unless `key`
/// names it, so two routes checking through one limiter never share a bucket.
/// A key function beside a `key` that leaves `key` out is an error: the
/// function would be ignored.
pub(crate) fn middleware_key(key: Option<&[String]>, key_function: bool, per_route: bool) -> Result<Vec<String>> {
    let mut dims = match key {
        Some([]) => return Err(Error::config("key", "[]", "names no key dimension")),
        Some(dims) => {
            if key_function && !dims.iter().any(|d| d == "key") {
                return Err(Error::config(
                    "key",
                    format!("{dims:?}"),
                    "leaves out the `key` dimension, so the middleware's key function would be ignored: add \"key\"",
                ));
            }
            dims.to_vec()
        }
        None if key_function => vec!["key".to_string()],
        None => vec!["ip".to_string()],
    };
    if per_route && !dims.iter().any(|d| d == "route") {
        dims.insert(0, "route".to_string());
    }
    key_dimensions(&dims, "key")?;
    Ok(dims)
}

impl Rule {
    /// Whether the rule takes its cost from the header `name` (any case).
    pub(crate) fn reads_cost_header(&self, name: &str) -> bool {
        matches!(&self.cost, Some(RuleCost { from: Some(CostFrom::Header(h)), .. }) if h.eq_ignore_ascii_case(name))
    }

    /// Whether the rule reads the caller's `key` (in its key or its tiers).
    pub(crate) fn reads_key(&self) -> bool {
        self.key.contains(&Dimension::Key) || matches!(&self.target, Target::Tiers { by: Dimension::Key, .. })
    }
}

impl HttpRules {
    /// Whether a caller's `key` means anything to these rules: a rule keys or
    /// tiers by it, or a list has a `key:` entry.
    pub(crate) fn reads_key(&self) -> bool {
        self.rules.iter().any(Rule::reads_key) || !self.allowlist.keys.is_empty() || !self.denylist.keys.is_empty()
    }

    /// Whether deciding a request may read its route template: a rule
    /// matches on `route`, or keys or tiers by the `route` dimension. A
    /// binding may skip finding the route when none does.
    pub(crate) fn reads_route(&self) -> bool {
        let route = |d: &Dimension| matches!(d, Dimension::Route);
        self.rules.iter().any(|r| {
            r.route.is_some() || r.key.iter().any(route) || matches!(&r.target, Target::Tiers { by, .. } if route(by))
        })
    }

    /// Whether deciding a request may read its header `name` (any case,
    /// surrounding spaces ignored): the forwarding header, or a rule's
    /// `header:` key or tier dimension. A binding may leave the others out.
    pub(crate) fn reads_header(&self, name: &str) -> bool {
        let name = name.trim();
        let dim = |d: &Dimension| matches!(d, Dimension::Header(h) if h.eq_ignore_ascii_case(name));
        name.eq_ignore_ascii_case(self.trusted_proxies.header.name())
            || self.rules.iter().any(|r| {
                r.key.iter().any(dim)
                    || matches!(&r.target, Target::Tiers { by, .. } if dim(by))
                    || r.reads_cost_header(name)
            })
    }
}

fn policies(value: &Value, field: &str, policy_index: &dyn Fn(&str) -> Option<usize>) -> Result<Vec<usize>> {
    let names = strings(value, field)?;
    if names.is_empty() {
        return Err(Error::config(field, value, "names no policy"));
    }
    names
        .iter()
        .map(|name| {
            policy_index(name).ok_or_else(|| Error::config(field, format!("{name:?}"), "is not a policy of this file"))
        })
        .collect()
}

fn parse_rule(value: &Value, path: &str, policy_index: &dyn Fn(&str) -> Option<usize>) -> Result<Rule> {
    let obj = value
        .as_object()
        .ok_or_else(|| Error::config(path, value, "is not an object"))?;
    const FIELDS: [&str; 12] = [
        "name",
        "match",
        "key",
        "policy",
        "tier",
        "tiers",
        "default_tier",
        "shadow",
        "count",
        "cost",
        "cost_default",
        "max_cost",
    ];
    let at = |f: &str| format!("{path}.{f}");
    for k in obj.keys() {
        if !FIELDS.contains(&k.as_str()) {
            return Err(Error::config(
                at(k),
                "",
                format!("is not a rule field (expected one of {})", FIELDS.join(", ")),
            ));
        }
    }
    let (mut methods, mut path_glob, mut route) = (None, None, None);
    if let Some(m) = obj.get("match") {
        let m = m
            .as_object()
            .ok_or_else(|| Error::config(at("match"), m, "is not an object"))?;
        for (k, v) in m {
            let field = format!("{path}.match.{k}");
            match k.as_str() {
                "method" => methods = Some(strings(v, &field)?.iter().map(|s| s.to_ascii_uppercase()).collect()),
                "path" => {
                    let p = v.as_str().filter(|p| p.starts_with('/') || *p == "*");
                    let p = p.ok_or_else(|| Error::config(&field, v, "is not a path starting with '/'"))?;
                    path_glob = Some(p.to_string());
                }
                "route" => {
                    let template = v.as_str().ok_or_else(|| Error::config(&field, v, "is not a string"))?;
                    route = Some(super::route::canonical(template).into_owned())
                }
                _ => {
                    return Err(Error::config(
                        field,
                        "",
                        "is not a match field (expected method, path, route)",
                    ))
                }
            }
        }
    }
    let key = match obj.get("key") {
        None => vec![Dimension::Ip],
        Some(v) => key_dimensions(&strings(v, &at("key"))?, &at("key"))?,
    };
    let target = match (obj.get("policy"), obj.get("tiers")) {
        (Some(_), Some(_)) => return Err(Error::config(at("tiers"), "", "cannot be given together with policy")),
        (Some(p), None) => Target::Policies(policies(p, &at("policy"), policy_index)?),
        (None, Some(t)) => {
            let t = t
                .as_object()
                .ok_or_else(|| Error::config(at("tiers"), t, "is not a map of tier → policy"))?;
            let by = obj
                .get("tier")
                .ok_or_else(|| Error::config(at("tier"), "", "is required with tiers"))?;
            let by = by.as_str().and_then(Dimension::parse).ok_or_else(|| {
                Error::config(
                    at("tier"),
                    by,
                    "is not a request attribute (user, api_key, header:<name>, …)",
                )
            })?;
            let mut tiers = HashMap::new();
            for (name, p) in t {
                let field = format!("{path}.tiers.{name}");
                let resolved = if p.as_str() == Some("unlimited") {
                    None
                } else {
                    Some(policies(p, &field, policy_index)?)
                };
                tiers.insert(name.clone(), resolved);
            }
            let default = match obj.get("default_tier") {
                None => None,
                Some(d) => match d.as_str() {
                    Some(name) if tiers.contains_key(name) => Some(name.to_string()),
                    _ => return Err(Error::config(at("default_tier"), d, "is not one of the rule's tiers")),
                },
            };
            Target::Tiers { by, tiers, default }
        }
        (None, None) => return Err(Error::config(at("policy"), "", "is required")),
    };
    let shadow = match obj.get("shadow") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or_else(|| Error::config(at("shadow"), v, "is not true or false"))?,
    };
    let count = match obj.get("count") {
        None | Some(Value::Null) => Count::All,
        Some(v) => Count::parse(v, &at("count"))?,
    };
    let cost = parse_cost(obj, path)?;
    let label = match obj.get("name") {
        Some(v) => {
            let name = v
                .as_str()
                .ok_or_else(|| Error::config(at("name"), v, "is not a string"))?;
            crate::policy::check_name(&at("name"), name)?;
            name.to_string()
        }
        None => route
            .clone()
            .or_else(|| path_glob.clone())
            .unwrap_or_else(|| "*".into()),
    };
    let path = path_glob.map(|p| {
        let decoded = super::route::normalize_path(&p, false, false).into_owned();
        let folded = decoded.to_ascii_lowercase();
        (decoded, folded)
    });
    Ok(Rule {
        label: Arc::from(label),
        methods,
        path,
        route,
        key,
        target,
        shadow,
        count,
        cost,
    })
}

/// `*` matches any run of characters, `/` included: `/api/*` covers everything below `/api/`.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("/api/*", "/api/payments/42"));
        assert!(glob_match("/api/payments/*", "/api/payments/42"));
        assert!(!glob_match("/api/payments/*", "/api/users"));
        assert!(glob_match("/users/*/posts", "/users/7/posts"));
        assert!(glob_match("*", "/"));
        assert!(glob_match("/exact", "/exact"));
        assert!(!glob_match("/exact", "/exact/more"));
    }
}
