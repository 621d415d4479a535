//! Configuration: an options object or a rules document becomes a limiter,
//! or an error naming the field. The top of the core: it builds the
//! [`LimiterConfig`] of the limiter and the HTTP rules of the `http` layer,
//! and hands both to the limiter in one go.

use std::time::Duration;

use serde_json::Value;

use crate::duration::parse_duration_ms;
use crate::error::{Error, Result};
use crate::http::rules::{HttpRules, HTTP_FIELDS};
use crate::http::Limiter;
use crate::limiter::LimiterConfig;
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
        const FIELDS: [&str; 10] = [
            "policy",
            "policies",
            "store",
            "prefix",
            "max_keys",
            "timeout",
            "connect_timeout",
            "failure_threshold",
            "cooldown",
            "half_open_probes",
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
        Ok(config)
    }
}

impl Limiter {
    /// A limiter from the options object of [`LimiterConfig::from_value`].
    pub fn from_value(options: &Value) -> Result<Limiter> {
        Limiter::new(LimiterConfig::from_value(options)?)
    }

    /// A limiter from a rules file (YAML or JSON, `${NAME:-default}` expanded
    /// from the environment): limiter options, `policies`
    /// (a map of name → policy), `rules`, `trusted_proxies`, `ipv6_subnet`,
    /// `headers`, `shadow`, `allowlist`, `denylist`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Limiter> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::config(
                "rules file",
                format!("{:?}", path.display().to_string()),
                format!("cannot be read: {e}"),
            )
        })?;
        Limiter::from_rules(&text)
    }

    /// A limiter from the text of a rules file. `${NAME}` and
    /// `${NAME:-default}` are replaced by environment variables, one value at
    /// a time, after parsing.
    pub fn from_rules(text: &str) -> Result<Limiter> {
        Limiter::from_document(&crate::document::parse_rules(text)?)
    }

    /// A limiter from a parsed rules document whose variables are already
    /// expanded ([`crate::parse_rules`] or [`crate::expand_document`]).
    pub fn from_document(value: &Value) -> Result<Limiter> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("rules file", "", "is not a map"))?;
        let (http, options): (serde_json::Map<_, _>, serde_json::Map<_, _>) = obj
            .clone()
            .into_iter()
            .partition(|(k, _)| HTTP_FIELDS.contains(&k.as_str()));
        if !options.contains_key("policies") {
            return Err(Error::config("policies", "", "is required in a rules file"));
        }
        let config = LimiterConfig::from_value(&Value::Object(options))?;
        let names: Vec<String> = config.policies.iter().map(|p| p.name().to_string()).collect();
        let rules = HttpRules::from_value(&http, &|name| names.iter().position(|n| n == name))?;
        Limiter::with_rules(config, Some(rules))
    }
}
