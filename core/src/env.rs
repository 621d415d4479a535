//! `${NAME}` and `${NAME:-default}` in a rules document, so one file serves
//! every environment (`store: ${REDIS_URL:-memory}`) the way Compose files do.
//!
//! Expansion happens on the parsed document, one string at a time: a value
//! from the environment is never parsed as YAML or JSON, so it cannot add
//! structure (a `"` or `]` in a password stays in the password; a value cannot
//! add `trusted_proxies`). A string that is exactly one `${…}` in a field
//! that holds a number or a boolean becomes the scalar it would be if written
//! literally: `burst: ${BURST:-10}` is the integer 10 and
//! `shadow: ${SHADOW:-false}` a boolean; in every other field it stays text,
//! so `prefix: ${APP_ID}` with `APP_ID=42` is the prefix `"42"`.

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
    expand_value(document, "", lookup)
}

fn expand_value(value: Value, path: &str, lookup: Lookup<'_>) -> Result<Value> {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    Ok(match value {
        Value::String(text) if typed_field(path) => {
            expand_scalar(&text, if path.is_empty() { "rules file" } else { path }, lookup)?
        }
        Value::String(text) => Value::String(expand_text(
            &text,
            if path.is_empty() { "rules file" } else { path },
            lookup,
        )?),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| expand_value(item, &format!("{path}[{i}]"), lookup))
                .collect::<Result<_>>()?,
        ),
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (key, item) in map {
                let key = expand_text(&key, &at(&key), lookup)?;
                let item = expand_value(item, &at(&key), lookup)?;
                if out.insert(key.clone(), item).is_some() {
                    return Err(Error::config(
                        at(&key),
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

/// The fields of a rules document that hold a number or a boolean (every
/// other one holds text): only there does a whole `${…}` become one.
const TYPED_FIELDS: [&str; 10] = [
    "anomaly_log",
    "block_cache",
    "burst",
    "capacity",
    "threshold",
    "max_keys",
    "failure_threshold",
    "half_open_probes",
    "ipv6_subnet",
    "shadow",
];

/// Whether the field at `path` (`policies.api.burst`, `rules[0].shadow`) holds
/// a number or a boolean.
fn typed_field(path: &str) -> bool {
    let name = path.rsplit('.').next().unwrap_or(path);
    TYPED_FIELDS.contains(&name)
}

/// A whole `${…}` becomes a number or boolean when its text reads as one.
fn expand_scalar(text: &str, field: &str, lookup: Lookup<'_>) -> Result<Value> {
    let whole = text.starts_with("${") && text.find('}') == Some(text.len() - 1);
    let expanded = expand_text(text, field, lookup)?;
    if !whole {
        return Ok(Value::String(expanded));
    }
    Ok(literal_scalar(&expanded).unwrap_or(Value::String(expanded)))
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
        expand_value(document, "", &lookup)
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
