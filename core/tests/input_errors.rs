//! Hostile or mistaken input is a configuration error that names the field
//! and the value, raised when the limiter is built or the request is read,
//! never a silent default: duplicate keys in a rules file, a cost that is not
//! a positive integer, control characters in names that reach header values.

use polylimit::{CheckOptions, Error, Limiter, Policy, RequestInfo};
use serde_json::{json, Value};

/// The field and value of a configuration error.
fn config_error<T>(result: polylimit::Result<T>) -> (String, String) {
    match result {
        Err(Error::Config { field, value, .. }) => (field, value),
        Err(other) => panic!("expected a configuration error, got {other}"),
        Ok(_) => panic!("expected a configuration error, got a value"),
    }
}

const RULES: &str =
    "policies:\n  api: { rate: 10/s, burst: 5 }\nrules:\n  - { match: { path: /api/* }, key: [ip], policy: api }\n";

#[test]
fn a_key_given_twice_in_a_rules_file_is_an_error_naming_it() {
    let twice_rate = "policies:\n  api:\n    rate: 10/s\n    burst: 5\n    rate: 1000/s\n";
    assert_eq!(config_error(Limiter::from_rules(twice_rate)).0, "policies.api.rate");

    let twice_rules = format!("{RULES}rules: []\n");
    assert_eq!(config_error(Limiter::from_rules(&twice_rules)).0, "rules");

    let json = r#"{"policies": {"api": {"rate": "10/s"}, "api": {"rate": "1/s"}}}"#;
    assert_eq!(config_error(Limiter::from_rules(json)).0, "policies.api");

    let policy = "rate: 10/s\nburst: 5\nburst: 50\n";
    assert_eq!(config_error(Policy::parse(policy)).0, "burst");

    assert!(Limiter::from_rules(RULES).is_ok());
}

#[test]
fn a_cost_that_is_not_a_positive_integer_is_an_error_naming_cost() {
    for bad in [
        json!(-1),
        json!(0),
        json!(1.5),
        json!("2"),
        json!(true),
        json!([1]),
        json!(1u64 << 40),
    ] {
        let (field, value) = config_error(CheckOptions::from_values(Some(&bad), None));
        assert_eq!((field.as_str(), value), ("cost", bad.to_string()), "{bad}");

        let request = json!({"path": "/api/x", "peer": "203.0.113.7", "cost": bad});
        assert_eq!(config_error(RequestInfo::from_value(&request)).0, "cost", "{bad}");
    }
    for (given, cost) in [(Value::Null, 1), (json!(3), 3), (json!(3.0), 3)] {
        assert_eq!(CheckOptions::from_values(Some(&given), None).unwrap().cost, cost);
    }
    let request = RequestInfo::from_value(&json!({"cost": 4, "now_ms": 1700000000000u64})).unwrap();
    assert_eq!((request.cost, request.now_ms), (Some(4), Some(1_700_000_000_000)));

    for bad in [json!(1.5), json!("1700000000000"), json!(false)] {
        assert_eq!(
            config_error(CheckOptions::from_values(None, Some(&bad))).0,
            "now_ms",
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_request_cost_is_charged_exactly() {
    let limiter = Limiter::from_rules(RULES).unwrap();
    let request = RequestInfo::from_value(&json!({
        "path": "/api/x", "peer": "203.0.113.7", "cost": 4, "now_ms": 1_700_000_000_000u64
    }))
    .unwrap();
    let outcome = limiter.check_request(&request).await.unwrap();
    assert_eq!(outcome.decisions[0].decision.remaining, 1);
}

#[test]
fn control_characters_in_names_are_errors() {
    for name in [
        "api\r\nSet-Cookie: a=b",
        "api\n",
        "tab\tname",
        "nul\u{0}",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        // YAML double-quoted, every control character escaped (YAML refuses a raw DEL).
        let quoted: String = name
            .chars()
            .map(|c| {
                if c.is_control() {
                    format!("\\u{:04x}", c as u32)
                } else {
                    c.to_string()
                }
            })
            .collect();
        let quoted = format!("\"{quoted}\"");
        let yaml_name = serde_json::to_string(name).unwrap();

        let keyed = format!("policies:\n  {quoted}: {{ rate: 10/s }}\n");
        assert_eq!(
            config_error(Limiter::from_rules(&keyed)),
            ("policies".into(), yaml_name.clone())
        );

        let named = format!("policies:\n  api: {{ rate: 10/s, name: {quoted} }}\n");
        assert_eq!(
            config_error(Limiter::from_rules(&named)),
            ("policies.api.name".into(), yaml_name.clone())
        );

        let rule = format!("{RULES}  - {{ name: {quoted}, match: {{ path: /x }}, policy: api }}\n");
        assert_eq!(
            config_error(Limiter::from_rules(&rule)),
            ("rules[1].name".into(), yaml_name.clone())
        );

        let policy = Policy::parse("rate: 10/s").unwrap().with_name(name);
        let built = Limiter::new(polylimit::LimiterConfig::new(policy));
        assert_eq!(config_error(built), ("policies[0].name".into(), yaml_name));
    }
    let ok = "policies:\n  \"payments (EU) über 100€\": { rate: 10/s }\n";
    assert!(Limiter::from_rules(ok).is_ok());
}
