//! Cluster and Sentinel URLs carry the password of the data nodes: with it
//! the store decides; with a wrong one every check still gets an answer, from
//! the policy's fallback, and the failure is counted, never raised.

mod support;

use polylimit::{Limiter, LimiterConfig, Policy, Source};
use serde_json::json;
use support::Topology;

fn limiter_on(url: &str) -> Limiter {
    let policy = Policy::from_value(&json!({"rate": "1/h", "burst": 3}), "policy").expect("a valid policy");
    Limiter::new(LimiterConfig::new(policy).with_store(url)).expect("a valid config")
}

async fn decides_with_the_password_and_falls_back_without(kind: &str) {
    let topology = Topology::with_password(kind, "s3cret");
    let limiter = limiter_on(&topology.url);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let d = limiter.check("k").await.expect("a decision");
        seen.push((d.allowed, d.source));
    }
    assert_eq!(
        seen,
        [
            (true, Source::Store),
            (true, Source::Store),
            (true, Source::Store),
            (false, Source::Store)
        ]
    );
    let wrong = limiter_on(&topology.url.replace(":s3cret@", ":wrong@"));
    let d = wrong.check("k").await.expect("an answer, not an error");
    assert_eq!((d.allowed, d.source), (true, Source::Local));
    assert!(!wrong.metrics_text().contains("polylimit_store_errors_total 0\n"));
}

#[tokio::test]
async fn a_password_protected_cluster() {
    decides_with_the_password_and_falls_back_without("cluster").await;
}

#[tokio::test]
async fn a_password_protected_sentinel_primary() {
    decides_with_the_password_and_falls_back_without("sentinel").await;
}
