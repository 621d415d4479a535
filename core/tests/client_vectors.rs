//! tests/conformance/client/: the Retry-After rules of every language's
//! client helper, played against the core's `client` module that they call.

use std::path::PathBuf;
use std::time::Duration;

use polylimit::breaker::{BreakerConfig, BreakerInput, DurationInput};
use polylimit::client::{parse_retry_after, RetryInput, RetryOptions};
use polylimit::options::Naming;
use serde_json::Value;

fn vectors(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/conformance/client")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn retry_after_vectors() {
    let v = vectors("retry_after.json");
    let now = v["now_ms"].as_i64().unwrap();
    let mut failures = Vec::new();
    for c in v["parse"].as_array().unwrap() {
        let got = parse_retry_after(c["value"].as_str(), now);
        if got != c["wait_ms"].as_u64() {
            failures.push(format!("parse {}: got {got:?}, want {}", c["value"], c["wait_ms"]));
        }
    }
    for c in v["decide"].as_array().unwrap() {
        let o = &c["options"];
        let options = RetryOptions {
            max_retries: o["max_retries"].as_u64().unwrap() as u32,
            max_wait_ms: o["max_wait_ms"].as_u64().unwrap(),
            budget_ms: o["budget_ms"].as_u64().unwrap(),
            jitter: o["jitter"].as_f64().unwrap(),
            statuses: o["statuses"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_u64().unwrap() as u16)
                .collect(),
            retry_non_idempotent: o["retry_non_idempotent"].as_bool().unwrap_or(false),
        };
        options.validate().unwrap();
        let got = options.wait_since(
            c["method"].as_str().unwrap_or("GET"),
            c["status"].as_u64().unwrap() as u16,
            c["retry_after"].as_str(),
            c["retries"].as_u64().unwrap() as u32,
            now - c["elapsed_ms"].as_i64().unwrap(),
            now,
            c["random"].as_f64().unwrap(),
        );
        if got != c["wait_ms"].as_u64() {
            failures.push(format!("{}: got {got:?}, want {}", c["name"], c["wait_ms"]));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn retry_options_vectors() {
    let v = vectors("retry_options.json");
    let mut played = [0; 3];
    for c in v["invalid"].as_array().unwrap() {
        let naming = match c["naming"].as_str().unwrap() {
            "snake" => Naming::Snake,
            "camel" => Naming::Camel,
            "go" => Naming::Go,
            other => panic!("naming {other}"),
        };
        played[naming as usize] += 1;
        let o = &c["options"];
        let names: Vec<&str> = o.as_object().unwrap().keys().map(String::as_str).collect();
        let number = |i: usize| {
            let spellings = [
                ["max_retries", "maxRetries", "MaxRetries"],
                ["max_wait", "maxWaitMs", "MaxWait"],
                ["budget", "budgetMs", "Budget"],
                ["jitter", "jitter", "Jitter"],
                ["statuses", "statuses", "Statuses"],
            ];
            let name = spellings[i][naming as usize];
            assert!(
                names.iter().all(|n| spellings.iter().any(|s| s[naming as usize] == *n)),
                "{names:?}"
            );
            o.get(name)
        };
        let input = RetryInput {
            max_retries: number(0).map(|n| n.as_f64().unwrap()),
            max_wait: number(1).map(|n| n.as_f64().unwrap()),
            budget: number(2).map(|n| n.as_f64().unwrap()),
            jitter: number(3).map(|n| n.as_f64().unwrap()),
            statuses: number(4).map(|l| l.as_array().unwrap().iter().map(|s| s.as_i64().unwrap()).collect()),
            retry_non_idempotent: None,
        };
        let got = RetryOptions::from_naming(naming, &input).map_err(|e| e.to_string());
        assert_eq!(got.err().as_deref(), c["error"].as_str(), "{c}");
    }
    assert!(played.iter().all(|n| *n > 0), "{played:?}");
}

fn naming(c: &Value) -> Naming {
    match c["naming"].as_str().unwrap() {
        "snake" => Naming::Snake,
        "camel" => Naming::Camel,
        "go" => Naming::Go,
        other => panic!("naming {other}"),
    }
}

/// A breaker's options as the vector gives them, in `naming`'s spelling.
fn breaker_input(naming: Naming, o: &Value) -> BreakerInput {
    let half_open = if naming == Naming::Snake {
        "half_open_max"
    } else {
        "halfOpenMax"
    };
    for name in o.as_object().unwrap().keys() {
        assert!(
            ["threshold", "cooldown", half_open].contains(&name.as_str()),
            "{name} in {naming:?}"
        );
    }
    BreakerInput {
        threshold: o.get("threshold").map(|n| n.as_f64().unwrap()),
        cooldown: o.get("cooldown").map(|c| match c {
            Value::String(s) => DurationInput::Text(s.clone()),
            n => DurationInput::Number(n.as_f64().unwrap()),
        }),
        half_open_max: o.get(half_open).map(|n| n.as_f64().unwrap()),
    }
}

#[test]
fn breaker_options_vectors() {
    let v = vectors("breaker_options.json");
    let config = |c: &Value| BreakerConfig {
        threshold: c["threshold"].as_u64().unwrap() as u32,
        cooldown: Duration::from_millis(c["cooldown_ms"].as_u64().unwrap()),
        half_open_max: c["half_open_max"].as_u64().unwrap() as u32,
    };
    assert_eq!(config(&v["defaults"]), BreakerConfig::default());
    let mut played = [0; 3];
    for c in v["valid"].as_array().unwrap() {
        let naming = naming(c);
        played[naming as usize] += 1;
        let got = BreakerConfig::from_naming(naming, &breaker_input(naming, &c["options"]));
        assert_eq!(got.unwrap(), config(&c["config"]), "{c}");
    }
    for c in v["invalid"].as_array().unwrap() {
        let naming = naming(c);
        played[naming as usize] += 1;
        let got = BreakerConfig::from_naming(naming, &breaker_input(naming, &c["options"]));
        assert_eq!(got.err().map(|e| e.to_string()).as_deref(), c["error"].as_str(), "{c}");
    }
    assert!(played.iter().all(|n| *n > 1), "{played:?}");
}

#[test]
fn retry_defaults_vectors() {
    let v = vectors("retry_options.json");
    let spellings = [
        [
            "max_retries",
            "max_wait",
            "budget",
            "jitter",
            "statuses",
            "retry_non_idempotent",
        ],
        [
            "maxRetries",
            "maxWaitMs",
            "budgetMs",
            "jitter",
            "statuses",
            "retryNonIdempotent",
        ],
        [
            "MaxRetries",
            "MaxWait",
            "Budget",
            "Jitter",
            "Statuses",
            "RetryNonIdempotent",
        ],
    ];
    for naming in Naming::ALL {
        let d = RetryOptions::defaults_in(naming);
        let want = &v["defaults"][naming.as_str()];
        let names = spellings[naming as usize];
        assert_eq!(want.as_object().unwrap().len(), names.len(), "{naming:?}");
        let number = |name: &str| want[name].as_f64();
        assert_eq!(d.max_retries, number(names[0]), "{naming:?}");
        assert_eq!(d.max_wait, number(names[1]), "{naming:?}");
        assert_eq!(d.budget, number(names[2]), "{naming:?}");
        assert_eq!(d.jitter, number(names[3]), "{naming:?}");
        let statuses: Vec<i64> = want[names[4]]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_i64().unwrap())
            .collect();
        assert_eq!(d.statuses, Some(statuses), "{naming:?}");
        assert_eq!(d.retry_non_idempotent, want[names[5]].as_bool(), "{naming:?}");
        assert_eq!(RetryOptions::from_naming(naming, &d).unwrap(), RetryOptions::default());
    }
}
