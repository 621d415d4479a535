//! Plays every HTTP vector in `$POLYLIMIT_VECTORS/http` (default
//! `tests/conformance/http`), every gRPC call in `…/grpc`, every cost
//! reconciliation in `…/cost` and every policy-wide limit in `…/limits`,
//! through `check_request`, on the memory store and on a real Redis: exact
//! status, rate-limit headers, trailers, body and delay.

mod support;

use std::time::Duration;

use polylimit::{CompleteOptions, Limiter, OverrideSpec, RequestInfo};
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    rules: Value,
    requests: Vec<Step>,
}

/// A request and its expected answer, or the completion of an earlier
/// request (`of`: its index) with a response status.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    #[serde(default)]
    request: Option<Value>,
    /// A peek: the answer `check_request` would give, with nothing charged.
    #[serde(default)]
    peek: bool,
    #[serde(default)]
    expect: Option<Expect>,
    /// After this request (or request `of`): complete it with this status
    /// (`null`: no response). Absent: not completed here.
    #[serde(default, deserialize_with = "present")]
    complete: Option<Option<u16>>,
    #[serde(default)]
    of: Option<usize>,
    /// The actual cost reported at that completion (`cost/`): `complete_with`.
    #[serde(default)]
    actual_cost: Option<u64>,
    /// The completion's clock (a forced debit's time); default: the
    /// request's `now_ms` (required with `of` and `actual_cost`).
    #[serde(default)]
    at_ms: Option<i64>,
    /// `limits/`: a step that sets a policy-wide limit (no request).
    #[serde(default)]
    set_limit: Option<LimitStep>,
    /// `limits/`: a step that reads the policy-wide limit in force.
    #[serde(default)]
    get_limit: Option<LimitStep>,
    /// `limits/`: a step that removes a policy-wide limit.
    #[serde(default)]
    remove_limit: Option<LimitStep>,
    /// `limits/`: a step that sets a per-key override (`key` names the key
    /// the rule composes).
    #[serde(default)]
    set_override: Option<LimitStep>,
    /// The override `set_override` returned.
    #[serde(default)]
    expect_override: Option<Value>,
    /// The limit `set_limit` returned or `get_limit` found (`null`: none).
    #[serde(default, deserialize_with = "present_value")]
    expect_limit: Option<Value>,
    /// Whether `remove_limit` found a limit in force.
    #[serde(default)]
    expect_removed: Option<bool>,
}

/// The arguments of a `limits/` step: `set_limit(policy, rate, burst, ttl)`
/// at `now_ms`, `get_limit(policy)`, `remove_limit(policy)`,
/// `set_override(key, policy, rate, burst, ttl)` at `now_ms`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitStep {
    /// `set_override` only: the key.
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default)]
    rate: Option<String>,
    #[serde(default)]
    burst: Option<u64>,
    #[serde(default)]
    ttl_ms: Option<u64>,
    #[serde(default)]
    now_ms: Option<i64>,
}

impl Step {
    /// Plays this step when it is a `limits/` one: `None` when it is not,
    /// else what it returned against what it expects.
    async fn limit(&self, limiter: &Limiter) -> Option<Result<(), String>> {
        let kinds = [
            self.set_limit.is_some(),
            self.get_limit.is_some(),
            self.remove_limit.is_some(),
            self.set_override.is_some(),
        ];
        let kinds = kinds.iter().filter(|k| **k).count();
        if kinds == 0 {
            return None;
        }
        // A limits/ step is nothing else: one kind, its expectation, no request.
        if kinds > 1 || self.request.is_some() || self.expect.is_some() || self.of.is_some() || self.complete.is_some()
        {
            return Some(Err(
                "a limits/ step has one kind and no request, expect, of or complete".into(),
            ));
        }
        let spec = |s: &LimitStep| OverrideSpec {
            policy: s.policy.clone(),
            rate: s.rate.clone().unwrap_or_default(),
            burst: s.burst,
            ttl: s.ttl_ms.map(Duration::from_millis),
            now_ms: s.now_ms,
        };
        let (got, want) = if let Some(s) = &self.set_limit {
            (
                limiter.set_limit(&spec(s)).await.map(|l| l.to_value()),
                self.expect_limit.clone(),
            )
        } else if let Some(s) = &self.set_override {
            let key = s.key.as_deref().unwrap_or_default();
            (
                limiter.set_override(key, &spec(s)).await.map(|o| o.to_value()),
                self.expect_override.clone(),
            )
        } else if let Some(s) = &self.get_limit {
            // At the store's clock: the bindings' get_limit takes no other.
            let got = limiter.get_limit(s.policy.as_deref(), None).await;
            (
                got.map(|l| l.map_or(Value::Null, |l| l.to_value())),
                self.expect_limit.clone(),
            )
        } else if let Some(s) = &self.remove_limit {
            let got = limiter.remove_limit(s.policy.as_deref()).await;
            (got.map(Value::Bool), self.expect_removed.map(Value::Bool))
        } else {
            return None;
        };
        Some(match (got, want) {
            (Ok(got), Some(want)) if got == want => Ok(()),
            (Ok(got), want) => Err(format!("expected {want:?}, got {got}")),
            (Err(e), _) => Err(format!("error {e}")),
        })
    }
}

impl Step {
    /// The options of this step's completion of `request` (its `now_ms` the default clock).
    fn options(&self, request: Option<&Value>) -> CompleteOptions {
        CompleteOptions {
            cost: self.actual_cost,
            now_ms: self
                .at_ms
                .or_else(|| request.and_then(|r| r.get("now_ms")).and_then(Value::as_i64)),
        }
    }
}

/// A JSON field that is present, `null` included.
fn present_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A field that is present, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u16>>, D::Error> {
    Option::<u16>::deserialize(d).map(Some)
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: Option<u16>,
    headers: Vec<(String, String)>,
    body: Option<String>,
    /// A gRPC call's trailing metadata (none for HTTP: absent is `[]`).
    #[serde(default)]
    trailers: Vec<(String, String)>,
    #[serde(default)]
    delay_ms: u64,
}

fn load() -> Vec<(String, File)> {
    let mut files: Vec<(String, File)> = support::vector_files("http");
    let calls = support::vector_files::<File>("grpc").into_iter();
    files.extend(calls.map(|(name, file)| (format!("grpc/{name}"), file)));
    let costs = support::vector_files::<File>("cost").into_iter();
    files.extend(costs.map(|(name, file)| (format!("cost/{name}"), file)));
    let limits = support::vector_files::<File>("limits").into_iter();
    files.extend(limits.map(|(name, file)| (format!("limits/{name}"), file)));
    for (name, file) in &files {
        assert!(!file.cases.is_empty(), "{name}: no cases");
    }
    files
}

async fn play(store: &str, files: &[(String, File)]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut steps = 0;
    for (fi, (file, vectors)) in files.iter().enumerate() {
        for (ci, case) in vectors.cases.iter().enumerate() {
            assert!(!case.requests.is_empty(), "{file}: {:?} has no requests", case.name);
            let mut rules = case.rules.clone();
            rules["store"] = Value::String(store.to_string());
            rules["prefix"] = Value::String(format!("http-{fi}-{ci}"));
            // The vectors pin decisions, not latency: on a loaded machine a first
            // call past the default 100ms would be decided by the local fallback.
            rules["timeout"] = Value::String("10s".into());
            let limiter =
                Limiter::from_rules(&rules.to_string()).unwrap_or_else(|e| panic!("{file}: {:?}: {e}", case.name));
            let mut tokens: Vec<Option<String>> = Vec::new();
            for (i, step) in case.requests.iter().enumerate() {
                steps += 1;
                if let Some(played) = step.limit(&limiter).await {
                    tokens.push(None);
                    if let Err(e) = played {
                        failures.push(format!("{store}: {file}: {:?} step {i}: {e}", case.name));
                    }
                    continue;
                }
                let (request, expect) = match (&step.request, &step.expect, step.of) {
                    (Some(r), Some(e), None) => (r, e),
                    (None, None, Some(of)) => {
                        // The completion of an earlier request, now.
                        let status = step
                            .complete
                            .unwrap_or_else(|| panic!("{file}: {:?} step {i}: of without complete", case.name));
                        let token = tokens.get(of).cloned().flatten();
                        tokens.push(None);
                        match token {
                            None => failures.push(format!(
                                "{store}: {file}: {:?} step {i}: request {of} has no completion token",
                                case.name
                            )),
                            Some(token) => {
                                if let Err(e) = limiter.complete_with(&token, status, step.options(None)).await {
                                    failures.push(format!("{store}: {file}: {:?} step {i}: complete: {e}", case.name));
                                }
                            }
                        }
                        continue;
                    }
                    _ => panic!(
                        "{file}: {:?} step {i}: a request with expect, or complete with of",
                        case.name
                    ),
                };
                let request =
                    RequestInfo::from_value(request).unwrap_or_else(|e| panic!("{file}: {:?}: {e}", case.name));
                let decided = if step.peek {
                    limiter.peek_request(&request).await
                } else {
                    limiter.check_request(&request).await
                };
                match decided {
                    Ok(outcome) => {
                        tokens.push(outcome.completion.clone());
                        if let Some(status) = step.complete {
                            match &outcome.completion {
                                None => failures.push(format!(
                                    "{store}: {file}: {:?} request {i}: no completion token",
                                    case.name
                                )),
                                Some(token) => {
                                    if let Err(e) = limiter
                                        .complete_with(token, status, step.options(step.request.as_ref()))
                                        .await
                                    {
                                        failures.push(format!(
                                            "{store}: {file}: {:?} request {i}: complete: {e}",
                                            case.name
                                        ));
                                    }
                                }
                            }
                        }
                        let got = Expect {
                            status: outcome.status,
                            headers: outcome.headers.to_vec(),
                            body: outcome.body,
                            trailers: outcome.trailers.to_vec(),
                            delay_ms: outcome.delay_ms,
                        };
                        if got != *expect {
                            failures.push(format!(
                                "{store}: {file}: {:?} request {i}: expected {expect:?}, got {got:?}",
                                case.name
                            ));
                        }
                    }
                    Err(e) => {
                        tokens.push(None);
                        failures.push(format!("{store}: {file}: {:?} request {i}: error {e}", case.name))
                    }
                }
            }
            // A store failure would be hidden by the local fallback, which decides alike.
            if !limiter.metrics_text().contains("polylimit_store_errors_total 0\n") {
                failures.push(format!("{store}: {file}: {:?}: a store call failed", case.name));
            }
        }
    }
    (steps, failures)
}

#[tokio::test]
async fn http_vectors_on_a_redis_cluster() {
    on_topology(support::Topology::cluster()).await;
}

#[tokio::test]
async fn http_vectors_on_redis_sentinel() {
    on_topology(support::Topology::sentinel()).await;
}

async fn on_topology(topology: support::Topology) {
    let files = load();
    let (steps, failures) = play(&topology.url, &files).await;
    println!(
        "{} HTTP vector files, {steps} requests on {}",
        files.len(),
        topology.url
    );
    support::assert_no_mismatches(&failures);
}

#[tokio::test]
async fn http_vectors_on_memory_and_redis() {
    let files = load();
    let redis = support::RedisServer::start();
    let (steps, mut failures) = play("memory", &files).await;
    let (_, redis_failures) = play(&redis.url(), &files).await;
    failures.extend(redis_failures);
    println!("{} HTTP vector files, {steps} requests per store", files.len());
    support::assert_no_mismatches(&failures);
}
