//! Building a [`Limiter`] from an options object or a rules file (read by
//! [`crate::config`]).

use serde_json::Value;

use super::Limiter;
use crate::config;
use crate::error::Result;
use crate::options::Naming;

impl Limiter {
    /// A limiter from the options object of a binding, in that language's
    /// [`Naming`]: `policy`/`policies` with `key` (one rule on those
    /// dimensions, default `["ip"]`), or `rules` (YAML/JSON text or a map) /
    /// `rules_file` (a path), each with limiter and HTTP options that
    /// override the document's. The options are listed in
    /// [`crate::options::OPTIONS`].
    pub fn build(naming: Naming, options: &Value) -> Result<Limiter> {
        let (engine, rules, watch) = config::build(naming, options)?;
        engine.metrics_registry().set_reloadable();
        let source = super::reload::Source::Options(naming, options.clone());
        let limiter = Limiter::from_parts(engine, Some(rules), source);
        if let Some(interval) = watch {
            let path = options_path(naming, options);
            super::reload::watch(&limiter, path, interval);
        }
        Ok(limiter)
    }

    /// [`Limiter::build`] with Rust's names: the options object of
    /// [`LimiterConfig::from_value`](crate::LimiterConfig::from_value) plus
    /// the HTTP options and `rules`.
    pub fn from_value(options: &Value) -> Result<Limiter> {
        Limiter::build(Naming::Snake, options)
    }

    /// A limiter from a rules file (YAML or JSON, `${NAME:-default}` expanded
    /// from the environment): limiter options, `policies`
    /// (a map of name → policy), `rules`, `trusted_proxies`, `ipv6_subnet`,
    /// `headers`, `shadow`, `allowlist`, `denylist`.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Limiter> {
        let path = path.as_ref().to_string_lossy().into_owned();
        Limiter::build(Naming::Snake, &serde_json::json!({ "rules_file": path }))
    }

    /// A limiter from the text of a rules file. `${NAME}` and
    /// `${NAME:-default}` are replaced by environment variables, one value at
    /// a time, after parsing.
    pub fn from_rules(text: &str) -> Result<Limiter> {
        Limiter::build(Naming::Snake, &serde_json::json!({ "rules": text }))
    }

    /// A limiter from a parsed rules document whose variables are already
    /// expanded ([`crate::parse_rules`] or [`crate::expand_document`]).
    pub fn from_document(value: &Value) -> Result<Limiter> {
        let (engine, rules) = config::from_document(value)?;
        engine.metrics_registry().set_reloadable();
        let source = super::reload::Source::Document(value.clone());
        Ok(Limiter::from_parts(engine, Some(rules), source))
    }
}

/// The rules file of a binding's options (`rules_file` as that language names it).
fn options_path(naming: Naming, options: &Value) -> std::path::PathBuf {
    let canonical = crate::options::canonical(naming, options).unwrap_or_default();
    let path = canonical.get("rules_file").and_then(Value::as_str).unwrap_or_default();
    std::path::PathBuf::from(path)
}
