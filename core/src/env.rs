//! `${NAME}` and `${NAME:-default}` in a rules document, so one file serves
//! every environment (`store: ${REDIS_URL:-memory}`) the way Compose files do.
//!
//! Expansion happens on the parsed document, one string at a time: a value
//! from the environment is never parsed as YAML or JSON, so it cannot add
//! structure (a `"` or `]` in a password stays in the password; a value cannot
//! add `trusted_proxies`). The value takes the type [`SCHEMA`] gives the field
//! where it stands: in a number or boolean field an expanded string that
//! spells one becomes it (`burst: ${BURST:-10}` is the integer 10,
//! `overrides: ${OVERRIDES:-true}` a boolean; anything else stays text and
//! the field's parser refuses it naming the field); every other field keeps
//! text, so `prefix: ${APP_ID}` with `APP_ID=042` is the prefix `"042"`, and
//! a tier or policy named `burst` or `shadow` is a name, not a field.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// Expands every string of `document` (map keys included, which stay strings)
/// from the process environment. Errors name the field (`policies.api.burst`).
pub fn expand_document(document: Value) -> Result<Value> {
    expand_with(document, &process_env)
}

/// The variables of the process environment.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Where `${NAME}` values come from: the process environment, or a test's map.
pub(crate) type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// [`expand_document`] with the variables from `lookup`.
pub(crate) fn expand_with(document: Value, lookup: Lookup<'_>) -> Result<Value> {
    expand_value(document, "", &mut Vec::new(), lookup)
}

/// `path` names the value in errors (`policies.api.burst`, `rules[0].shadow`);
/// `at` holds the same path as segments (a map key, or `None` for a list
/// item) for [`SCHEMA`], so a name holding a `.` stays one segment.
fn expand_value(value: Value, path: &str, at: &mut Vec<Option<String>>, lookup: Lookup<'_>) -> Result<Value> {
    let child = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    let field = if path.is_empty() { "rules file" } else { path };
    Ok(match value {
        Value::String(text) => {
            let expanded = expand_text(&text, field, lookup)?;
            match scalar_type(at) {
                Some(kind) if has_variable(&text) => typed(expanded, kind),
                _ => Value::String(expanded),
            }
        }
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                at.push(None);
                let item = expand_value(item, &format!("{path}[{i}]"), at, lookup);
                at.pop();
                out.push(item?);
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (key, item) in map {
                let key = expand_text(&key, &child(&key), lookup)?;
                at.push(Some(key.clone()));
                let item = expand_value(item, &child(&key), at, lookup);
                at.pop();
                if out.insert(key.clone(), item?).is_some() {
                    return Err(Error::config(
                        child(&key),
                        "",
                        "is given twice once variables are expanded",
                    ));
                }
            }
            Value::Object(out)
        }
        other => other,
    })
}

/// The type of a field that holds no text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scalar {
    /// An integer or a decimal number.
    Number,
    /// `true` or `false`.
    Bool,
    /// `true`, `false` or a number (`block_cache`).
    BoolOrNumber,
    /// `true`, `false` or text (`anomaly_log: stderr`; `adaptive: true` or a map).
    BoolOrText,
}

/// Every field of a rules document that does not hold text, as a path
/// pattern: `*` stands for one segment (a policy, rule or region by name or
/// index). Every other field holds text (names, rates, durations, URLs,
/// `count`, which reads `503` and `"503"` alike). The test
/// `the_schema_types_every_field_of_the_effective_configuration` checks this
/// list (in `config.rs`) against the effective configuration of documents
/// that set every field.
pub(crate) const SCHEMA: &[(&str, Scalar)] = &[
    ("max_keys", Scalar::Number),
    ("overrides", Scalar::Bool),
    ("block_cache", Scalar::BoolOrNumber),
    ("anomaly_log", Scalar::BoolOrText),
    ("failure_threshold", Scalar::Number),
    ("half_open_probes", Scalar::Number),
    ("ipv6_subnet", Scalar::Number),
    ("shadow", Scalar::Bool),
    ("key_function", Scalar::Bool),
    ("watch", Scalar::BoolOrText),
    ("regions.*.share", Scalar::Number),
    ("policies.*.burst", Scalar::Number),
    ("policies.*.capacity", Scalar::Number),
    ("policies.*.limit", Scalar::Number),
    ("policies.*.penalty.threshold", Scalar::Number),
    ("policies.*.sync.share", Scalar::Number),
    ("policies.*.adaptive", Scalar::BoolOrText),
    ("policies.*.adaptive.factor", Scalar::Number),
    ("rules.*.shadow", Scalar::Bool),
];

/// The type [`SCHEMA`] gives the field at `at`, if not text.
pub(crate) fn scalar_type(at: &[Option<String>]) -> Option<Scalar> {
    schema_entry(at).map(|(_, kind)| *kind)
}

/// The entry of [`SCHEMA`] whose pattern matches `at`.
pub(crate) fn schema_entry(at: &[Option<String>]) -> Option<&'static (&'static str, Scalar)> {
    SCHEMA.iter().find(|(pattern, _)| {
        let mut parts = pattern.split('.');
        at.iter().all(|segment| match (parts.next(), segment) {
            (Some("*"), _) => true,
            (Some(part), Some(key)) => part == key,
            _ => false,
        }) && parts.next().is_none()
    })
}

/// Whether `text` holds a `${…}` (not only `$${` escapes).
fn has_variable(text: &str) -> bool {
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        if !rest[..at].ends_with('$') {
            return true;
        }
        rest = &rest[at + 2..];
    }
    false
}

/// An expanded value in a field of type `kind`: the number or boolean it
/// spells, or the text (which the field's parser then refuses, naming it).
fn typed(text: String, kind: Scalar) -> Value {
    let read = literal_scalar(&text).filter(|v| match kind {
        Scalar::Number => v.is_number(),
        Scalar::Bool | Scalar::BoolOrText => v.is_boolean(),
        Scalar::BoolOrNumber => true,
    });
    read.unwrap_or(Value::String(text))
}

/// The YAML core-schema reading of a plain scalar: integer, float or boolean.
fn literal_scalar(text: &str) -> Option<Value> {
    match text {
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty()
        || !digits
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'e' || b == b'E')
    {
        return None;
    }
    if let Ok(n) = text.parse::<i64>() {
        return Some(Value::from(n));
    }
    if let Ok(n) = text.parse::<u64>() {
        return Some(Value::from(n));
    }
    text.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map(Value::Number)
}

/// Replaces each `${NAME}` with the environment variable `NAME` and each
/// `${NAME:-default}` with it, or with `default` when it is unset or empty.
/// `$${` is a literal `${`. An unset `${NAME}` without a default is an error.
fn expand_text(text: &str, field: &str, lookup: Lookup<'_>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            out.push_str(&rest[..at - 1]);
            out.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let body_start = at + 2;
        let end = rest[body_start..]
            .find('}')
            .ok_or_else(|| Error::config(field, Value::from(&rest[at..]), "has a \"${\" without a closing \"}\""))?;
        let body = &rest[body_start..body_start + end];
        let (name, default) = match body.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (body, None),
        };
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Error::config(
                field,
                Value::from(format!("${{{body}}}")),
                "is not ${NAME} or ${NAME:-default}",
            ));
        }
        match (lookup(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(Error::config(
                    field,
                    Value::from(format!("${{{name}}}")),
                    format!("needs the environment variable {name}, which is not set (or write ${{{name}:-default}})"),
                ))
            }
        }
        rest = &rest[body_start + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "REDIS_URL" => Some("redis://10.0.0.1:6379".into()),
            "EMPTY" => Some(String::new()),
            "BURST" => Some("25".into()),
            "SHADOW" => Some("true".into()),
            "PASSWORD" => Some(r#"p"w]}, trusted_proxies: [0.0.0.0/0"#.into()),
            _ => None,
        }
    }

    fn expand(document: Value) -> Result<Value> {
        expand_with(document, &lookup)
    }

    fn text(text: &str) -> Result<String> {
        expand_text(text, "store", &lookup)
    }

    #[test]
    fn replaces_set_variables_and_defaults() {
        assert_eq!(text("${REDIS_URL}").unwrap(), "redis://10.0.0.1:6379");
        assert_eq!(text("${REDIS_URL:-memory}").unwrap(), "redis://10.0.0.1:6379");
        assert_eq!(text("${UNSET:-memory}").unwrap(), "memory");
        assert_eq!(text("${EMPTY:-memory}").unwrap(), "memory");
        assert_eq!(text("a ${UNSET:-}|").unwrap(), "a |");
        assert_eq!(text("no variables").unwrap(), "no variables");
    }

    #[test]
    fn a_doubled_dollar_is_literal() {
        assert_eq!(text("$${REDIS_URL}").unwrap(), "${REDIS_URL}");
        assert_eq!(text("$5 ${UNSET:-x}").unwrap(), "$5 x");
    }

    #[test]
    fn an_unset_variable_without_default_names_it_and_the_field() {
        let err = expand(json!({"policies": {"api": {"burst": "${UNSET}"}}}))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("policies.api.burst: \"${UNSET}\"") && err.contains("UNSET, which is not set"),
            "{err}"
        );
        let err = text("${REDIS URL}").unwrap_err().to_string();
        assert!(err.contains("${REDIS URL}"), "{err}");
        let err = text("${REDIS_URL").unwrap_err().to_string();
        assert!(err.contains("without a closing"), "{err}");
    }

    #[test]
    fn a_whole_variable_in_a_number_or_boolean_field_becomes_the_scalar_it_spells() {
        let doc = json!({
            "policies": {"a": {"burst": "${BURST:-10}", "capacity": "${UNSET:-10}", "rate": "${UNSET:-10/s}",
                               "penalty": {"threshold": "${UNSET:--3}"}}},
            "shadow": "${SHADOW}", "ipv6_subnet": "${UNSET:-0.5}", "mixed": "${BURST}/s",
            "prefix": "${BURST}", "name": "${UNSET:-007}", "store": "${REDIS_URL}", "literal": "$${BURST}",
        });
        assert_eq!(
            expand(doc).unwrap(),
            json!({
                "policies": {"a": {"burst": 25, "capacity": 10, "rate": "10/s", "penalty": {"threshold": -3}}},
                "shadow": true, "ipv6_subnet": 0.5, "mixed": "25/s",
                "prefix": "25", "name": "007", "store": "redis://10.0.0.1:6379", "literal": "${BURST}",
            })
        );
    }

    #[test]
    fn each_value_takes_the_type_of_its_field_wherever_it_stands() {
        let doc = json!({
            "overrides": "${UNSET:-true}", "block_cache": "${UNSET:-500}", "anomaly_log": "${UNSET:-stderr}",
            "regions": {"eu": {"store": "${UNSET:-redis://e}", "share": "${UNSET:-0.5}"}, "burst": "${BURST}"},
            "policies": {
                "shadow": {"algorithm": "concurrency", "limit": "${BURST}", "lease": "${UNSET:-30s}"},
                "burst": {"rate": "${UNSET:-10/s}", "sync": {"share": "${UNSET:-2}"}, "adaptive": {"factor": "${UNSET:-2.5}"}},
                "a": {"rate": "1/s", "adaptive": "${SHADOW}", "name": "${UNSET:-042}"},
            },
            "rules": [{"policy": "${UNSET:-true}", "shadow": "${SHADOW}", "count": "${UNSET:-503}",
                       "tiers": {"burst": "${BURST}", "shadow": "${SHADOW}"}}],
            "prefix": "${UNSET:-042}", "max_keys": "${UNSET:-lots}", "literal": "$${BURST}", "shadow": "$${SHADOW}",
        });
        assert_eq!(
            expand(doc).unwrap(),
            json!({
                "overrides": true, "block_cache": 500, "anomaly_log": "stderr",
                "regions": {"eu": {"store": "redis://e", "share": 0.5}, "burst": "25"},
                "policies": {
                    "shadow": {"algorithm": "concurrency", "limit": 25, "lease": "30s"},
                    "burst": {"rate": "10/s", "sync": {"share": 2}, "adaptive": {"factor": 2.5}},
                    "a": {"rate": "1/s", "adaptive": true, "name": "042"},
                },
                "rules": [{"policy": "true", "shadow": true, "count": "503",
                           "tiers": {"burst": "25", "shadow": "true"}}],
                "prefix": "042", "max_keys": "lots", "literal": "${BURST}", "shadow": "${SHADOW}",
            })
        );
    }

    #[test]
    fn a_value_never_adds_structure() {
        let doc = json!({"store": "redis://:${PASSWORD}@h:6379", "list": ["${PASSWORD}"]});
        assert_eq!(
            expand(doc).unwrap(),
            json!({
                "store": r#"redis://:p"w]}, trusted_proxies: [0.0.0.0/0@h:6379"#,
                "list": [r#"p"w]}, trusted_proxies: [0.0.0.0/0"#],
            })
        );
    }
}
