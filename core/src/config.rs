//! Configuration: an options object or a rules document becomes a limiter,
//! or an error naming the field. The top of the core: it builds the
//! [`LimiterConfig`] of the limiter and the HTTP rules of the `http` layer,
//! and hands both to the limiter in one go.

use std::time::Duration;

use serde_json::{Map, Value};

use crate::document::parse_rules_with;
use crate::duration::parse_duration_ms;
use crate::engine::{Engine, LimiterConfig};
use crate::env::{expand_with, process_env, Lookup};
use crate::error::{Error, Result};
use crate::http::completion::Count;
use crate::http::rules::{middleware_key, strings, HttpRules, HTTP_FIELDS};
use crate::options::{canonical, field_as_written, Naming};
use crate::policy::{check_name, Policy};

impl LimiterConfig {
    /// Builds a configuration from the options object every binding passes:
    /// `policy` (or `policies`: a list, or a map of name → policy), `store`,
    /// `prefix`, `max_keys`, `timeout`, `connect_timeout`, `failure_threshold`, `cooldown`,
    /// `half_open_probes`. Unknown fields are errors.
    pub fn from_value(value: &Value) -> Result<LimiterConfig> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("options", value, "is not an object"))?;
        const FIELDS: [&str; 16] = [
            "policy",
            "policies",
            "store",
            "prefix",
            "max_keys",
            "overrides",
            "timeout",
            "connect_timeout",
            "failure_threshold",
            "cooldown",
            "half_open_probes",
            "tls_ca",
            "block_cache",
            "regions",
            "region",
            "anomaly_log",
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
        if let Some(v) = obj.get("tls_ca").filter(|v| !v.is_null()) {
            config.tls_ca = Some(
                v.as_str()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| Error::config("tls_ca", v, "is not the path of a PEM file"))?
                    .to_string(),
            );
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
        match obj.get("overrides") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => config.overrides = *b,
            Some(other) => return Err(Error::config("overrides", other, "is not true or false")),
        }
        match obj.get("anomaly_log") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => config.anomaly_log = *b,
            Some(Value::String(s)) if s == "stderr" => config.anomaly_log = true,
            Some(Value::String(s)) if s == "off" => config.anomaly_log = false,
            Some(other) => {
                return Err(Error::config(
                    "anomaly_log",
                    other,
                    "is not true, false, \"stderr\" or \"off\"",
                ))
            }
        }
        match obj.get("block_cache") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => config.block_cache = crate::engine::block_cache::DEFAULT_KEYS,
            Some(v) => {
                config.block_cache =
                    v.as_u64().filter(|n| *n > 0 && *n <= 1 << 32).ok_or_else(|| {
                        Error::config("block_cache", v, "is not true, false or a positive number of keys")
                    })? as usize
            }
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
        match (
            obj.get("regions").filter(|v| !v.is_null()),
            obj.get("region").filter(|v| !v.is_null()),
        ) {
            (None, None) => {}
            (None, Some(r)) => return Err(Error::config("region", r, "is set without regions")),
            (Some(regions), region) => {
                let rc = crate::engine::region::RegionConfig::from_values(regions, region)?;
                let local = rc.local_spec();
                if obj.contains_key("store") && config.store != local.store {
                    return Err(Error::config(
                        "store",
                        format!("{:?}", config.store),
                        format!(
                            "conflicts with regions.{}.store {:?}: with regions, the local region's store is the limiter's",
                            local.name, local.store
                        ),
                    ));
                }
                config.store = local.store.clone();
                config.regions = Some(rc);
            }
        }
        Ok(config)
    }
}

/// The engine and the HTTP rules of a binding's options object, in that
/// language's [`Naming`] ([`Limiter::build`](crate::Limiter::build)), and
/// how often to poll its rules file for a reload (`watch`).
pub(crate) fn build(naming: Naming, options: &Value) -> Result<(Engine, HttpRules, Option<Duration>)> {
    as_written(naming, options, || {
        let resolved = Resolved::resolve(naming, options, &process_env)?;
        let watch = resolved.watch;
        Ok((Engine::new(resolved.config)?, resolved.rules, watch))
    })
}

/// The configuration and HTTP rules of a binding's options object, read
/// again (the rules file, `${NAME}` from the environment) for a reload.
pub(crate) fn resolve(naming: Naming, options: &Value) -> Result<(LimiterConfig, HttpRules)> {
    as_written(naming, options, || {
        let resolved = Resolved::resolve(naming, options, &process_env)?;
        Ok((resolved.config, resolved.rules))
    })
}

/// The configuration and HTTP rules of a parsed rules document, for a reload.
pub(crate) fn resolve_document(value: &Value) -> Result<(LimiterConfig, HttpRules)> {
    let resolved = Resolved::from_parts(document_fields(value)?, Map::new(), Origin::Document)?;
    Ok((resolved.config, resolved.rules))
}

/// The fields of a parsed rules document that is not a file: a `watch` in it
/// is an error naming `watch` (there is no file to poll).
fn document_fields(value: &Value) -> Result<Map<String, Value>> {
    let mut obj = value
        .as_object()
        .ok_or_else(|| Error::config("rules file", "", "is not a map"))?
        .clone();
    watch_interval(obj.remove("watch"), false)?;
    Ok(obj)
}

/// The poll interval of `watch`: `true` 1s, a duration, `false` (or absent) none.
fn watch_interval(value: Option<Value>, rules_file: bool) -> Result<Option<Duration>> {
    let interval = match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => Duration::from_secs(1),
        Some(Value::String(text)) => match crate::duration::parse_duration_ms(&text) {
            Some(ms) if (1..=1 << 40).contains(&ms) => Duration::from_millis(ms),
            _ => {
                return Err(Error::config(
                    "watch",
                    Value::String(text),
                    "is not true, false or a duration (\"1s\", \"250ms\")",
                ))
            }
        },
        Some(other) => return Err(Error::config("watch", other, "is not true, false or a duration")),
    };
    if !rules_file {
        return Err(Error::config(
            "watch",
            "true",
            "needs rules_file: only a rules file can change under a running limiter",
        ));
    }
    Ok(Some(interval))
}

/// The engine and the HTTP rules of a parsed rules document
/// ([`Limiter::from_document`](crate::Limiter::from_document)).
pub(crate) fn from_document(value: &Value) -> Result<(Engine, HttpRules)> {
    let resolved = Resolved::from_parts(document_fields(value)?, Map::new(), Origin::Document)?;
    Ok((Engine::new(resolved.config)?, resolved.rules))
}

/// The configuration a limiter would be built from, in canonical form: every
/// option under its rules-file name with its effective value (defaults
/// included), each policy with every field, and the rules. Errors are the
/// ones [`Limiter::build`](crate::Limiter::build) gives. Conformance vectors
/// compare this across languages; loading it back as a rules document gives
/// the same limiter.
pub fn effective_config(naming: Naming, options: &Value) -> Result<Value> {
    effective_config_with(naming, options, &process_env)
}

/// [`effective_config`] with `${NAME}` values from `lookup` instead of the
/// process environment (for tests).
#[doc(hidden)]
pub fn effective_config_with(
    naming: Naming,
    options: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Value> {
    as_written(naming, options, || {
        let resolved = Resolved::resolve(naming, options, lookup)?;
        let described = resolved.describe();
        // Building validates what parsing alone does not (store URL, policy names).
        Engine::new(resolved.config)?.close();
        Ok(described)
    })
}

/// Runs `build`; its configuration error names the field as the user wrote it
/// ([`field_as_written`]).
fn as_written<T>(naming: Naming, options: &Value, build: impl FnOnce() -> Result<T>) -> Result<T> {
    build().map_err(|e| match e {
        Error::Config { field, value, message } => Error::Config {
            field: field_as_written(naming, options, &field),
            value,
            message,
        },
        other => other,
    })
}

/// Where the policies and rules came from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A rules document: `policies` required, its `rules` used.
    Document,
    /// The shorthand: `policy`/`policies` and `key` make one rule.
    Shorthand,
}

/// Options resolved into the two halves a limiter is made of.
struct Resolved {
    config: LimiterConfig,
    rules: HttpRules,
    /// `watch`: how often to poll the rules file for a reload.
    watch: Option<Duration>,
    /// The HTTP fields as given (with the shorthand's rule), for `describe`.
    http: Map<String, Value>,
}

impl Resolved {
    fn resolve(naming: Naming, options: &Value, lookup: Lookup<'_>) -> Result<Resolved> {
        let mut opts = canonical(naming, options)?;
        // `watch` given in code wins over the rules file's own (`false` included).
        let given = match opts.remove("watch") {
            None | Some(Value::Null) => None,
            Some(value) => Some(watch_interval(Some(value), opts.contains_key("rules_file"))?),
        };
        let mut resolved = Resolved::resolve_options(opts, lookup, given.is_none())?;
        if let Some(watch) = given {
            resolved.watch = watch;
        }
        Ok(resolved)
    }

    /// [`Resolved::resolve`] of canonical options without `watch`; with
    /// `file_watch`, the rules file's own `watch` is read into
    /// [`Resolved::watch`] (otherwise it is left aside, unread).
    fn resolve_options(mut opts: Map<String, Value>, lookup: Lookup<'_>, file_watch: bool) -> Result<Resolved> {
        let from_file = opts.contains_key("rules_file");
        let mut document = match (opts.remove("rules"), opts.remove("rules_file")) {
            (Some(_), Some(_)) => {
                return Err(Error::config("rules_file", "", "cannot be given together with rules"));
            }
            (Some(Value::String(text)), None) => Some(parse_rules_with(&text, lookup)?),
            (Some(v @ Value::Object(_)), None) => Some(expand_with(v, lookup)?),
            (Some(other), None) => return Err(Error::config("rules", other, "is not rules text or a map")),
            (None, Some(Value::String(path))) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    Error::config(
                        "rules_file",
                        Value::String(path.clone()),
                        format!("cannot be read: {e}"),
                    )
                })?;
                Some(parse_rules_with(&text, lookup)?)
            }
            (None, Some(other)) => return Err(Error::config("rules_file", other, "is not a path")),
            (None, None) => None,
        };
        // A rules file may ask to be watched itself; a document given as text or a map may not.
        let watch = match document.as_mut().and_then(Value::as_object_mut) {
            Some(doc) if file_watch => watch_interval(doc.remove("watch"), from_file)?,
            Some(doc) => doc.remove("watch").and(None),
            None => None,
        };
        let mut resolved = match document {
            None => Resolved::from_parts(opts, Map::new(), Origin::Shorthand),
            // A route's own limiter beside the plugin's rules document: the
            // document's settings (store, proxies, headers, …), the route's limit.
            Some(Value::Object(mut doc))
                if opts.contains_key("route") && (opts.contains_key("policy") || opts.contains_key("policies")) =>
            {
                doc.remove("policies");
                doc.remove("rules");
                Resolved::from_parts(doc, opts, Origin::Shorthand)
            }
            Some(Value::Object(doc)) => {
                for field in ["policy", "policies", "key", "count"] {
                    if opts.contains_key(field) {
                        return Err(Error::config(
                            field,
                            "",
                            "cannot be given together with a rules document (rules, rules_file): put it in the document",
                        ));
                    }
                }
                Resolved::from_parts(doc, opts, Origin::Document)
            }
            Some(other) => Err(Error::config("rules file", other, "is not a map")),
        }?;
        resolved.watch = watch;
        Ok(resolved)
    }

    /// `fields` with `overrides` on top, split into limiter options and HTTP fields.
    fn from_parts(fields: Map<String, Value>, overrides: Map<String, Value>, origin: Origin) -> Result<Resolved> {
        let mut all = fields;
        all.extend(overrides);
        let key = all.remove("key");
        let count = match all.remove("count") {
            None | Some(Value::Null) => None,
            Some(v) => {
                Count::parse(&v, "count")?;
                Some(v)
            }
        };
        let key_function = match all.remove("key_function") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(other) => return Err(Error::config("key_function", other, "is not true or false")),
        };
        let route = match all.remove("route") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) if !r.is_empty() && !r.contains(['{', '}']) => Some(r),
            Some(other) => {
                return Err(Error::config(
                    "route",
                    other,
                    "is not a route: a non-empty string without '{' or '}'",
                ))
            }
        };
        let (mut http, options): (Map<_, _>, Map<_, _>) =
            all.into_iter().partition(|(k, _)| HTTP_FIELDS.contains(&k.as_str()));
        if origin == Origin::Document {
            if !options.contains_key("policies") {
                return Err(Error::config("policies", "", "is required in a rules file"));
            }
            if let Some(k) = key {
                return Err(Error::config(
                    "key",
                    k,
                    "is not a rules-file field (rules name their key)",
                ));
            }
            if let Some(c) = count.as_ref() {
                return Err(Error::config(
                    "count",
                    c,
                    "is not a rules-file field (each rule has its own count)",
                ));
            }
        }
        let mut config = LimiterConfig::from_value(&Value::Object(options))?;
        if let Some(route) = route {
            // A route's own limiter: its own key space, never the plugin-wide limiter's.
            config.prefix = format!("{}:route:{route}", config.prefix);
        }
        let names: Vec<String> = config.policies.iter().map(|p| p.name().to_string()).collect();
        if origin == Origin::Shorthand {
            if http.contains_key("rules") {
                return Err(Error::config(
                    "rules",
                    "",
                    "is a rules document here; give it as rules, not with policy",
                ));
            }
            let key = key.map(|v| strings(&v, "key")).transpose()?;
            let key = middleware_key(key.as_deref(), key_function, false)?;
            // Named after its policies: the `route` label of the limiter's metrics.
            let joined = names.join("+");
            let name = if joined.len() <= 128 {
                joined
            } else {
                "limit".to_string()
            };
            let mut rule = serde_json::json!({ "name": name, "key": key, "policy": names });
            if let Some(count) = count {
                rule["count"] = count;
            }
            http.insert("rules".into(), Value::Array(vec![rule]));
        }
        let rules = HttpRules::from_value(&http, &|name| names.iter().position(|n| n == name))?;
        if key_function && !rules.reads_key() {
            return Err(Error::config(
                "key_function",
                "true",
                "is set (the middleware has a key function), but no rule of the rules document keys by `key` \
                 and no allowlist or denylist entry is a key:…: the function would be ignored",
            ));
        }
        Ok(Resolved {
            config,
            rules,
            http,
            watch: None,
        })
    }

    fn describe(&self) -> Value {
        let ms = |d: Duration| Value::String(format!("{}ms", d.as_millis()));
        let list = |field: &str| match self.http.get(field) {
            None => Value::Array(Vec::new()),
            Some(Value::String(s)) => Value::Array(vec![Value::String(s.clone())]),
            Some(v) => v.clone(),
        };
        let c = &self.config;
        let regions = c.regions.as_ref().map(|r| (r.to_value(), r.local.clone()));
        let policies: Map<String, Value> = c
            .policies
            .iter()
            .map(|p| (p.name().to_string(), p.to_value()))
            .collect();
        let mut out = serde_json::json!({
            "store": c.store,
            "prefix": c.prefix,
            "max_keys": c.max_keys,
            "overrides": c.overrides,
            "anomaly_log": c.anomaly_log,
            "block_cache": if c.block_cache > 0 { Value::from(c.block_cache) } else { Value::Bool(false) },
            "timeout": ms(c.timeout),
            "connect_timeout": ms(c.connect_timeout),
            "failure_threshold": c.breaker.threshold,
            "cooldown": ms(c.breaker.cooldown),
            "half_open_probes": c.breaker.half_open_max,
            "tls_ca": c.tls_ca,
            "policies": policies,
            "trusted_proxies": list("trusted_proxies"),
            "forwarded_header": self.rules.trusted_proxies.header.name(),
            "ipv6_subnet": self.rules.ipv6_subnet,
            "headers": self.rules.headers.to_value(),
            "shadow": self.rules.shadow,
            "allowlist": list("allowlist"),
            "denylist": list("denylist"),
            "rules": self.http.get("rules").cloned().unwrap_or(Value::Array(Vec::new())),
        });
        if let Some((regions, local)) = regions {
            out["regions"] = regions;
            out["region"] = Value::String(local);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{scalar_type, schema_entry, Scalar, SCHEMA};
    use serde_json::json;

    /// Every number or boolean the effective configuration shows (every
    /// option, every policy field) stands where [`crate::env::SCHEMA`] types it, and
    /// every text where it does not: the list cannot drift from the parsers.
    #[test]
    fn the_schema_types_every_field_of_the_effective_configuration() {
        let documents = [
            "overrides: true\nmax_keys: 5\nblock_cache: 7\nanomaly_log: false\nfailure_threshold: 2\n\
             half_open_probes: 2\nipv6_subnet: 48\nshadow: true\ntrusted_proxies: [10.0.0.0/8]\n\
             policies:\n  conc: { algorithm: concurrency, limit: 4 }\n\
             \x20 pen: { rate: 10/s, burst: 15, penalty: { threshold: 3, within: 1m, cooldowns: [10s] } }\n\
             \x20 synced: { algorithm: fixed_window, rate: 100/s, sync: { share: 5 } }\n\
             \x20 adapt: { algorithm: leaky_bucket, mode: shape, rate: 10/s, adaptive: { factor: 2.5 } }\n\
             rules:\n  - { policy: pen, shadow: true, count: failed, key: [ip] }\n\
             \x20 - { tier: user, tiers: { a: synced }, default_tier: a }\n",
            "regions: { eu: { store: \"redis://127.0.0.1:7001\", share: 0.5 }, us: { store: \"redis://127.0.0.1:7002\", share: 0.5 } }\n\
             region: eu\npolicies:\n  api: { rate: 10/s }\n",
        ];
        fn walk(value: &Value, at: &mut Vec<Option<String>>, seen: &mut std::collections::BTreeSet<&'static str>) {
            let kind = scalar_type(at);
            match value {
                Value::Bool(_) => assert!(
                    matches!(kind, Some(Scalar::Bool | Scalar::BoolOrNumber | Scalar::BoolOrText)),
                    "{at:?} holds a boolean: SCHEMA must say so"
                ),
                Value::Number(_) => assert!(
                    matches!(kind, Some(Scalar::Number | Scalar::BoolOrNumber)),
                    "{at:?} holds a number: SCHEMA must say so"
                ),
                Value::String(_) => assert!(
                    matches!(kind, None | Some(Scalar::BoolOrText)),
                    "{at:?} holds text, SCHEMA gives it {kind:?}"
                ),
                Value::Array(items) => {
                    for item in items {
                        at.push(None);
                        walk(item, at, seen);
                        at.pop();
                    }
                }
                Value::Object(map) => {
                    for (key, item) in map {
                        at.push(Some(key.clone()));
                        walk(item, at, seen);
                        at.pop();
                    }
                }
                Value::Null => {}
            }
            seen.extend(schema_entry(at).map(|(pattern, _)| *pattern));
        }
        let mut seen = std::collections::BTreeSet::new();
        for rules in documents {
            let config = effective_config_with(Naming::Snake, &json!({ "rules": rules }), &|_| None).unwrap();
            walk(&config, &mut Vec::new(), &mut seen);
        }
        // `capacity` (shown as burst), `key_function` (a middleware's) and `watch` (how the file
        // is read, not what it configures) are not shown.
        let unseen: Vec<&str> = SCHEMA.iter().map(|(p, _)| *p).filter(|p| !seen.contains(p)).collect();
        assert_eq!(
            unseen,
            ["key_function", "watch", "policies.*.capacity"],
            "SCHEMA entries the configuration does not show"
        );
    }
}
