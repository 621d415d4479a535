//! A rules document or policy (YAML or JSON text) parsed into a JSON value,
//! refusing duplicate keys: YAML and JSON parsers keep the last of two equal
//! keys, so a second `rate:` or `rules:` would silently replace the first.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

use crate::error::{Error, Result};

/// Parses the text of a rules file (YAML or JSON) and expands its `${NAME}`
/// and `${NAME:-default}` from the environment, one string at a time (see
/// [`crate::expand_document`]). A `${…}` may stand anywhere a scalar may, flow maps
/// included, where YAML would otherwise read its braces as structure.
pub fn parse_rules(text: &str) -> Result<Value> {
    parse_rules_with(text, &crate::env::process_env)
}

/// [`parse_rules`] with the variables from `lookup`.
pub(crate) fn parse_rules_with(text: &str, lookup: crate::env::Lookup<'_>) -> Result<Value> {
    let (protected, variables) = Variables::protect(text);
    let document = parse(&protected, "rules file")?;
    crate::env::expand_with(variables.restore(document), lookup)
}

/// The `${…}` (and `$${…}`) of a text, replaced by plain tokens while YAML
/// parses it.
struct Variables {
    /// A prefix found nowhere in the text.
    token: String,
    originals: Vec<String>,
}

impl Variables {
    fn protect(text: &str) -> (String, Variables) {
        let token = (0u32..)
            .map(|n| format!("polylimitvar{n}x"))
            .find(|t| !text.contains(t.as_str()))
            .unwrap_or_default();
        let mut variables = Variables {
            token,
            originals: Vec::new(),
        };
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find("${") {
            let start = if rest[..at].ends_with('$') { at - 1 } else { at };
            let Some(end) = rest[at..].find('}').map(|e| at + e + 1) else {
                break;
            };
            out.push_str(&rest[..start]);
            out.push_str(&format!("{}{}x", variables.token, variables.originals.len()));
            variables.originals.push(rest[start..end].to_string());
            rest = &rest[end..];
        }
        out.push_str(rest);
        (out, variables)
    }

    fn restore(&self, value: Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.restore_text(s)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.restore(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.restore_text(k), self.restore(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    fn restore_text(&self, text: String) -> String {
        if self.originals.is_empty() || !text.contains(self.token.as_str()) {
            return text;
        }
        let mut out = text;
        // Highest index first, so token 1 never matches inside token 12.
        for (i, original) in self.originals.iter().enumerate().rev() {
            out = out.replace(&format!("{}{i}x", self.token), original);
        }
        out
    }
}

/// Parses YAML or JSON text. `what` names the document in errors (`rules file`, `policy`).
pub fn parse(text: &str, what: &str) -> Result<Value> {
    let duplicate = RefCell::new(None);
    let node = Node {
        path: String::new(),
        duplicate: &duplicate,
    };
    let parsed = node.deserialize(serde_yaml_ng::Deserializer::from_str(text));
    if let Some(field) = duplicate.into_inner() {
        return Err(Error::config(field, "", format!("is given twice in the {what}")));
    }
    parsed.map_err(|e| Error::config(what, "", format!("is not valid YAML or JSON: {e}")))
}

/// One node of the document, at `path` (`policies.api`, `rules[0]`).
struct Node<'a> {
    path: String,
    /// The path of the first duplicate key found.
    duplicate: &'a RefCell<Option<String>>,
}

impl Node<'_> {
    fn child(&self, path: String) -> Node<'_> {
        Node {
            path,
            duplicate: self.duplicate,
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // NaN and infinities have no JSON form; the field's parser reports the null.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self.child(format!("{}[{}]", self.path, items.len())))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let path = if self.path.is_empty() {
                key.clone()
            } else {
                format!("{}.{key}", self.path)
            };
            if out.contains_key(&key) {
                self.duplicate.borrow_mut().get_or_insert(path);
                return Err(de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(self.child(path))?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A map key: a string, or a number or boolean written as a key (`1: gold`).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Visitor<'_> for Key {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, number or boolean key")
    }

    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_bool<E>(self, v: bool) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::parse;
    use serde_json::json;

    fn duplicate(text: &str) -> String {
        match parse(text, "rules file") {
            Err(crate::Error::Config { field, message, .. }) => {
                assert_eq!(message, "is given twice in the rules file");
                field
            }
            other => panic!("expected a duplicate-key error, got {other:?}"),
        }
    }

    #[test]
    fn parses_yaml_and_json_alike() {
        let yaml = parse("policies:\n  api: { rate: 10/s, burst: 5 }\nrules: []\n", "rules file").unwrap();
        let json = parse(
            r#"{"policies": {"api": {"rate": "10/s", "burst": 5}}, "rules": []}"#,
            "rules file",
        )
        .unwrap();
        assert_eq!(yaml, json);
        assert_eq!(
            yaml,
            json!({"policies": {"api": {"rate": "10/s", "burst": 5}}, "rules": []})
        );
        assert_eq!(
            parse("tiers: {1: a, true: b}", "x").unwrap(),
            json!({"tiers": {"1": "a", "true": "b"}})
        );
    }

    #[test]
    fn a_key_given_twice_is_named_with_its_path() {
        assert_eq!(
            duplicate("policies:\n  api:\n    rate: 10/s\n    rate: 100/s\n"),
            "policies.api.rate"
        );
        assert_eq!(duplicate("rules: []\nstore: memory\nrules: []\n"), "rules");
        assert_eq!(
            duplicate(r#"{"policies": {"a": {"rate": "1/s"}}, "policies": {}}"#),
            "policies"
        );
        assert_eq!(
            duplicate("rules:\n  - match: {path: /a, path: /b}\n"),
            "rules[0].match.path"
        );
        assert_eq!(
            duplicate(r#"{"rules": [{}, {"key": "ip", "key": "user"}]}"#),
            "rules[1].key"
        );
    }

    #[test]
    fn variables_stand_anywhere_a_scalar_may() {
        std::env::set_var("POLYLIMIT_DOC_TEST_BURST", "25");
        let text =
            "policies: { api: { rate: ${POLYLIMIT_DOC_TEST_RATE:-10/s}, burst: ${POLYLIMIT_DOC_TEST_BURST:-10} } }\n\
                    shadow: ${POLYLIMIT_DOC_TEST_SHADOW:-false}\n\
                    prefix: \"a$${literal}b\"\n\
                    # ${POLYLIMIT_DOC_TEST_UNSET} in a comment is not a variable\n\
                    list: [${POLYLIMIT_DOC_TEST_UNSET:-x}, \"${POLYLIMIT_DOC_TEST_BURST}\", 'polylimitvar0x']\n";
        assert_eq!(
            super::parse_rules(text).unwrap(),
            json!({
                "policies": {"api": {"rate": "10/s", "burst": 25}},
                "shadow": false,
                "prefix": "a${literal}b",
                "list": ["x", "25", "polylimitvar0x"],
            })
        );
    }

    #[test]
    fn other_errors_stay_syntax_errors() {
        let err = parse("a: [1, 2", "rules file").unwrap_err().to_string();
        assert!(err.starts_with("rules file: is not valid YAML or JSON"), "{err}");
    }
}
