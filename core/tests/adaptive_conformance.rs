//! Plays `tests/conformance/adaptive/*.json` (adaptive limits: baseline,
//! detection, mitigation, alerts) against the memory store and a real Redis.
//! Both must match exactly; the format is in tests/conformance/README.md.

mod support;

use std::sync::{Arc, Mutex};

use polylimit::adaptive::AnomalyEvent;
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
    /// The step is repeated `times` times, `every_ms` apart; every
    /// repetition must meet `expect` (events: all of them together).
    #[serde(default = "support::one")]
    times: u64,
    #[serde(default)]
    every_ms: i64,
    #[serde(default)]
    peek: bool,
    expect: Expect,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Expect {
    allowed: bool,
    #[serde(default)]
    remaining: Option<u64>,
    #[serde(default, deserialize_with = "some")]
    retry_after_ms: Option<Option<u64>>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    events: Vec<ExpectEvent>,
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
struct ExpectEvent {
    kind: String,
    key: String,
    rate: f64,
    baseline: f64,
    limited_to: f64,
}

fn some<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

type File = support::VectorFile<Step>;

fn mismatch(expect: &Expect, got: &Decision) -> bool {
    got.allowed != expect.allowed
        || expect.remaining.is_some_and(|r| r != got.remaining)
        || expect.retry_after_ms.is_some_and(|r| r != got.retry_after_ms)
        || expect.source.as_ref().is_some_and(|s| s != got.source.as_str())
}

fn seen(e: &AnomalyEvent) -> ExpectEvent {
    ExpectEvent {
        kind: e.kind.as_str().into(),
        key: e.key.clone(),
        rate: e.rate,
        baseline: e.baseline,
        limited_to: e.limited_to,
    }
}

async fn play(store: &str, files: &[(String, File)]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut steps = 0;
    for (file_index, (file, vectors)) in files.iter().enumerate() {
        for (case_index, case) in vectors.cases.iter().enumerate() {
            let policy =
                Policy::from_value(&case.policy, "policy").unwrap_or_else(|e| panic!("{file}: {}: {e}", case.name));
            let mut config = LimiterConfig::new(policy).with_store(store);
            config.prefix = format!("adaptive-{file_index}-{case_index}");
            config.timeout = std::time::Duration::from_secs(10); // decisions, not latency
            let limiter = Limiter::new(config).unwrap();
            let events: Arc<Mutex<Vec<ExpectEvent>>> = Arc::default();
            let sink = events.clone();
            // The sink as it is, on the deciding task: each step's events
            // are there when it returns (`on_anomaly` delivers on a thread).
            limiter.set_anomaly_sink(Some(Arc::new(move |e: &AnomalyEvent| {
                sink.lock().unwrap().push(seen(e))
            })));
            limiter.set_anomaly_log(false);
            for (i, step) in case.steps.iter().enumerate() {
                for n in 0..step.times {
                    steps += 1;
                    let now_ms = step.now_ms + n as i64 * step.every_ms;
                    let options = CheckOptions {
                        cost: step.cost,
                        now_ms: Some(now_ms),
                    };
                    let decided = if step.peek {
                        limiter.peek_with(&step.key, options).await
                    } else {
                        limiter.check_with(&step.key, options).await
                    };
                    match decided {
                        Ok(got) if !mismatch(&step.expect, &got) => {}
                        Ok(got) => failures.push(format!(
                            "{store}: {file}: {:?} step {i} (now_ms {now_ms}): expected {:?}, got {:?}",
                            case.name, step.expect, got
                        )),
                        Err(e) => failures.push(format!("{store}: {file}: {:?} step {i}: error {e}", case.name)),
                    }
                }
                let got: Vec<ExpectEvent> = std::mem::take(&mut *events.lock().unwrap());
                if got != step.expect.events {
                    failures.push(format!(
                        "{store}: {file}: {:?} step {i}: expected events {:?}, got {:?}",
                        case.name, step.expect.events, got
                    ));
                }
            }
            if !limiter.metrics_text().contains("polylimit_store_errors_total 0\n") {
                failures.push(format!("{store}: {file}: {:?}: a store call failed", case.name));
            }
        }
    }
    (steps, failures)
}

#[tokio::test]
async fn adaptive_vectors_on_memory_and_redis() {
    let files: Vec<(String, File)> = support::vector_files("adaptive");
    let redis = support::RedisServer::start();
    let (memory_steps, mut failures) = play("memory", &files).await;
    let (redis_steps, redis_failures) = play(&redis.url(), &files).await;
    failures.extend(redis_failures);
    println!("{memory_steps} steps on memory, {redis_steps} on redis");
    support::assert_no_mismatches(&failures);
}

#[tokio::test]
async fn adaptive_vectors_on_a_redis_cluster() {
    let files: Vec<(String, File)> = support::vector_files("adaptive");
    let cluster = support::Topology::cluster();
    let (steps, failures) = play(&cluster.url, &files).await;
    println!("{steps} steps on {}", cluster.url);
    support::assert_no_mismatches(&failures);
}
