//! The configuration vectors of `tests/conformance/config/`: each case's
//! options, under each language's names, resolve to the expected effective
//! configuration or error. Python, Node and Go run the same files.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use polylimit::options::{Naming, OPTIONS};
use polylimit::{effective_config_with, Error};
use serde_json::{json, Value};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/config")
}

fn cases() -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(dir())
        .expect("tests/conformance/config exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a readable vector file");
        let doc: Value = serde_json::from_str(&text).expect("vector files are JSON");
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        for case in doc["cases"].as_array().expect("a cases list") {
            out.push((format!("{stem}: {}", case["name"].as_str().unwrap()), case.clone()));
        }
    }
    out
}

/// The option name of `snake` (a rules-file name) in `naming`.
fn name_in(naming: Naming, snake: &str) -> &'static str {
    let spec = OPTIONS.iter().find(|s| s.snake == snake).expect("a known option");
    naming.name_of(spec).expect("every language has it")
}

/// The options a language's runner passes for `case`, or None when the case
/// is not written for that language.
fn options_for(case: &Value, naming: Naming) -> Option<Value> {
    let mut options = match case.get("options") {
        Some(per_language) => per_language.get(naming.as_str())?.clone(),
        None => json!({}),
    };
    if let Some(rules) = case.get("rules") {
        options[name_in(naming, "rules")] = rules.clone();
    }
    // Rules files are named relative to the vector directory.
    let file = name_in(naming, "rules_file");
    if let Some(Value::String(path)) = options.get(file) {
        options[file] = Value::String(dir().join(path).to_string_lossy().into_owned());
    }
    Some(options)
}

/// `expected` is found in `actual`: objects by the keys `expected` lists, lists item by item.
fn contains(actual: &Value, expected: &Value, path: &str) -> Result<(), String> {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => {
            for (k, ev) in e {
                let av = a.get(k).ok_or_else(|| format!("{path}.{k} is missing in {actual}"))?;
                contains(av, ev, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(a), Value::Array(e)) if a.len() == e.len() => a
            .iter()
            .zip(e)
            .enumerate()
            .try_for_each(|(i, (av, ev))| contains(av, ev, &format!("{path}[{i}]"))),
        (a, e) if a == e => Ok(()),
        (a, e) => Err(format!("{path}: got {a}, expected {e}")),
    }
}

#[test]
fn configuration_vectors_resolve_alike_in_every_naming() {
    let cases = cases();
    assert!(cases.len() >= 30, "{} configuration vectors", cases.len());
    let mut failures = Vec::new();
    let mut runs = 0;
    for (name, case) in &cases {
        let env: HashMap<String, String> = case
            .get("env")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let lookup = |name: &str| env.get(name).cloned();
        for naming in Naming::ALL {
            let Some(options) = options_for(case, naming) else {
                continue;
            };
            runs += 1;
            let got = effective_config_with(naming, &options, &lookup);
            let expect = &case["expect"];
            let outcome = match (got, expect.get("config"), expect.get("error")) {
                (Ok(config), Some(want), None) => contains(&config, want, "config"),
                // `field` is one path, or one per naming where the names differ.
                (Err(Error::Config { field, .. }), None, Some(want))
                    if want["field"] == field.as_str() || want["field"][naming.as_str()] == field.as_str() =>
                {
                    Ok(())
                }
                (Err(e), None, Some(want)) => Err(format!("error {e:?}, expected one for field {}", want["field"])),
                (Ok(config), None, Some(want)) => {
                    Err(format!("built {config}, expected an error for {}", want["field"]))
                }
                (Err(e), Some(_), None) => Err(format!("error {e}")),
                _ => Err("a case expects a config or an error".into()),
            };
            if let Err(why) = outcome {
                failures.push(format!("{name} [{}]: {why}", naming.as_str()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The effective configuration is itself a rules document that resolves to itself.
#[test]
fn an_effective_configuration_loads_back_as_itself() {
    let options = json!({
        "policies": [{"name": "a", "rate": "5/s", "penalty": {"threshold": 2, "within": "1m", "cooldowns": ["10s"]}},
                     {"name": "b", "algorithm": "leaky_bucket", "mode": "shape", "rate": "1/s"}],
        "key": ["user"], "trusted_proxies": ["unix"], "headers": "ietf", "cooldown": "5s",
    });
    let first = effective_config_with(Naming::Snake, &options, &|_| None).unwrap();
    let again = effective_config_with(Naming::Snake, &json!({ "rules": first.clone() }), &|_| None).unwrap();
    assert_eq!(first, again);
}

/// Go hands over its `Options` struct marshalled as is: every field, zero
/// values included. A zero value is not a field the user wrote, so errors in
/// a rules document keep the document's names, and options beside it keep Go's.
#[test]
fn go_zero_values_do_not_rename_a_documents_fields() {
    let go = |rules: &str, extra: Value| {
        let mut options = json!({
            "Policy": null, "Policies": null, "KeyBy": null, "Rules": rules, "RulesFile": "",
            "Store": "", "Prefix": "", "MaxKeys": 0, "Timeout": 0, "ConnectTimeout": 0,
            "FailureThreshold": 0, "Cooldown": 0, "HalfOpenProbes": 0, "TrustedProxies": null,
            "ForwardedHeader": "", "IPv6Subnet": 0, "Headers": "", "Shadow": false,
            "Allowlist": null, "Denylist": null,
        });
        for (k, v) in extra.as_object().unwrap() {
            options[k] = v.clone();
        }
        match effective_config_with(Naming::Go, &options, &|_| None) {
            Err(Error::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        go("policies: { api: { rate: ten/s } }\n", json!({})),
        "policies.api.rate"
    );
    assert_eq!(
        go("store: postgres://x\npolicies: { api: { rate: 1/s } }\n", json!({})),
        "store"
    );
    assert_eq!(
        go("policies: { api: { rate: 1/s } }\n", json!({"Store": "postgres://x"})),
        "Store"
    );
    assert_eq!(
        go("", json!({"Policy": {"Rate": "1/s"}, "ForwardedHeader": "x-real-ip"})),
        "ForwardedHeader"
    );
}
