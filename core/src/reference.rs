//! The rules file reference page of the documentation site
//! (`docs/reference/options.md`), generated from the lists the core builds
//! limiters from: [`OPTIONS`], the policy field lists and the scalar types of
//! `crate::env::SCHEMA`. Each field's error is the one the core gives when
//! that field holds a bad value, so the page cannot drift from the parsers;
//! `core/tests/docs_reference.rs` fails when the checked-in page is stale.

use serde_json::{json, Value};

use crate::config::effective_config_with;
use crate::env::{scalar_type, Scalar};
use crate::options::{Kind, Naming, ADAPTIVE_FIELDS, OPTIONS, PENALTY_FIELDS, POLICY_FIELDS, SYNC_FIELDS};

/// A list of policy fields: (snake, camel, go, is a duration).
type Fields = &'static [(&'static str, &'static str, &'static str, bool)];

/// Values tried in turn until the core refuses one: the page shows that error.
fn bad_values() -> [Value; 4] {
    [
        json!("not-a-value"),
        json!(-1),
        json!(["not-a-value"]),
        json!({ "not": "a value" }),
    ]
}

/// The core's error for a bad value of the field named `name`: each bad value
/// goes into each document `place` builds from it (`None`: no policy; then a
/// plain policy, a shaping leaky bucket, a concurrency limit), and the first
/// error that names the field wins, else the first that is not about another
/// field or algorithm. `None` when every value is taken.
fn first_error(naming: Naming, name: &str, place: impl Fn(Option<Value>, Value) -> Value) -> Option<String> {
    let bases = [
        None,
        Some(json!({ "rate": "10/s" })),
        Some(json!({ "algorithm": "leaky_bucket", "mode": "shape", "rate": "10/s" })),
        Some(json!({ "algorithm": "concurrency", "limit": 5 })),
    ];
    let errors: Vec<String> = bad_values()
        .iter()
        .flat_map(|bad| bases.iter().map(move |base| (base.clone(), bad.clone())))
        .filter_map(|(base, bad)| effective_config_with(naming, &place(base, bad), &|_| None).err())
        .map(|e| e.to_string())
        .collect();
    let about_the_value = |e: &&String| !e.contains("applies only to") && !e.contains("cannot be given together");
    let named = |e: &&String| e.starts_with(&format!("{name}:")) || e.starts_with(&format!("{name}["));
    errors
        .iter()
        .filter(about_the_value)
        .find(named)
        .or_else(|| errors.iter().find(about_the_value))
        .cloned()
}

/// A field's type: durations and policies by their kind, numbers and
/// booleans by the schema; otherwise an object for the nested policy fields,
/// and what the default spells (a number, a boolean, a list), else text.
fn type_of(path: &[&str], duration: bool, default: &str) -> &'static str {
    let at: Vec<Option<String>> = path.iter().map(|p| Some((*p).to_string())).collect();
    match (duration, scalar_type(&at)) {
        (true, _) if path.last() == Some(&"cooldowns") => "list of durations",
        (true, _) => "duration",
        (_, Some(Scalar::Number)) => "number",
        (_, Some(Scalar::Bool)) => "boolean",
        (_, Some(Scalar::BoolOrNumber)) => "boolean or number",
        (_, Some(Scalar::BoolOrText)) => "boolean or text",
        _ if matches!(path, ["policies", "*", "penalty" | "sync"]) => "object",
        _ if default.parse::<f64>().is_ok() => "number",
        _ if default == "true" || default == "false" => "boolean",
        _ if default.starts_with('[') => "list",
        _ => "text",
    }
}

fn code(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!("`{text}`")
    }
}

/// Table cells hold no newline and no bare `|`.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

fn error_cell(error: Option<String>) -> String {
    error
        .map(|e| format!("`{}`", cell(&e).replace('`', "'")))
        .unwrap_or_else(|| "—".into())
}

/// The whole page, Markdown.
pub fn reference_page() -> String {
    let mut out = String::from(
        "# Every option and field\n\n\
         <!-- generated from core/src/options.rs by `cargo run -p polylimit --example options_table -- reference`; \
         core/tests/docs_reference.rs fails when this page is stale -->\n\n\
         Generated from the lists the core builds every limiter from, so it cannot drift from them. \
         The rules file and Python use the first name, JavaScript the second (snake_case is accepted too), \
         Go the `Options` field. A duration is text (`\"250ms\"`, `\"1m30s\"`), or a bare number: seconds in \
         Python, milliseconds in JavaScript, a `time.Duration` in Go. The error column is what the core \
         answers when the field holds a bad value (the first of `\"not-a-value\"`, `-1`, `[\"not-a-value\"]`, \
         `{not: a value}` it refuses), raised when the limiter is built; every binding raises it as its \
         `ConfigError`. Meanings in more words: [Rules file](rules-file.md).\n\n\
         ## Limiter options\n\n\
         Constructor arguments, or top-level fields of a rules file.\n\n\
         | rules file, Python | JavaScript | Go | type | default | meaning | error for a bad value |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for spec in OPTIONS {
        let names = Naming::ALL.map(|n| code(n.name_of(spec).unwrap_or("")));
        let kind = match spec.kind {
            Kind::Duration => "duration",
            Kind::Policy => "policy",
            Kind::Policies => "policies",
            Kind::Plain => type_of(&[spec.snake], false, spec.default),
        };
        // express-rate-limit's names exist in JavaScript only: those are tried in its naming.
        let (naming, name) = if spec.snake.is_empty() {
            (Naming::Camel, spec.camel)
        } else {
            (Naming::Snake, spec.snake)
        };
        let error = first_error(naming, name, |policy, bad| {
            let mut doc = json!({});
            if let Some(policy) = policy {
                doc["policy"] = policy;
            }
            doc[name] = bad;
            doc
        });
        out.push_str(&format!(
            "| {} | {} | {} | {kind} | {} | {} | {} |\n",
            names[0],
            names[1],
            names[2],
            code(spec.default),
            cell(spec.doc),
            error_cell(error)
        ));
    }
    let nested: [(&str, &str, Fields, Value); 4] = [
        ("Policy fields", "policies.*", POLICY_FIELDS, json!({})),
        (
            "Penalty fields (`penalty` of a policy)",
            "policies.*.penalty",
            PENALTY_FIELDS,
            json!({ "threshold": 3, "within": "1m", "cooldowns": ["10s"] }),
        ),
        (
            "Sync fields (`sync` of a policy)",
            "policies.*.sync",
            SYNC_FIELDS,
            json!({}),
        ),
        (
            "Adaptive fields (`adaptive` of a policy)",
            "policies.*.adaptive",
            ADAPTIVE_FIELDS,
            json!({}),
        ),
    ];
    for (title, path, fields, base) in nested {
        out.push_str(&format!(
            "\n## {title}\n\nDefaults and meanings: [Policies](../features/policies.md).\n\n\
             | rules file, Python | JavaScript | Go | type | error for a bad value |\n|---|---|---|---|---|\n"
        ));
        for &(snake, camel, go, duration) in fields {
            let segments: Vec<&str> = path.split('.').chain([snake]).collect();
            let name = format!("{}.{snake}", path.replace('*', "api"));
            let error = first_error(Naming::Snake, &name, |policy, bad| {
                let mut policy = policy.unwrap_or_else(|| json!({ "rate": "10/s" }));
                if path == "policies.*" {
                    policy[snake] = bad;
                } else {
                    let mut inner = base.clone();
                    inner[snake] = bad;
                    policy[path.rsplit('.').next().unwrap_or_default()] = inner;
                }
                json!({ "policies": { "api": policy } })
            });
            out.push_str(&format!(
                "| `{snake}` | `{camel}` | `{go}` | {} | {} |\n",
                type_of(&segments, duration, ""),
                error_cell(error)
            ));
        }
    }
    out
}
