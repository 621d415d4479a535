//! The three scenarios every reader of a rate-limiting article expects, on a
//! real Redis with burst 10 and rate 1/s, on the server's clock (the refill
//! scenario passes `now_ms` so no test waits for time to pass).

mod support;

use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy, Source};
use serde_json::json;
use std::time::Duration;

fn limiter(redis: &support::RedisServer, algorithm: &str) -> Limiter {
    let policy = Policy::from_value(&json!({"algorithm": algorithm, "rate": "1/s", "burst": 10}), "").unwrap();
    // A generous timeout: these scenarios are about admissions, and a store
    // call that times out on a busy machine would be decided by the fallback.
    let config = LimiterConfig {
        timeout: Duration::from_secs(5),
        ..LimiterConfig::new(policy).with_store(redis.url())
    };
    Limiter::new(config).unwrap()
}

const BUCKETS: [&str; 3] = ["token_bucket", "gcra", "leaky_bucket"];

#[tokio::test]
async fn fifteen_sequential_checks_admit_ten() {
    let redis = support::RedisServer::start();
    for algorithm in BUCKETS {
        let limiter = limiter(&redis, algorithm);
        let mut allowed = Vec::new();
        for _ in 0..15 {
            let d = limiter.check("sequential").await.unwrap();
            assert_eq!(d.source, Source::Store);
            allowed.push(d.allowed);
        }
        let expected: Vec<bool> = (0..15).map(|i| i < 10).collect();
        assert_eq!(allowed, expected, "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_checks_admit_exactly_ten() {
    let redis = support::RedisServer::start();
    for algorithm in BUCKETS {
        let limiter = limiter(&redis, algorithm);
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.check("concurrent").await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            let d = task.await.unwrap();
            assert_eq!(d.source, Source::Store);
            admitted += d.allowed as usize;
        }
        assert_eq!(admitted, 10, "{algorithm}");
    }
}

// The refill is decided by the script from the `now` it is given: the drain
// passes a fixed `now_ms` and the checks after it one 2 s later, instead of
// sleeping 2 s on the wall clock.
#[tokio::test]
async fn after_draining_two_seconds_refill_two() {
    let redis = support::RedisServer::start();
    let limiter = limiter(&redis, "token_bucket");
    let start = 1_700_000_000_000;
    let at = |now_ms: i64| CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    };
    for _ in 0..10 {
        assert!(limiter.check_with("drain", at(start)).await.unwrap().allowed);
    }
    let denied = limiter.check_with("drain", at(start)).await.unwrap();
    assert!(!denied.allowed);
    assert!(
        denied.retry_after_ms.is_some_and(|ms| ms > 0 && ms <= 1000),
        "{denied:?}"
    );
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(limiter.check_with("drain", at(start + 2000)).await.unwrap().allowed);
    }
    assert_eq!(got, [true, true, false]);
}
