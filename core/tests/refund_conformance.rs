//! Refunds (issue 17): plays `tests/conformance/refund/*.json` against the
//! memory store, a real Redis and a real Redis Cluster, and forces the
//! cross-slot contention case on the cluster.
//!
//! Every case is played twice: as written, and as its twin without each
//! admission that a refund undoes (and without the refund). Both plays must
//! give every remaining check exactly its `expect`: a refund right after an
//! admission leaves every later decision as if the admission never came.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use polylimit::{CheckOptions, Decision, LimiterConfig, Policy, RefundProbe};
use serde::Deserialize;

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Step {
    now_ms: i64,
    #[serde(default = "support::default_key")]
    key: String,
    #[serde(default = "support::one")]
    cost: u64,
    /// A refund of the admission of `cost` at `now_ms` (the step before).
    #[serde(default)]
    refund: bool,
    /// Refund steps: whether the store gave anything back.
    #[serde(default)]
    refunded: Option<bool>,
    /// A reset of the key (`reset`) at this point.
    #[serde(default)]
    reset: bool,
    /// Check steps.
    #[serde(default)]
    expect: Option<Expect>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
struct Expect {
    allowed: bool,
    remaining: u64,
    reset_after_ms: u64,
    retry_after_ms: Option<u64>,
    #[serde(default)]
    delay_ms: u64,
}

type File = support::VectorFile<Step>;
type Case = support::VectorCase<Step>;

fn load() -> Vec<(String, File)> {
    let files: Vec<(String, File)> = support::vector_files("refund");
    for (name, file) in &files {
        assert!(!file.cases.is_empty(), "{name}: no cases");
        for case in &file.cases {
            validate(name, case);
        }
    }
    files
}

/// A refund step that gives back follows the allowed check it undoes (same
/// key, now and cost); one that gives nothing back names an earlier
/// admission (e.g. before a reset). A check has an expect, a refund says
/// whether it gave back, a reset has neither.
fn validate(file: &str, case: &Case) {
    assert!(!case.steps.is_empty(), "{file}: {:?} has no steps", case.name);
    let admission = |s: &Step| !s.refund && !s.reset && s.expect.as_ref().is_some_and(|e| e.allowed);
    for (i, step) in case.steps.iter().enumerate() {
        if step.reset {
            assert!(
                !step.refund && step.expect.is_none() && step.refunded.is_none(),
                "{file}: {:?} step {i}: a reset has no `expect`, `refund` or `refunded`",
                case.name
            );
        } else if step.refund {
            assert!(
                step.expect.is_none() && step.refunded.is_some(),
                "{file}: {:?} step {i}: a refund has `refunded` and no `expect`",
                case.name
            );
            let same = |s: &Step| (s.now_ms, &s.key, s.cost) == (step.now_ms, &step.key, step.cost);
            let undone = match step.refunded {
                Some(true) => i
                    .checked_sub(1)
                    .map(|j| &case.steps[j])
                    .filter(|s| admission(s) && same(s)),
                _ => case.steps[..i].iter().find(|s| admission(s) && same(s)),
            };
            assert!(
                undone.is_some(),
                "{file}: {:?} step {i}: a refund that gives back follows the admission it undoes; one that does not names an earlier one",
                case.name
            );
        } else {
            assert!(
                step.expect.is_some() && step.refunded.is_none(),
                "{file}: {:?} step {i}: a check has an `expect`",
                case.name
            );
        }
    }
}

/// The case without the admissions its refunds gave back (and without the
/// refunds): the decisions every remaining check must match.
fn twin(steps: &[Step]) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    for step in steps {
        if step.refund {
            if step.refunded == Some(true) {
                out.pop();
            }
        } else {
            out.push(step.clone());
        }
    }
    out
}

fn mismatch(expect: &Expect, got: &Decision) -> bool {
    got.allowed != expect.allowed
        || got.remaining != expect.remaining
        || got.reset_after_ms != expect.reset_after_ms
        || got.retry_after_ms != expect.retry_after_ms
        || got.delay_ms != expect.delay_ms
}

async fn play(store: &str, files: &[(String, File)]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut steps_played = 0;
    for (file_index, (file, vectors)) in files.iter().enumerate() {
        let mut names = std::collections::HashSet::new();
        for (case_index, case) in vectors.cases.iter().enumerate() {
            assert!(names.insert(&case.name), "{file}: duplicate case name {:?}", case.name);
            let policy =
                Policy::from_value(&case.policy, "policy").unwrap_or_else(|e| panic!("{file}: {}: {e}", case.name));
            for (variant, steps) in [("as written", case.steps.clone()), ("twin", twin(&case.steps))] {
                let mut config = LimiterConfig::new(policy.clone()).with_store(store);
                // A prefix per case and play isolates them on one Redis.
                config.prefix = format!("refund-{file_index}-{case_index}-{}", variant.len());
                config.timeout = std::time::Duration::from_secs(10); // decisions, not latency
                let probe = RefundProbe::new(config).unwrap();
                for (i, step) in steps.iter().enumerate() {
                    steps_played += 1;
                    let at = format!(
                        "{store}: {file}: {:?} ({variant}) step {i} (now_ms {})",
                        case.name, step.now_ms
                    );
                    if step.reset {
                        if let Err(e) = probe.reset(&step.key).await {
                            failures.push(format!("{at}: reset error {e}"));
                        }
                        continue;
                    }
                    if step.refund {
                        match probe.refund(&[(0, &step.key)], step.cost, step.now_ms).await {
                            Ok(n) if Some(n == 1) == step.refunded => {}
                            Ok(n) => failures.push(format!("{at}: refunded {n}, expected {:?}", step.refunded)),
                            Err(e) => failures.push(format!("{at}: refund error {e}")),
                        }
                        continue;
                    }
                    let options = CheckOptions {
                        cost: step.cost,
                        now_ms: Some(step.now_ms),
                    };
                    let expect = step.expect.as_ref().unwrap();
                    match probe.check(&[(0, &step.key)], options).await {
                        Ok(got) if !mismatch(expect, &got.decisions[0]) => {}
                        Ok(got) => failures.push(format!("{at}: expected {expect:?}, got {:?}", got.decisions[0])),
                        Err(e) => failures.push(format!("{at}: error {e}")),
                    }
                }
                if !probe.metrics_text().contains("polylimit_store_errors_total 0\n") {
                    failures.push(format!("{store}: {file}: {:?}: a store call failed", case.name));
                }
            }
        }
    }
    (steps_played, failures)
}

fn report(store: &str, steps: usize, failures: &[String]) {
    println!("{steps} steps on {store}");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One cluster for this file's tests (its servers end with the process).
static CLUSTER: LazyLock<support::Topology> = LazyLock::new(support::Topology::cluster);

#[tokio::test]
async fn refund_vectors_on_memory_and_redis() {
    let files = load();
    let redis = support::RedisServer::start();
    let (steps, failures) = play("memory", &files).await;
    report("memory", steps, &failures);
    let (steps, failures) = play(&redis.url(), &files).await;
    report(&redis.url(), steps, &failures);
}

#[tokio::test]
async fn refund_vectors_on_a_redis_cluster() {
    let files = load();
    let (steps, failures) = play(&CLUSTER.url, &files).await;
    report(&CLUSTER.url, steps, &failures);
}

fn two_policies(store: &str, prefix: &str) -> LimiterConfig {
    // Policy 0 on key "a", policy 1 on key "b": different hash tags, so
    // different slots, decided in tag order ("a" first).
    let wide = Policy::parse(r#"{"name": "wide", "algorithm": "token_bucket", "rate": "2/h"}"#).unwrap();
    let narrow = Policy::parse(r#"{"name": "narrow", "algorithm": "fixed_window", "rate": "1/h"}"#).unwrap();
    let mut config = LimiterConfig::new(wide).with_store(store);
    config.policies.push(narrow);
    config.prefix = prefix.into();
    config.timeout = std::time::Duration::from_secs(10); // decisions, not latency
    config
}

/// Between the peek (both slots allow) and the charge pass, another limiter
/// spends slot "b": the charge pass charges "a", then "b" denies. The
/// request is denied and "a" gets its token back.
#[tokio::test]
async fn a_later_slot_denying_in_the_charge_pass_refunds_the_earlier_ones() {
    let url = CLUSTER.url.clone();
    let now = 1_000_000;
    let options = CheckOptions {
        cost: 1,
        now_ms: Some(now),
    };
    let probe = RefundProbe::new(two_policies(&url, "contention")).unwrap();
    let other = RefundProbe::new(two_policies(&url, "contention")).unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let (hook_other, hook_fired) = (other.clone(), fired.clone());
    probe.between_slot_passes(Some(Arc::new(move || {
        hook_fired.fetch_add(1, Ordering::SeqCst);
        let other = hook_other.clone();
        // Another client, on its own runtime, spends "b" in the gap.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let spent = runtime.block_on(other.check(&[(1, "b")], options)).unwrap();
            assert!(spent.allowed, "the other client takes b's only request");
        })
        .join()
        .unwrap();
    })));

    let result = probe.check(&[(0, "a"), (1, "b")], options).await.unwrap();
    assert_eq!(fired.load(Ordering::SeqCst), 1, "the hook ran between the passes");
    assert!(!result.allowed, "b denies in the charge pass");
    assert!(result.decisions[0].allowed && !result.decisions[1].allowed);
    probe.between_slot_passes(None);

    // "a" was charged and refunded: both of its tokens are there.
    let a = probe.check(&[(0, "a")], options).await.unwrap();
    assert!(a.allowed);
    assert_eq!(a.decisions[0].remaining, 1, "a's charge was refunded");
    let a = probe.check(&[(0, "a")], options).await.unwrap();
    assert_eq!((a.allowed, a.decisions[0].remaining), (true, 0));
    assert!(!probe.check(&[(0, "a")], options).await.unwrap().allowed);
    assert!(probe.metrics_text().contains("polylimit_store_errors_total 0\n"));
}

/// Without contention, a cross-slot request either charges every slot or
/// none (the refund path stays unused).
#[tokio::test]
async fn cross_slot_requests_charge_all_slots_or_none() {
    let url = CLUSTER.url.clone();
    let options = CheckOptions {
        cost: 1,
        now_ms: Some(2_000_000),
    };
    let probe = RefundProbe::new(two_policies(&url, "no-contention")).unwrap();
    assert!(probe.check(&[(0, "a"), (1, "b")], options).await.unwrap().allowed);
    // "b" is spent: denied, and "a" is not charged.
    assert!(!probe.check(&[(0, "a"), (1, "b")], options).await.unwrap().allowed);
    let a = probe.check(&[(0, "a")], options).await.unwrap();
    assert_eq!((a.allowed, a.decisions[0].remaining), (true, 0));
}
