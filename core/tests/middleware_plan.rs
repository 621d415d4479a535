//! The middleware plan vectors (`tests/conformance/middleware/`): how a
//! middleware reads its options object, decided by the core for every
//! middleware that takes one (`bindings-node/test/middleware_plan.test.js`
//! plays the same files through the addon).

mod support;

use polylimit::options::middleware::{middleware_plan, Given};
use polylimit::Naming;
use serde_json::Value;

/// A vector's field as the plan sees it: `"<function>"` stands for a function.
fn given(value: &Value) -> Given {
    match value {
        Value::String(s) if s == "<function>" => Given::Function,
        Value::String(_) => Given::Text,
        _ => Given::Other,
    }
}

#[test]
fn middleware_plan_vectors() {
    let mut played = 0;
    for (file, doc) in support::vector_files::<Value>("middleware") {
        for case in doc["cases"].as_array().expect("a cases list") {
            let name = format!("{file}: {}", case["name"].as_str().expect("a name"));
            let options = case["options"].as_object().expect("options");
            let fields: Vec<(&str, Given)> = options.iter().map(|(k, v)| (k.as_str(), given(v))).collect();
            let plan = middleware_plan(Naming::Camel, &fields, case["enclosing"].as_bool().expect("enclosing"));
            let expect = &case["expect"];
            assert_eq!(plan.check.as_str(), expect["check"], "{name}: check");
            let mut got = plan.limiter_fields.clone();
            got.sort();
            let mut want: Vec<String> = serde_json::from_value(expect["limiter_fields"].clone()).expect("a list");
            want.sort();
            assert_eq!(got, want, "{name}: limiter_fields");
            assert_eq!(plan.key_function, expect["key_function"], "{name}: key_function");
            let want: Vec<String> = serde_json::from_value(expect["replaces"].clone()).expect("a list");
            assert_eq!(plan.replaces, want, "{name}: replaces");
            played += 1;
        }
    }
    assert!(played > 0, "no middleware plan vectors");
}
