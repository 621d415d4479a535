//! Plays every vector in `POLYLIMIT_VECTORS` (default `tests/conformance`)
//! against the memory store and a real Redis. Both must match exactly.

mod support;

use polylimit::{CheckOptions, Decision, Limiter, LimiterConfig, Policy};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    now_ms: i64,
    #[serde(default = "support::default_key")]
    key: String,
    #[serde(default = "support::one")]
    cost: u64,
    /// A peek: the decision a check would get, with nothing charged.
    #[serde(default)]
    peek: bool,
    expect: Expect,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Expect {
    allowed: bool,
    remaining: u64,
    reset_after_ms: u64,
    retry_after_ms: Option<u64>,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    source: Option<String>,
}

type File = support::VectorFile<Step>;

fn load() -> Vec<(String, File)> {
    let files: Vec<(String, File)> = support::vector_files("");
    for (name, file) in &files {
        assert!(!file.cases.is_empty(), "{name}: no cases");
    }
    files
}

fn mismatch(expect: &Expect, got: &Decision) -> bool {
    got.allowed != expect.allowed
        || got.remaining != expect.remaining
        || got.reset_after_ms != expect.reset_after_ms
        || got.retry_after_ms != expect.retry_after_ms
        || got.delay_ms != expect.delay_ms
        || expect.limit.is_some_and(|l| l != got.limit)
        || expect.source.as_ref().is_some_and(|s| s != got.source.as_str())
}

/// Plays every case on `store`, each under its own prefix starting with `run`.
async fn play(store: &str, run: &str, files: &[(String, File)]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut steps = 0;
    for (file_index, (file, vectors)) in files.iter().enumerate() {
        let mut names = std::collections::HashSet::new();
        for (case_index, case) in vectors.cases.iter().enumerate() {
            assert!(names.insert(&case.name), "{file}: duplicate case name {:?}", case.name);
            assert!(!case.steps.is_empty(), "{file}: case {:?} has no steps", case.name);
            let policy =
                Policy::from_value(&case.policy, "policy").unwrap_or_else(|e| panic!("{file}: {}: {e}", case.name));
            let mut config = LimiterConfig::new(policy).with_store(store);
            // A prefix per case isolates cases on one Redis.
            config.prefix = format!("{run}-{file_index}-{case_index}");
            // The vectors pin decisions: a loaded machine must not turn a slow
            // Redis answer into a fallback one.
            config.timeout = std::time::Duration::from_secs(10);
            let limiter = Limiter::new(config).unwrap();
            for (i, step) in case.steps.iter().enumerate() {
                steps += 1;
                let options = CheckOptions {
                    cost: step.cost,
                    now_ms: Some(step.now_ms),
                };
                let decided = if step.peek {
                    limiter.peek_with(&step.key, options).await
                } else {
                    limiter.check_with(&step.key, options).await
                };
                match decided {
                    Ok(got) if !mismatch(&step.expect, &got) => {}
                    Ok(got) => failures.push(format!(
                        "{store}: {file}: {:?} step {i} (now_ms {}{}): expected {:?}, got {:?}",
                        case.name,
                        step.now_ms,
                        if step.peek { ", peek" } else { "" },
                        step.expect,
                        got
                    )),
                    Err(e) => failures.push(format!("{store}: {file}: {:?} step {i}: error {e}", case.name)),
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
async fn vectors_on_a_redis_cluster() {
    on_topology(support::Topology::cluster()).await;
}

#[tokio::test]
async fn vectors_on_redis_sentinel() {
    on_topology(support::Topology::sentinel()).await;
}

async fn on_topology(topology: support::Topology) {
    let files = load();
    let (steps, failures) = play(&topology.url, "conformance", &files).await;
    println!("{steps} steps on {}", topology.url);
    support::assert_no_mismatches(&failures);
}

#[tokio::test]
async fn vectors_on_memory_and_redis() {
    let files = load();
    let redis = support::RedisServer::start();
    let (memory_steps, mut failures) = play("memory", "conformance", &files).await;
    // The common shapes go to their own functions (shapes.lua); the same
    // vectors then pin the general check for them too.
    let (redis_steps, redis_failures) = play(&redis.url(), "conformance", &files).await;
    failures.extend(redis_failures);
    polylimit::general_check_only(true);
    let (_, general_failures) = play(&redis.url(), "general", &files).await;
    polylimit::general_check_only(false);
    failures.extend(general_failures.into_iter().map(|f| format!("general check: {f}")));
    let cases: usize = files.iter().map(|(_, f)| f.cases.len()).sum();
    println!(
        "{} files, {cases} cases, {memory_steps} steps on memory, {redis_steps} on redis (twice: shape functions, general check)",
        files.len()
    );
    support::assert_no_mismatches(&failures);
}
