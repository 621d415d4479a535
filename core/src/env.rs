//! `${NAME}` and `${NAME:-default}` in a rules file, so one file serves every
//! environment (`store: ${REDIS_URL:-memory}`) the way Compose files do.

use crate::error::{Error, Result};

/// Replaces each `${NAME}` with the environment variable `NAME` and each
/// `${NAME:-default}` with it, or with `default` when it is unset or empty.
/// `$${` is a literal `${`. An unset `${NAME}` without a default is an error.
pub(crate) fn expand(text: &str) -> Result<String> {
    expand_with(text, |name| std::env::var(name).ok())
}

fn expand_with(text: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String> {
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
            .ok_or_else(|| Error::config("rules file", &rest[at..], "has a \"${\" without a closing \"}\""))?;
        let body = &rest[body_start..body_start + end];
        let (name, default) = match body.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (body, None),
        };
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Error::config(
                "rules file",
                format!("${{{body}}}"),
                "is not ${NAME} or ${NAME:-default}",
            ));
        }
        match (lookup(name).filter(|v| !v.is_empty()), default) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(Error::config(
                    "rules file",
                    format!("${{{name}}}"),
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

    fn expand(text: &str) -> Result<String> {
        expand_with(text, |name| match name {
            "REDIS_URL" => Some("redis://10.0.0.1:6379".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        })
    }

    #[test]
    fn replaces_set_variables_and_defaults() {
        assert_eq!(expand("store: ${REDIS_URL}").unwrap(), "store: redis://10.0.0.1:6379");
        assert_eq!(
            expand("store: ${REDIS_URL:-memory}").unwrap(),
            "store: redis://10.0.0.1:6379"
        );
        assert_eq!(expand("store: ${UNSET:-memory}").unwrap(), "store: memory");
        assert_eq!(expand("store: ${EMPTY:-memory}").unwrap(), "store: memory");
        assert_eq!(expand("a: ${UNSET:-}|").unwrap(), "a: |");
        assert_eq!(expand("no variables").unwrap(), "no variables");
    }

    #[test]
    fn a_doubled_dollar_is_literal() {
        assert_eq!(expand("a: $${REDIS_URL}").unwrap(), "a: ${REDIS_URL}");
        assert_eq!(expand("price: $5 ${UNSET:-x}").unwrap(), "price: $5 x");
    }

    #[test]
    fn an_unset_variable_without_default_names_it() {
        let err = expand("store: ${UNSET}").unwrap_err().to_string();
        assert!(
            err.contains("${UNSET}") && err.contains("UNSET, which is not set"),
            "{err}"
        );
        let err = expand("store: ${REDIS URL}").unwrap_err().to_string();
        assert!(err.contains("${REDIS URL}"), "{err}");
        let err = expand("store: ${REDIS_URL").unwrap_err().to_string();
        assert!(err.contains("without a closing"), "{err}");
    }
}
