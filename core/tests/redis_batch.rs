//! Auto-batching of concurrent Redis decisions (core/src/store/redis_batch.rs)
//! against a real redis-server: decisions waiting together go as one FCALL of
//! the batch function, each keeps its own reply, its own error and its own
//! fallback.

mod support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use polylimit::{CheckOptions, Error, Limiter, LimiterConfig, Policy, Source};
use serde_json::json;

const NOW: i64 = 1_700_000_000_000;

fn limiter(url: &str, policy: serde_json::Value) -> Limiter {
    let mut config = LimiterConfig::new(Policy::from_value(&policy, "").unwrap()).with_store(url);
    // The test counts admissions, not timeouts: a loaded machine must not
    // turn a slow reply into a fallback.
    config.timeout = Duration::from_secs(5);
    Limiter::new(config).unwrap()
}

fn at(cost: u64) -> CheckOptions {
    CheckOptions {
        cost,
        now_ms: Some(NOW),
    }
}

#[tokio::test]
async fn concurrent_decisions_on_one_key_admit_exactly_the_limit_in_batches() {
    let redis = support::RedisServer::start();
    let limiter = limiter(&redis.url(), json!({"rate": "50/h", "burst": 50}));
    limiter.check_all("warm", at(1)).await.unwrap();
    let before = redis.calls("fcall");
    let decisions = 300;
    let results = join_all((0..decisions).map(|_| limiter.check_all("one", at(1)))).await;
    let mut remaining: Vec<u64> = Vec::new();
    for result in results {
        let d = result.unwrap().decision();
        assert_eq!(d.source, Source::Store);
        if d.allowed {
            remaining.push(d.remaining);
        }
    }
    remaining.sort_unstable();
    assert_eq!(
        remaining,
        (0..50).collect::<Vec<u64>>(),
        "exactly the burst admitted, each admission its own reply"
    );
    let fcalls = redis.calls("fcall") - before;
    assert!(
        fcalls * 4 <= decisions,
        "{decisions} decisions went in {fcalls} FCALLs: they were not batched"
    );
    assert_eq!(redis.calls("evalsha"), 0);
}

// Every caller gets its own decision's reply: keys of different costs, so a
// reply handed to the wrong caller shows in its `remaining`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_caller_gets_its_own_reply() {
    let redis = support::RedisServer::start();
    let limiter = limiter(&redis.url(), json!({"rate": "100/h", "burst": 100}));
    limiter.check_all("warm", at(1)).await.unwrap();
    let before = redis.calls("fcall");
    for round in 0..3u64 {
        let results = join_all((0..200u64).map(|i| {
            let limiter = limiter.clone();
            async move {
                let cost = 1 + i % 30;
                (i, cost, limiter.check_all(&format!("k{i}"), at(cost)).await)
            }
        }))
        .await;
        for (i, cost, result) in results {
            let d = result.unwrap().decision();
            assert_eq!(
                (d.allowed, d.remaining, d.source),
                (true, 100 - cost * (round + 1), Source::Store),
                "key k{i}, cost {cost}, round {round}"
            );
        }
    }
    let fcalls = redis.calls("fcall") - before;
    assert!(
        fcalls < 600,
        "600 decisions went in {fcalls} FCALLs: they were not batched"
    );
}

#[tokio::test]
async fn a_decision_on_a_foreign_key_fails_alone_in_its_batch() {
    let redis = support::RedisServer::start();
    let limiter = limiter(&redis.url(), json!({"rate": "10/h", "burst": 10}));
    limiter.check_all("warm", at(1)).await.unwrap();
    redis.command("HSET polylimit:token_bucket:default:{hash} a 1").unwrap();
    redis
        .command("SET polylimit:token_bucket:default:{junk} hello")
        .unwrap();
    let before = redis.calls("fcall");
    let keys: Vec<String> = (0..60)
        .map(|i| match i % 20 {
            7 => "hash".to_string(),
            13 => "junk".to_string(),
            _ => format!("good{i}"),
        })
        .collect();
    let results = join_all(keys.iter().map(|k| limiter.check_all(k, at(3)))).await;
    for (key, result) in keys.iter().zip(results) {
        match (key.as_str(), result) {
            (
                "hash" | "junk",
                Err(Error::Store {
                    key: store_key,
                    message,
                }),
            ) => {
                assert!(store_key.contains(&format!("{{{key}}}")), "{store_key}");
                assert!(
                    message.contains("WRONGTYPE") || message.contains("POLYLIMIT_STATE"),
                    "{message}"
                );
            }
            ("hash" | "junk", other) => panic!("{key}: expected a store error, got {other:?}"),
            (_, Ok(result)) => {
                let d = result.decision();
                assert_eq!((d.allowed, d.remaining, d.source), (true, 7, Source::Store), "{key}");
            }
            (_, Err(e)) => panic!("{key} failed with its neighbour: {e}"),
        }
    }
    let fcalls = redis.calls("fcall") - before;
    assert!(fcalls * 4 <= 60, "60 decisions went in {fcalls} FCALLs: not one batch");
    let metrics = limiter.metrics_text();
    assert!(metrics.contains("polylimit_breaker_state 0\n"), "{metrics}");
}

#[tokio::test]
async fn a_batch_reloads_the_library_the_server_lost() {
    let redis = support::RedisServer::start();
    let limiter = limiter(&redis.url(), json!({"rate": "10/h", "burst": 10}));
    limiter.check_all("warm", at(1)).await.unwrap();
    assert_eq!(redis.command("FUNCTION FLUSH").unwrap(), "+OK\r\n");
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let results = join_all(keys.iter().map(|k| limiter.check_all(k, at(1)))).await;
    for result in results {
        let d = result.unwrap().decision();
        assert_eq!((d.allowed, d.remaining, d.source), (true, 9, Source::Store));
    }
    let library = polylimit::library();
    let listed = redis.command("FUNCTION LIST").unwrap();
    assert!(listed.contains(library.batch.as_str()), "{listed}");
}

// A server stopped (SIGSTOP) or killed with a batch in flight: every waiter
// gets its policy's fallback within its timeout, and decisions return to the
// store once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_in_flight_when_the_server_stops_or_dies_gives_each_waiter_its_fallback() {
    let mut redis = support::RedisServer::start();
    let mut config =
        LimiterConfig::new(Policy::from_value(&json!({"rate": "1000/s", "on_store_error": "local"}), "").unwrap())
            .with_store(redis.url());
    config.timeout = Duration::from_millis(300);
    config.breaker.threshold = 1_000_000;
    let limiter = Limiter::new(config).unwrap();
    assert_eq!(limiter.check("warm").await.unwrap().source, Source::Store);
    for fault in ["SIGSTOP", "SIGKILL"] {
        // Stopped first, so the batches are written and wait for a reply
        // that does not come; then (SIGKILL) the server dies under them.
        redis.pause();
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let started = Instant::now();
                    let d = limiter.check(&format!("k{i}")).await.unwrap();
                    (d.source, started.elapsed())
                })
            })
            .collect();
        if fault == "SIGKILL" {
            tokio::time::sleep(Duration::from_millis(50)).await;
            redis.kill();
        }
        for t in tasks {
            let (source, elapsed) = t.await.unwrap();
            assert_eq!(source, Source::Local, "{fault}");
            assert!(
                elapsed < Duration::from_millis(300 + 1700),
                "{fault}: answered after {elapsed:?}"
            );
        }
        match fault {
            "SIGSTOP" => redis.resume(),
            _ => redis.restart(),
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while limiter.check("again").await.unwrap().source != Source::Store {
            assert!(
                Instant::now() < deadline,
                "{fault}: no store decision 5 s after the server is back"
            );
        }
    }
}
