//! Concurrency limits (issue 18): plays `tests/conformance/concurrency/*.json`
//! on the memory store, a real Redis and a real Redis Cluster, and measures
//! admissions under real concurrency, releases, lease ends, a killed
//! process's slots, and the composition with rate policies.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

use polylimit::{CheckOptions, Decision, Lease, LeaseGuard, Limiter, LimiterConfig, Policy, RefundProbe};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    now_ms: i64,
    #[serde(default = "support::default_key")]
    key: String,
    #[serde(default = "support::one")]
    cost: u64,
    /// Acquire steps.
    #[serde(default)]
    expect: Option<Expect>,
    /// Release steps: the index of the earlier acquire step whose lease goes.
    #[serde(default)]
    release: Option<usize>,
    /// Release steps: whether the lease was live.
    #[serde(default)]
    released: Option<bool>,
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
}

type File = support::VectorFile<Step>;

fn load() -> Vec<(String, File)> {
    let files: Vec<(String, File)> = support::vector_files("concurrency");
    for (name, file) in &files {
        assert!(!file.cases.is_empty(), "{name}: no cases");
        for case in &file.cases {
            assert!(!case.steps.is_empty(), "{name}: {:?} has no steps", case.name);
            for (i, step) in case.steps.iter().enumerate() {
                match (&step.expect, step.release, step.released) {
                    (Some(_), None, None) => {}
                    (None, Some(j), Some(_)) => assert!(
                        j < i && case.steps[j].expect.as_ref().is_some_and(|e| e.allowed),
                        "{name}: {:?} step {i}: `release` names an earlier allowed acquire",
                        case.name
                    ),
                    _ => panic!(
                        "{name}: {:?} step {i}: an acquire has `expect`; a release has `release` and `released`",
                        case.name
                    ),
                }
            }
        }
    }
    files
}

fn mismatch(expect: &Expect, got: &Decision) -> bool {
    got.allowed != expect.allowed
        || got.remaining != expect.remaining
        || got.reset_after_ms != expect.reset_after_ms
        || got.retry_after_ms != expect.retry_after_ms
        || got.delay_ms != 0
        || expect.limit.is_some_and(|l| l != got.limit)
}

async fn play(store: &str, files: &[(String, File)]) -> (usize, Vec<String>) {
    let mut failures = Vec::new();
    let mut played = 0;
    for (file_index, (file, vectors)) in files.iter().enumerate() {
        let mut names = std::collections::HashSet::new();
        for (case_index, case) in vectors.cases.iter().enumerate() {
            assert!(names.insert(&case.name), "{file}: duplicate case name {:?}", case.name);
            let policy =
                Policy::from_value(&case.policy, "policy").unwrap_or_else(|e| panic!("{file}: {}: {e}", case.name));
            let mut config = LimiterConfig::new(policy).with_store(store);
            config.prefix = format!("concurrency-{file_index}-{case_index}");
            config.timeout = std::time::Duration::from_secs(10); // decisions, not latency
            let limiter = Limiter::new(config).unwrap();
            let mut leases: Vec<Vec<Lease>> = Vec::new();
            for (i, step) in case.steps.iter().enumerate() {
                played += 1;
                let at = format!("{store}: {file}: {:?} step {i} (now_ms {})", case.name, step.now_ms);
                if let Some(j) = step.release {
                    match limiter.release_at(&leases[j], step.now_ms).await {
                        Ok(n) if Some(n == 1) == step.released => {}
                        Ok(n) => failures.push(format!("{at}: released {n}, expected {:?}", step.released)),
                        Err(e) => failures.push(format!("{at}: release error {e}")),
                    }
                    leases.push(Vec::new());
                    continue;
                }
                let options = CheckOptions {
                    cost: step.cost,
                    now_ms: Some(step.now_ms),
                };
                let expect = step.expect.as_ref().expect("validated");
                match limiter.check_all(&step.key, options).await {
                    Ok(result) => {
                        let got = result.decision();
                        if mismatch(expect, &got) {
                            failures.push(format!("{at}: expected {expect:?}, got {got:?}"));
                        }
                        if result.leases.len() != usize::from(got.allowed) {
                            failures.push(format!("{at}: {} leases for {got:?}", result.leases.len()));
                        }
                        leases.push(result.leases);
                    }
                    Err(e) => {
                        failures.push(format!("{at}: error {e}"));
                        leases.push(Vec::new());
                    }
                }
            }
            if !limiter.metrics_text().contains("polylimit_store_errors_total 0\n") {
                failures.push(format!("{store}: {file}: {:?}: a store call failed", case.name));
            }
        }
    }
    (played, failures)
}

#[tokio::test]
async fn vectors_on_memory_and_redis() {
    let files = load();
    let redis = support::RedisServer::start();
    let (memory_steps, mut failures) = play("memory", &files).await;
    let (redis_steps, redis_failures) = play(&redis.url(), &files).await;
    failures.extend(redis_failures);
    println!("{memory_steps} steps on memory, {redis_steps} on redis");
    support::assert_no_mismatches(&failures);
}

/// One cluster for the tests of this file (they take minutes to converge).
static CLUSTER: LazyLock<support::Topology> = LazyLock::new(support::Topology::cluster);

#[tokio::test]
async fn vectors_on_a_redis_cluster() {
    let files = load();
    let (steps, failures) = play(&CLUSTER.url, &files).await;
    println!("{steps} steps on {}", CLUSTER.url);
    support::assert_no_mismatches(&failures);
}

fn concurrent(limit: u64, lease: &str) -> Policy {
    Policy::from_value(
        &json!({"algorithm": "concurrency", "limit": limit, "lease": lease, "name": "concurrent"}),
        "",
    )
    .unwrap()
}

fn limiter(policies: Vec<Policy>, store: &str, prefix: &str) -> Limiter {
    let mut config = LimiterConfig::new(policies[0].clone()).with_store(store);
    config.policies = policies;
    config.prefix = prefix.into();
    // Exactness is what these tests check, not timeouts: a store call that
    // outlived the default 100 ms on a loaded machine went to the fallback.
    config.timeout = std::time::Duration::from_secs(5);
    Limiter::new(config).unwrap()
}

/// 100 tasks acquire at once against a limit of 10, on the store's clock:
/// exactly 10 are admitted and hold their slots; releasing them makes room
/// for exactly 10 more.
async fn hundred_at_once(store: &str) {
    let limiter = limiter(vec![concurrent(10, "30s")], store, "hundred");
    let start = Arc::new(tokio::sync::Barrier::new(100));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (limiter, start) = (limiter.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                limiter.acquire("api").await.unwrap()
            })
        })
        .collect();
    let mut guards = Vec::new();
    for task in tasks {
        let (decision, guard) = task.await.unwrap();
        assert_eq!(decision.allowed, guard.is_some(), "{decision:?}");
        guards.extend(guard);
    }
    assert_eq!(guards.len(), 10, "{store}: exactly the limit admitted");
    assert!(!limiter.acquire("api").await.unwrap().0.allowed);
    for guard in guards {
        assert_eq!(guard.release().await.unwrap(), 1);
    }
    let again: Vec<_> = (0..100)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.acquire("api").await.unwrap() })
        })
        .collect();
    let mut admitted = 0;
    for task in again {
        let (decision, guard) = task.await.unwrap();
        admitted += usize::from(decision.allowed);
        // Dropping a guard releases on the runtime, a moment later: keep
        // these leases held (not released) while the others decide.
        drop(guard.map(LeaseGuard::into_leases));
    }
    assert_eq!(admitted, 10, "{store}: releasing made room for 10 more");
    assert!(limiter.metrics_text().contains("polylimit_store_errors_total 0\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_concurrent_acquires_admit_exactly_the_limit() {
    hundred_at_once("memory").await;
    let redis = support::RedisServer::start();
    hundred_at_once(&redis.url()).await;
}

/// Slow requests through `acquire`/guard: in flight never exceeds the limit,
/// measured by the requests themselves, and every request is served once
/// slots free up (retrying after a denial).
async fn never_more_than_the_limit_in_flight(store: &str) {
    let limiter = limiter(vec![concurrent(10, "30s")], store, "in-flight");
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let denied = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let (limiter, in_flight, most, denied) = (limiter.clone(), in_flight.clone(), most.clone(), denied.clone());
            tokio::spawn(async move {
                loop {
                    let (decision, guard) = limiter.acquire("slow").await.unwrap();
                    let Some(guard) = guard else {
                        assert!(!decision.allowed);
                        denied.fetch_add(1, Ordering::Relaxed);
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // A slow handler: the request holds its slot meanwhile.
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    return;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    println!(
        "{store}: at most {most} in flight, {} denials",
        denied.load(Ordering::Relaxed)
    );
    assert!(most <= 10, "{store}: {most} requests in flight with a limit of 10");
    assert!(most >= 2, "{store}: the requests did overlap ({most})");
    assert!(denied.load(Ordering::Relaxed) > 0, "{store}: some had to wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_requests_never_exceed_the_limit_in_flight() {
    never_more_than_the_limit_in_flight("memory").await;
    let redis = support::RedisServer::start();
    never_more_than_the_limit_in_flight(&redis.url()).await;
}

/// A lease nobody releases ends with its lease, at `now_ms`.
async fn unreleased_lease_comes_back(store: &str) {
    let limiter = limiter(vec![concurrent(1, "5s")], store, "unreleased");
    let at = |now_ms| CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    };
    let (first, guard) = limiter.acquire_with("k", at(1_000)).await.unwrap();
    assert!(first.allowed);
    let lost = guard.unwrap().into_leases(); // never released
    assert_eq!(lost.len(), 1);
    let (held, _) = limiter.acquire_with("k", at(5_999)).await.unwrap();
    assert_eq!((held.allowed, held.retry_after_ms), (false, Some(1)));
    let (back, guard) = limiter.acquire_with("k", at(6_000)).await.unwrap();
    assert!(back.allowed, "{store}: the slot came back when its lease ended");
    assert_eq!(limiter.release_at(&lost, 6_000).await.unwrap(), 0, "an ended lease");
    assert_eq!(limiter.release_at(guard.unwrap().leases(), 6_001).await.unwrap(), 1);
}

#[tokio::test]
async fn an_unreleased_lease_ends_with_its_lease() {
    unreleased_lease_comes_back("memory").await;
    let redis = support::RedisServer::start();
    unreleased_lease_comes_back(&redis.url()).await;
}

/// The child half of [`a_killed_process_slots_come_back`]: takes every slot
/// on the Redis named by `POLYLIMIT_CRASH_REDIS` and dies without releasing.
#[tokio::test]
#[ignore = "run by a_killed_process_slots_come_back as a child process"]
async fn crash_child() {
    let Ok(url) = std::env::var("POLYLIMIT_CRASH_REDIS") else {
        return;
    };
    let now_ms: i64 = std::env::var("POLYLIMIT_CRASH_NOW").unwrap().parse().unwrap();
    let limiter = limiter(vec![concurrent(3, "2s")], &url, "crash");
    for _ in 0..3 {
        let (decision, guard) = limiter
            .acquire_with(
                "k",
                CheckOptions {
                    cost: 1,
                    now_ms: Some(now_ms),
                },
            )
            .await
            .unwrap();
        assert!(decision.allowed);
        std::mem::forget(guard);
    }
    std::process::abort();
}

/// A process that took every slot is killed (SIGABRT, nothing released):
/// another process is denied until the leases end, then admitted.
#[tokio::test]
async fn a_killed_process_slots_come_back() {
    let redis = support::RedisServer::start();
    let now_ms = 1_000_000;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash_child", "--ignored", "--nocapture"])
        .env("POLYLIMIT_CRASH_REDIS", redis.url())
        .env("POLYLIMIT_CRASH_NOW", now_ms.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child died");
    let limiter = limiter(vec![concurrent(3, "2s")], &redis.url(), "crash");
    let at = |now_ms| CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    };
    let (held, _) = limiter.acquire_with("k", at(now_ms + 1_999)).await.unwrap();
    assert!(
        !held.allowed,
        "the dead process's slots are held until their lease ends"
    );
    assert_eq!(held.retry_after_ms, Some(1));
    let (back, guard) = limiter.acquire_with("k", at(now_ms + 2_000)).await.unwrap();
    assert!(back.allowed, "the slots came back");
    assert_eq!(back.remaining, 2);
    drop(guard.map(|g| g.into_leases()));
}

/// The same on Redis's own clock (`TIME`), with a real 300 ms lease: what
/// is tested here is the real clock, so this test waits on it.
#[tokio::test]
async fn a_lease_ends_on_the_redis_clock() {
    let redis = support::RedisServer::start();
    let limiter = limiter(vec![concurrent(1, "300ms")], &redis.url(), "clock");
    let (first, guard) = limiter.acquire("k").await.unwrap();
    assert!(first.allowed);
    let _crashed = guard.unwrap().into_leases();
    let (held, _) = limiter.acquire("k").await.unwrap();
    assert!(!held.allowed);
    let wait = held.retry_after_ms.unwrap();
    assert!((1..=300).contains(&wait), "{wait}");
    tokio::time::sleep(std::time::Duration::from_millis(wait + 20)).await;
    let (back, _guard) = limiter.acquire("k").await.unwrap();
    assert!(back.allowed, "Redis ended the lease after {wait} ms");
}

/// `[per_second, concurrent]` decided atomically: when the rate denies, no
/// lease is taken; when the concurrency limit denies, the rate is not charged.
async fn composes_atomically(store: &str) {
    let per_second = Policy::from_value(
        &json!({"algorithm": "fixed_window", "rate": "3/s", "name": "per_second"}),
        "",
    )
    .unwrap();
    let limiter = limiter(vec![per_second, concurrent(2, "30s")], store, "compose");
    let at = |now_ms| CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    };
    // Two in flight: the concurrency limit is full, one request of the rate left.
    let a = limiter.check_all("k", at(1_000)).await.unwrap();
    let b = limiter.check_all("k", at(1_000)).await.unwrap();
    assert!(a.allowed && b.allowed);
    assert_eq!(a.leases.len() + b.leases.len(), 2);
    assert_eq!(a.leases[0].policy, 1);
    // Denied by concurrency, three times: the rate is not charged.
    for _ in 0..3 {
        let denied = limiter.check_all("k", at(1_000)).await.unwrap();
        assert!(!denied.allowed && denied.decisions[0].allowed && !denied.decisions[1].allowed);
        assert_eq!(
            denied.decisions[0].remaining, 0,
            "a peek of the rate: 1 left, 0 after this one"
        );
        assert!(denied.leases.is_empty());
    }
    assert_eq!(limiter.release_at(&a.leases, 1_000).await.unwrap(), 1);
    let c = limiter.check_all("k", at(1_000)).await.unwrap();
    assert!(c.allowed, "{store}: the rate was never charged for the denials");
    assert_eq!(c.decisions[0].remaining, 0);
    // Denied by the rate (a slot is free): no lease is taken.
    assert_eq!(limiter.release_at(&c.leases, 1_000).await.unwrap(), 1);
    let denied = limiter.check_all("k", at(1_000)).await.unwrap();
    assert!(!denied.allowed && !denied.decisions[0].allowed && denied.decisions[1].allowed);
    assert!(denied.leases.is_empty());
    assert_eq!(
        denied.decisions[1].remaining, 0,
        "one in flight (b), this one would be the second"
    );
    // The next window: the slot nobody took is there.
    let d = limiter.check_all("k", at(2_000)).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.decisions[1].remaining, 0);
    assert!(!limiter.check_all("k", at(2_000)).await.unwrap().allowed);
}

#[tokio::test]
async fn a_multi_policy_check_is_atomic() {
    composes_atomically("memory").await;
    let redis = support::RedisServer::start();
    composes_atomically(&redis.url()).await;
}

/// Across cluster slots: a request whose rate key and concurrency key live
/// in different slots, and whose later group denies in the charge pass,
/// gives its lease back (no slot leaks), as refunds give back charges.
#[tokio::test]
async fn across_cluster_slots_a_denial_takes_no_lease() {
    let per_second = Policy::from_value(
        &json!({"algorithm": "fixed_window", "rate": "1/s", "name": "per_second"}),
        "",
    )
    .unwrap();
    let mut config = LimiterConfig::new(concurrent(1, "30s")).with_store(&CLUSTER.url);
    config.policies.push(per_second);
    config.prefix = "cross".into();
    config.timeout = std::time::Duration::from_secs(5); // admissions, not latency
    let probe = RefundProbe::new(config.clone()).unwrap();
    let other = RefundProbe::new(config).unwrap();
    let at = CheckOptions {
        cost: 1,
        now_ms: Some(5_000),
    };
    // Keys in different slots: the concurrency key ("a…") is decided first.
    let targets = [(0, "a-user"), (1, "z-route")];
    // Between the peek and the charge, another client takes the rate.
    let hook_ran = Arc::new(AtomicUsize::new(0));
    let ran = hook_ran.clone();
    probe.between_slot_passes(Some(Arc::new(move || {
        ran.fetch_add(1, Ordering::SeqCst);
        let other = other.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let spent = runtime.block_on(other.check(&[(1, "z-route")], at)).unwrap();
            assert!(spent.allowed, "the other client takes the rate's only request");
        })
        .join()
        .unwrap();
    })));
    let denied = probe.check(&targets, at).await.unwrap();
    assert_eq!(hook_ran.load(Ordering::SeqCst), 1);
    assert!(!denied.allowed && denied.leases.is_empty(), "{denied:?}");
    probe.between_slot_passes(None);
    // The concurrency slot was given back: the key has its one slot.
    let free = probe.check(&[(0, "a-user")], at).await.unwrap();
    assert!(
        free.allowed,
        "the lease taken in the charge pass was released: {free:?}"
    );
    assert!(probe.metrics_text().contains("polylimit_store_errors_total 0\n"));
}

/// `check` returns no lease, so it refuses a concurrency policy; `acquire`
/// on a limiter without one is a plain check.
#[tokio::test]
async fn check_refuses_a_concurrency_policy() {
    let limiter = limiter(vec![concurrent(1, "1s")], "memory", "refuse");
    let e = limiter.check("k").await.unwrap_err().to_string();
    assert!(e.starts_with("policy: \"concurrent\" is a concurrency policy"), "{e}");
    let plain = limiter_plain();
    let (decision, guard) = plain.acquire("k").await.unwrap();
    assert!(decision.allowed && guard.is_none());
    let foreign = Lease {
        policy: 0,
        key: "k".into(),
        id: "00".into(),
    };
    let e = plain.release(&[foreign]).await.unwrap_err().to_string();
    assert_eq!(e, "leases[0].policy: 0 is not a concurrency policy of this limiter");
    // Requests in flight finish after close: their leases still release.
    let (_, guard) = limiter.acquire("k").await.unwrap();
    limiter.close();
    assert!(matches!(limiter.acquire("k").await, Err(polylimit::Error::Closed)));
    assert_eq!(guard.unwrap().release().await.unwrap(), 1);
}

fn limiter_plain() -> Limiter {
    Limiter::new(LimiterConfig::new(Policy::parse("{rate: 5/s}").unwrap())).unwrap()
}

/// Redis down: an acquire falls back to the local store (`on_store_error:
/// local`), and releasing never fails; the local lease is released.
#[tokio::test]
async fn release_never_fails_while_redis_is_down() {
    let silent = support::Silent::start().await;
    let mut config = LimiterConfig::new(concurrent(1, "30s")).with_store(silent.url());
    config.timeout = std::time::Duration::from_millis(50);
    let limiter = Limiter::new(config).unwrap();
    let (decision, guard) = limiter.acquire("k").await.unwrap();
    assert!(decision.allowed);
    assert_eq!(decision.source.as_str(), "local");
    let leases = guard.unwrap().into_leases();
    assert!(
        !limiter.acquire("k").await.unwrap().0.allowed,
        "the local store holds the slot"
    );
    assert_eq!(limiter.release(&leases).await.unwrap(), 1, "the local lease");
    let (again, _guard) = limiter.acquire("k").await.unwrap();
    assert!(again.allowed);
    assert!(!limiter.metrics_text().contains("polylimit_store_errors_total 0\n"));
}

/// Through a rules file: `check_request` acquires, the outcome carries the
/// lease and the draft's concurrency headers, and releasing the outcome's
/// leases lets the next request in.
#[tokio::test]
async fn a_request_carries_its_lease_and_the_concurrency_headers() {
    let limiter = Limiter::from_rules(
        "headers: ietf\n\
         policies:\n  concurrent: { algorithm: concurrency, limit: 1, lease: 30s }\n\
         rules:\n  - match: { path: /reports/* }\n    key: [ip]\n    policy: concurrent\n",
    )
    .unwrap();
    let req = polylimit::RequestInfo {
        method: "GET".into(),
        path: "/reports/1".into(),
        peer: Some("203.0.113.7".into()),
        now_ms: Some(1_000),
        ..Default::default()
    };
    let first = limiter.check_request(&req).await.unwrap();
    assert_eq!(first.status, None);
    assert_eq!(first.leases.len(), 1);
    assert_eq!(
        first.headers.to_vec(),
        vec![
            (
                "RateLimit-Policy".to_string(),
                "\"concurrent\";q=1;qu=\"concurrent-requests\"".to_string()
            ),
            ("RateLimit".to_string(), "\"concurrent\";r=0".to_string()),
        ]
    );
    let second = limiter.check_request(&req).await.unwrap();
    assert_eq!(second.status, Some(429));
    assert!(second.leases.is_empty());
    assert_eq!(second.headers.get("Retry-After"), Some("30"));
    assert_eq!(limiter.release_at(&first.leases, 2_000).await.unwrap(), 1);
    let third = limiter.check_request(&req).await.unwrap();
    assert_eq!(third.status, None, "the released slot is free");
}

/// Dropping a guard releases its leases: on the runtime it is dropped in
/// (a task, run at the next yield), or at once without one.
#[tokio::test]
async fn dropping_a_guard_releases() {
    for store in ["memory", &support::RedisServer::start().url()] {
        let limiter = limiter(vec![concurrent(1, "30s")], store, "drop");
        let (first, guard) = limiter.acquire("k").await.unwrap();
        assert!(first.allowed);
        assert!(!limiter.acquire("k").await.unwrap().0.allowed);
        drop(guard);
        let mut tries = 0;
        let guard = loop {
            let (decision, guard) = limiter.acquire("k").await.unwrap();
            if decision.allowed {
                break guard;
            }
            tries += 1;
            assert!(tries < 1000, "{store}: the dropped guard's release never ran");
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        };
        // Outside any runtime: the local store's leases go at once.
        if store == "memory" {
            std::thread::spawn(move || drop(guard)).join().unwrap();
            assert!(limiter.acquire("k").await.unwrap().0.allowed);
        }
    }
}

/// Across cluster slots, the other way round: a slot that denied in the
/// peek frees up before the charge pass (a release in between). The request
/// stays denied, so that slot's lease, taken when it is decided again, is
/// given back, and the slot that allowed in the peek is not charged.
#[tokio::test]
async fn across_cluster_slots_a_slot_freed_between_the_passes_takes_no_lease() {
    let mut config = LimiterConfig::new(concurrent(1, "30s")).with_store(&CLUSTER.url);
    config.prefix = "freed".into();
    config.timeout = std::time::Duration::from_secs(5); // admissions, not latency
    let probe = RefundProbe::new(config.clone()).unwrap();
    let holder = Limiter::new(config.clone()).unwrap();
    // Releases on its own runtime, in the hook: a limiter of its own (a
    // connection lives on the runtime that opened it, blocked meanwhile).
    let releaser = Limiter::new(config).unwrap();
    let at = CheckOptions {
        cost: 1,
        now_ms: Some(7_000),
    };
    // "z-busy" is held by another request; "a-free" is free.
    let held = holder.check_all("z-busy", at).await.unwrap();
    assert!(held.allowed);
    let leases = Arc::new(std::sync::Mutex::new(Some(held.leases)));
    let hook_ran = Arc::new(AtomicUsize::new(0));
    let ran = hook_ran.clone();
    probe.between_slot_passes(Some(Arc::new(move || {
        ran.fetch_add(1, Ordering::SeqCst);
        let (releaser, leases) = (releaser.clone(), leases.lock().unwrap().take());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let released = runtime.block_on(releaser.release_at(&leases.unwrap(), 7_000)).unwrap();
            assert_eq!(released, 1, "the holder's request ends between the passes");
        })
        .join()
        .unwrap();
    })));
    let result = probe.check(&[(0, "a-free"), (0, "z-busy")], at).await.unwrap();
    assert_eq!(hook_ran.load(Ordering::SeqCst), 1, "the hook ran between the passes");
    assert!(!result.allowed, "denied as the peek saw it: {result:?}");
    assert!(result.leases.is_empty());
    probe.between_slot_passes(None);
    for key in ["a-free", "z-busy"] {
        let free = probe.check(&[(0, key)], at).await.unwrap();
        assert!(free.allowed, "{key}: no slot was kept for the denied request: {free:?}");
    }
    assert!(probe.metrics_text().contains("polylimit_store_errors_total 0\n"));
}
