//! The options a limiter is built from, under the names each language gives
//! them: one list, read by the core when a binding hands its options over and
//! by the tests that keep the bindings' READMEs in step with it, and by the
//! documentation site's reference page (`crate::reference`).
//!
//! A binding passes its options object as the user wrote it (Python keyword
//! arguments, a JS object, a Go `Options` struct marshalled as-is) together
//! with its [`Naming`]; [`canonical`] turns it into the rules-file form.

use serde_json::{Map, Value};

use crate::error::{Error, Result};

pub mod middleware;

/// How a language spells option names and reads bare numbers as durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Naming {
    /// Rust and Python: `snake_case`; a number of seconds is a duration
    /// (`timeout=0.1`, as asyncio and redis-py take it).
    Snake,
    /// JavaScript: `camelCase` (snake_case accepted too); a number of
    /// milliseconds is a duration (`timeout: 100`, like `windowMs`).
    Camel,
    /// Go: exported field names (`TrustedProxies`); a number is a
    /// `time.Duration` in nanoseconds; zero values (`""`, `0`, `false`,
    /// `nil`) mean "not set", as Go users expect of an options struct.
    Go,
}

impl Naming {
    /// Every naming, for tests and generated tables.
    pub const ALL: [Naming; 3] = [Naming::Snake, Naming::Camel, Naming::Go];

    /// `snake`, `camel`, `go`: the name conformance vectors use.
    pub fn as_str(self) -> &'static str {
        match self {
            Naming::Snake => "snake",
            Naming::Camel => "camel",
            Naming::Go => "go",
        }
    }

    /// The spelling of `spec` in this naming, if the language has it.
    pub fn name_of(self, spec: &OptionSpec) -> Option<&'static str> {
        let name = match self {
            Naming::Snake => spec.snake,
            Naming::Camel => spec.camel,
            Naming::Go => spec.go,
        };
        (!name.is_empty()).then_some(name)
    }
}

/// What kind of value an option holds, for the per-language conversions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A duration: `"250ms"`, `"1m30s"`, or a bare number in the naming's unit.
    Duration,
    /// A policy object (its fields follow the naming too).
    Policy,
    /// A list or map of policy objects.
    Policies,
    /// Anything else, passed through as given.
    Plain,
}

/// One option: its name in each language, its kind, its default and what it does.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The rules-file and Python name; empty when only another language has it.
    pub snake: &'static str,
    /// The JavaScript name; empty when JavaScript does not have it.
    pub camel: &'static str,
    /// The Go `Options` field; empty when Go does not have it.
    pub go: &'static str,
    /// How values are converted.
    pub kind: Kind,
    /// The default, as the README tables show it.
    pub default: &'static str,
    /// One line for the README tables.
    pub doc: &'static str,
}

const fn spec(
    snake: &'static str,
    camel: &'static str,
    go: &'static str,
    kind: Kind,
    default: &'static str,
    doc: &'static str,
) -> OptionSpec {
    OptionSpec {
        snake,
        camel,
        go,
        kind,
        default,
        doc,
    }
}

/// Every limiter option, in the order the README tables list them.
pub const OPTIONS: &[OptionSpec] = &[
    spec("policy", "policy", "Policy", Kind::Policy, "", "the policy (SPEC §2)"),
    spec("policies", "policies", "Policies", Kind::Policies, "", "several policies, each named, decided atomically: none is charged when one denies"),
    spec("key", "key", "KeyBy", Kind::Plain, "[\"ip\"]", "key dimensions of the one rule built from `policy`: ip, route, method, user, api_key, header:<name>, key, global (`key` is a middleware's key function: it needs a rule reading it)"),
    spec("count", "count", "Count", Kind::Plain, "all", "which responses the one rule built from `policy` charges: all, failed (status >= 400 or no response), successful (< 400), or a list of classes and codes ([\"4xx\", 503]); settled after the response"),
    spec("rules", "rules", "Rules", Kind::Plain, "", "a rules document (YAML/JSON text; in Python and JavaScript a map too); the other options override its fields"),
    spec("rules_file", "rulesFile", "RulesFile", Kind::Plain, "", "the path of a rules file (YAML or JSON)"),
    spec("watch", "watch", "Watch", Kind::Duration, "false", "with `rules_file` (or in the rules file itself): reload the file when it changes (polled: true every 1s, or a duration); a bad file keeps the old rules"),
    spec("store", "store", "Store", Kind::Plain, "memory", "memory, redis://…, rediss://…, redis+cluster://h1:p1,h2:p2, redis+sentinel://s1:p1/<service>"),
    spec("regions", "regions", "Regions", Kind::Plain, "", "multi-region quotas: region name → store URL or { store, share } (equal shares by default); each region's store holds its share of every policy, a region out of quota borrows from another"),
    spec("region", "region", "Region", Kind::Plain, "", "this process's region, one of `regions` (its store is the limiter's store)"),
    spec("prefix", "prefix", "Prefix", Kind::Plain, "polylimit", "first segment of every store key"),
    spec("max_keys", "maxKeys", "MaxKeys", Kind::Plain, "1000000", "most keys the memory store (and the local fallback) holds"),
    spec("overrides", "overrides", "Overrides", Kind::Plain, "false", "every check reads the key's per-key override (set_override); off, no check pays for looking one up"),
    spec("block_cache", "blockCache", "BlockCache", Kind::Plain, "false", "Redis: deny a key the store denied locally until its retry time, with no store call; true (10000 keys) or the most keys held"),
    spec("anomaly_log", "anomalyLog", "AnomalyLog", Kind::Plain, "true", "adaptive policies' alerts also write one JSON line each to stderr: true or \"stderr\", false or \"off\" (Go: \"off\")"),
    spec("timeout", "timeout", "Timeout", Kind::Duration, "100ms", "longest wait of one check for the store"),
    spec("connect_timeout", "connectTimeout", "ConnectTimeout", Kind::Duration, "1s", "deadline of opening a store connection"),
    spec("tls_ca", "tlsCa", "TLSCA", Kind::Plain, "", "PEM file of the CA signing the Redis servers' certificates (rediss…); without it, the public web CAs"),
    spec("failure_threshold", "failureThreshold", "FailureThreshold", Kind::Plain, "5", "consecutive store failures that open the breaker"),
    spec("cooldown", "cooldown", "Cooldown", Kind::Duration, "30s", "time the breaker stays open before probing"),
    spec("half_open_probes", "halfOpenProbes", "HalfOpenProbes", Kind::Plain, "3", "good probes that close the breaker"),
    spec("trusted_proxies", "trustedProxies", "TrustedProxies", Kind::Plain, "[]", "CIDRs (and `unix`) whose forwarded header is believed"),
    spec("forwarded_header", "forwardedHeader", "ForwardedHeader", Kind::Plain, "x-forwarded-for", "the one header read from a trusted proxy: x-forwarded-for or forwarded"),
    spec("ipv6_subnet", "ipv6Subnet", "IPv6Subnet", Kind::Plain, "64", "prefix length IPv6 clients are keyed by"),
    spec("headers", "headers", "Headers", Kind::Plain, "both", "rate-limit headers: legacy, ietf, both, none, draft-6, draft-7, draft-8 (express-rate-limit's), or legacy with one of them as a list or `legacy,draft-7`"),
    spec("shadow", "shadow", "Shadow", Kind::Plain, "false", "decide, count and set headers, never block"),
    spec("allowlist", "allowlist", "Allowlist", Kind::Plain, "[]", "CIDRs and typed keys (user:…, api_key:…, key:…) never limited"),
    spec("denylist", "denylist", "Denylist", Kind::Plain, "[]", "CIDRs and typed keys always refused"),
    // Middleware shorthand: set by a middleware, not written in a rules file.
    spec("key_function", "keyFunction", "", Kind::Plain, "false", "set by a middleware given a key function (Python `key=callable`, JavaScript `keyGenerator`): `key` defaults to `[\"key\"]`, and some rule must read `key`"),
    spec("route", "route", "", Kind::Plain, "", "set by a route's own limiter (a Fastify route's inline `config.rateLimit`): its store keys go under `<prefix>:route:<route>`; beside a rules document, its `policy` replaces the document's policies and rules"),
    // express-rate-limit's names, so its users keep their options.
    spec("", "windowMs", "", Kind::Plain, "60000", "express-rate-limit form: a fixed window of this many ms (with `limit`)"),
    spec("", "limit", "", Kind::Plain, "5", "express-rate-limit form: requests per window (alias `max`)"),
    spec("", "max", "", Kind::Plain, "", "alias of `limit`"),
    spec("", "standardHeaders", "", Kind::Plain, "true", "express-rate-limit form: the IETF headers on or off, or `draft-6`/`draft-7`/`draft-8` for exactly its headers"),
    spec("", "legacyHeaders", "", Kind::Plain, "true", "express-rate-limit form: the X-RateLimit-* headers on or off"),
];

/// Fields of a policy: (snake, camel, Go, is a duration).
pub(crate) const POLICY_FIELDS: &[(&str, &str, &str, bool)] = &[
    ("algorithm", "algorithm", "Algorithm", false),
    ("rate", "rate", "Rate", false),
    ("burst", "burst", "Burst", false),
    ("capacity", "capacity", "Capacity", false),
    ("refill", "refill", "Refill", false),
    ("mode", "mode", "Mode", false),
    ("max_delay", "maxDelay", "MaxDelay", true),
    ("on_store_error", "onStoreError", "OnStoreError", false),
    ("penalty", "penalty", "Penalty", false),
    ("name", "name", "Name", false),
    ("limit", "limit", "Limit", false),
    ("lease", "lease", "Lease", true),
    ("sync", "sync", "Sync", false),
    ("adaptive", "adaptive", "Adaptive", false),
];

/// Fields of a policy's `sync`: (snake, camel, Go, is a duration).
pub(crate) const SYNC_FIELDS: &[(&str, &str, &str, bool)] = &[
    ("interval", "interval", "Interval", true),
    ("share", "share", "Share", false),
];

/// Fields of an adaptive object: (snake, camel, Go, is a duration).
pub(crate) const ADAPTIVE_FIELDS: &[(&str, &str, &str, bool)] = &[
    ("window", "window", "Window", true),
    ("horizon", "horizon", "Horizon", true),
    ("factor", "factor", "Factor", false),
    ("floor", "floor", "Floor", false),
    ("min_rate", "minRate", "MinRate", false),
    ("alert_keys", "alertKeys", "AlertKeys", false),
];

/// Fields of a penalty: (snake, camel, Go, is a duration).
pub(crate) const PENALTY_FIELDS: &[(&str, &str, &str, bool)] = &[
    ("threshold", "threshold", "Threshold", false),
    ("within", "within", "Within", true),
    ("cooldowns", "cooldowns", "Cooldowns", true),
    ("forget_after", "forgetAfter", "ForgetAfter", true),
];

/// The options of `value` (an object in `naming`) under their rules-file
/// names, durations as `"<n>ms"`, Go zero values dropped, and the
/// express-rate-limit form (JavaScript) turned into a policy and a header mode.
/// A name the language does not have is an error naming it, as written.
pub fn canonical(naming: Naming, value: &Value) -> Result<Map<String, Value>> {
    let obj = value
        .as_object()
        .ok_or_else(|| Error::config("options", value, "is not an object"))?;
    let mut out = Map::new();
    let mut express = Map::new();
    for (name, v) in obj {
        if naming == Naming::Go && is_zero(v) {
            continue;
        }
        let spec = find(naming, name).ok_or_else(|| {
            let names: Vec<&str> = OPTIONS.iter().filter_map(|s| naming.name_of(s)).collect();
            Error::config(
                name.as_str(),
                "",
                format!("is not a limiter option (expected one of {})", names.join(", ")),
            )
        })?;
        if spec.snake.is_empty() {
            express.insert(name.clone(), v.clone());
            continue;
        }
        let converted = match spec.kind {
            Kind::Duration => duration(naming, v, spec.snake)?,
            Kind::Policy => fields(naming, v, spec.snake, POLICY_FIELDS)?,
            Kind::Policies => policies(naming, v, spec.snake)?,
            Kind::Plain => v.clone(),
        };
        if out.insert(spec.snake.to_string(), converted).is_some() {
            return Err(Error::config(
                spec.snake,
                "",
                format!(
                    "is given twice (as {} and {})",
                    spec.snake,
                    naming.name_of(spec).unwrap_or("")
                ),
            ));
        }
    }
    if !express.is_empty() {
        express_form(&express, &mut out)?;
    }
    Ok(out)
}

fn find(naming: Naming, name: &str) -> Option<&'static OptionSpec> {
    OPTIONS.iter().find(|s| {
        naming.name_of(s) == Some(name) || (naming == Naming::Camel && !s.snake.is_empty() && s.snake == name)
    })
}

/// Go's zero values: an unset field of an options struct.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(_) => false,
    }
}

/// A duration in the rules-file form: text as given, a number in the naming's unit.
pub(crate) fn duration(naming: Naming, v: &Value, field: &str) -> Result<Value> {
    let Value::Number(n) = v else {
        return Ok(v.clone());
    };
    let (per_ms, unit) = match naming {
        Naming::Snake => (0.001, "seconds"),
        Naming::Camel => (1.0, "milliseconds"),
        Naming::Go => (1_000_000.0, "nanoseconds (time.Duration)"),
    };
    let ms = n.as_f64().map(|x| x / per_ms);
    match ms {
        // Whole milliseconds only: the core counts in ms and never rounds a limit.
        Some(ms) if ms >= 0.0 && ms.fract().abs() < 1e-9 && ms < 1e15 => {
            Ok(Value::String(format!("{}ms", ms.round() as u64)))
        }
        _ => Err(Error::config(
            field,
            v,
            format!("is not a duration: a string like \"250ms\" or a whole number of milliseconds in {unit}"),
        )),
    }
}

/// A policy or penalty object with its fields renamed to the rules-file names.
fn fields(naming: Naming, v: &Value, path: &str, table: &[(&str, &str, &str, bool)]) -> Result<Value> {
    let Value::Object(obj) = v else {
        return Ok(v.clone());
    };
    let mut out = Map::new();
    for (name, item) in obj {
        if naming == Naming::Go && is_zero(item) {
            continue;
        }
        let entry = table.iter().find(|(snake, camel, go, _)| match naming {
            Naming::Snake => name == snake,
            Naming::Camel => name == camel || name == snake,
            Naming::Go => name == go,
        });
        // Unknown fields pass under their own name: the policy parser names them.
        let Some(&(snake, _, _, is_duration)) = entry else {
            out.insert(name.clone(), item.clone());
            continue;
        };
        let at = format!("{path}.{snake}");
        let converted = if snake == "penalty" {
            fields(naming, item, &at, PENALTY_FIELDS)?
        } else if snake == "sync" {
            fields(naming, item, &at, SYNC_FIELDS)?
        } else if snake == "adaptive" {
            fields(naming, item, &at, ADAPTIVE_FIELDS)?
        } else if is_duration {
            match item {
                Value::Array(list) => Value::Array(
                    list.iter()
                        .enumerate()
                        .map(|(i, d)| duration(naming, d, &format!("{at}[{i}]")))
                        .collect::<Result<_>>()?,
                ),
                other => duration(naming, other, &at)?,
            }
        } else {
            item.clone()
        };
        if out.insert(snake.to_string(), converted).is_some() {
            return Err(Error::config(at, "", "is given twice"));
        }
    }
    Ok(Value::Object(out))
}

fn policies(naming: Naming, v: &Value, field: &str) -> Result<Value> {
    Ok(match v {
        Value::Array(list) => Value::Array(
            list.iter()
                .enumerate()
                .map(|(i, p)| fields(naming, p, &format!("{field}[{i}]"), POLICY_FIELDS))
                .collect::<Result<_>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(name, p)| {
                    Ok((
                        name.clone(),
                        fields(naming, p, &format!("{field}.{name}"), POLICY_FIELDS)?,
                    ))
                })
                .collect::<Result<_>>()?,
        ),
        other => other.clone(),
    })
}

/// express-rate-limit's `windowMs` + `limit` (or `max`) as a fixed-window
/// policy, and `standardHeaders`/`legacyHeaders` as the header mode.
fn express_form(express: &Map<String, Value>, out: &mut Map<String, Value>) -> Result<()> {
    let get = |name: &str| express.get(name).filter(|v| !v.is_null());
    if get("limit").is_some() && get("max").is_some() {
        return Err(Error::config("max", "", "is an alias of limit; give only one"));
    }
    let limit = get("limit").or_else(|| get("max"));
    let window = get("windowMs");
    if limit.is_some() || window.is_some() {
        if out.contains_key("policy") || out.contains_key("policies") {
            return Err(Error::config(
                if window.is_some() { "windowMs" } else { "limit" },
                "",
                "cannot be given together with policy",
            ));
        }
        let limit = match limit {
            None => 5,
            Some(v) => v.as_u64().filter(|n| *n > 0).ok_or_else(|| {
                Error::config(
                    if get("limit").is_some() { "limit" } else { "max" },
                    v,
                    "is not a positive integer",
                )
            })?,
        };
        let window_ms = match window {
            None => 60_000,
            Some(v) => v
                .as_u64()
                .filter(|n| *n > 0)
                .ok_or_else(|| Error::config("windowMs", v, "is not a positive whole number of milliseconds"))?,
        };
        let mut policy = Map::new();
        policy.insert("algorithm".into(), "fixed_window".into());
        policy.insert("rate".into(), format!("{limit}/{window_ms}ms").into());
        out.insert("policy".into(), Value::Object(policy));
    }
    // express-rate-limit's draft names select that draft's exact headers.
    let mut draft = None;
    let flag = |name: &str| -> Result<Option<bool>> {
        get(name)
            .map(|v| match v {
                Value::Bool(b) => Ok(*b),
                other => Err(Error::config(name, other, "is not true or false")),
            })
            .transpose()
    };
    let ietf = match get("standardHeaders") {
        Some(Value::String(s)) if matches!(s.as_str(), "draft-6" | "draft-7" | "draft-8") => {
            draft = Some(s.clone());
            Some(true)
        }
        Some(Value::String(s)) => {
            return Err(Error::config(
                "standardHeaders",
                s.as_str(),
                "is not true, false, draft-6, draft-7 or draft-8",
            ))
        }
        _ => flag("standardHeaders")?,
    };
    let legacy = flag("legacyHeaders")?;
    if ietf.is_some() || legacy.is_some() {
        if out.contains_key("headers") {
            return Err(Error::config(
                if ietf.is_some() {
                    "standardHeaders"
                } else {
                    "legacyHeaders"
                },
                "",
                "cannot be given together with headers",
            ));
        }
        let legacy = legacy.unwrap_or(true);
        let mode: Value = match (draft, ietf.unwrap_or(true), legacy) {
            (Some(d), _, true) => serde_json::json!(["legacy", d]),
            (Some(d), _, false) => d.into(),
            (None, true, true) => "both".into(),
            (None, true, false) => "ietf".into(),
            (None, false, true) => "legacy".into(),
            (None, false, false) => "none".into(),
        };
        out.insert("headers".into(), mode);
    }
    Ok(())
}

/// `field` (a rules-file path such as `policy.penalty.within` or
/// `policies[0].name`) as the user wrote it in `options`, so a Go user reads
/// `Policy.Penalty.Within` and a JavaScript user `maxKeys`. A segment the
/// user spelled the rules-file way stays so; with a rules document, only the
/// options given beside it are renamed (the document's paths are its own).
pub(crate) fn field_as_written(naming: Naming, options: &Value, field: &str) -> String {
    if naming == Naming::Snake {
        return field.to_string();
    }
    // Written: present, and for Go not a zero value (a struct marshalled as
    // is lists every field, set or not).
    let written_in = |node: Option<&Value>, key: &str| {
        node.and_then(|n| n.get(key))
            .is_some_and(|v| naming != Naming::Go || !is_zero(v))
    };
    let with_document = ["rules", "rules_file"]
        .iter()
        .filter_map(|snake| Table::Options.spell(naming, snake))
        .any(|name| written_in(Some(options), name));
    let mut node = Some(options);
    let mut table = Table::Options;
    let mut out = Vec::new();
    for segment in field.split('.') {
        let (name, index) = segment.split_at(segment.find('[').unwrap_or(segment.len()));
        let obj = node.filter(|n| n.is_object());
        let written = match table.spell(naming, name) {
            _ if written_in(obj, name) => name,
            // A document's `rules` is its rule list, not the option holding the document.
            _ if with_document && name == "rules" => name,
            Some(spelled) if !with_document || written_in(obj, spelled) => spelled,
            _ => name,
        };
        out.push(format!("{written}{index}"));
        node = node.and_then(|n| n.get(written));
        // `[i]` steps into a list item; a policies map steps into a policy by its name.
        for i in index.split(['[', ']']).filter(|s| !s.is_empty()) {
            node = node.and_then(|n| n.get(i.parse::<usize>().ok()?));
        }
        table = match (table, name) {
            (Table::Options, "policy") => Table::Policy,
            (Table::Options, "policies") if !index.is_empty() => Table::Policy,
            (Table::Options, "policies") => Table::PolicyName,
            (Table::PolicyName, _) => Table::Policy,
            (Table::Policy, "penalty") => Table::Penalty,
            (Table::Policy, "sync") => Table::Sync,
            (Table::Policy, "adaptive") => Table::Adaptive,
            _ => Table::None,
        };
    }
    out.join(".")
}

/// Which names the next segment of a field path is spelled from.
#[derive(Clone, Copy)]
enum Table {
    Options,
    Policy,
    /// A key of a `policies` map: a name, not a field.
    PolicyName,
    Penalty,
    Sync,
    Adaptive,
    None,
}

impl Table {
    fn spell(self, naming: Naming, snake: &str) -> Option<&'static str> {
        let pick = |&(s, c, g, _): &(&'static str, &'static str, &'static str, bool)| {
            (s == snake).then_some(if naming == Naming::Go { g } else { c })
        };
        match self {
            Table::Options => OPTIONS
                .iter()
                .find(|s| s.snake == snake)
                .and_then(|s| naming.name_of(s)),
            Table::Policy => POLICY_FIELDS.iter().find_map(pick),
            Table::Penalty => PENALTY_FIELDS.iter().find_map(pick),
            Table::Sync => SYNC_FIELDS.iter().find_map(pick),
            Table::Adaptive => ADAPTIVE_FIELDS.iter().find_map(pick),
            Table::PolicyName | Table::None => None,
        }
    }
}

/// The options table of a binding's README, in `naming`: option, default, meaning.
/// `core/tests/readme_options.rs` keeps each README's copy identical.
pub fn markdown_table(naming: Naming) -> String {
    let mut out = String::from("| option | default | meaning |\n|---|---|---|\n");
    for spec in OPTIONS {
        if let Some(name) = naming.name_of(spec) {
            let default = if spec.default.is_empty() { "" } else { spec.default };
            let default = if default.is_empty() {
                String::new()
            } else {
                format!("`{default}`")
            };
            out.push_str(&format!("| `{name}` | {default} | {} |\n", spec.doc));
        }
    }
    let durations = match naming {
        Naming::Snake => "Durations are text (`\"250ms\"`, `\"1m30s\"`) or a number of seconds (`timeout=0.25`)",
        Naming::Camel => "Durations are text (`'250ms'`, `'1m30s'`) or a number of milliseconds (`timeout: 250`)",
        Naming::Go => "Durations are `time.Duration` values",
    };
    out.push_str(&format!(
        "\n{durations}, in whole milliseconds; a rules document's `${{NAME:-default}}` is expanded from the environment.\n"
    ));
    out
}
