//! Cluster and Sentinel URLs carry the password of the data nodes, and TLS
//! stores trust the CA `tls_ca` names: with them
//! the store decides; with a wrong one every check still gets an answer, from
//! the policy's fallback, and the failure is counted, never raised.

mod support;

use polylimit::{Limiter, LimiterConfig, Policy, Source};
use serde_json::json;
use support::Topology;

fn limiter_on(url: &str) -> Limiter {
    let policy = Policy::from_value(&json!({"rate": "1/h", "burst": 3}), "policy").expect("a valid policy");
    Limiter::new(generous(LimiterConfig::new(policy).with_store(url))).expect("a valid config")
}

/// Decisions, not latency: a TLS handshake or a Sentinel lookup on a loaded CI
/// host can take longer than the 1 s connect and 100 ms call defaults, and the
/// check then falls back. A wrong password or CA fails at once all the same.
fn generous(mut config: LimiterConfig) -> LimiterConfig {
    config.timeout = std::time::Duration::from_secs(10);
    config.connect_timeout = std::time::Duration::from_secs(10);
    config
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

/// A store serving TLS with a certificate from a CA made for the run: with
/// `tls_ca` naming that CA the store decides; without it (the public web CAs)
/// the certificate is refused, and the fallback answers.
async fn decides_over_tls_with_its_ca(kind: &str) {
    let topology = Topology::with_tls(kind);
    assert!(topology.url.starts_with("rediss"), "{}", topology.url);
    let policy = || Policy::from_value(&json!({"rate": "1/h", "burst": 3}), "policy").expect("a valid policy");
    let mut config = LimiterConfig::new(policy()).with_store(&topology.url);
    config.tls_ca = topology.ca.clone();
    let trusted = Limiter::new(generous(config)).expect("a valid config");
    let d = trusted.check("k").await.expect("a decision");
    assert_eq!((d.allowed, d.remaining, d.source), (true, 2, Source::Store));
    let untrusted = limiter_on(&topology.url);
    let d = untrusted.check("k").await.expect("an answer, not an error");
    assert_eq!(d.source, Source::Local);
}

#[tokio::test]
async fn a_tls_server() {
    decides_over_tls_with_its_ca("single").await;
}

#[tokio::test]
async fn a_tls_cluster() {
    decides_over_tls_with_its_ca("cluster").await;
}

#[tokio::test]
async fn a_tls_sentinel_primary() {
    decides_over_tls_with_its_ca("sentinel").await;
}

#[test]
fn an_unreadable_tls_ca_is_a_config_error_naming_it() {
    let policy = Policy::from_value(&json!({"rate": "1/s"}), "policy").expect("a valid policy");
    let mut config = LimiterConfig::new(policy).with_store("rediss://127.0.0.1:1");
    config.tls_ca = Some("/nonexistent/ca.pem".into());
    match Limiter::new(config) {
        Err(polylimit::Error::Config { field, .. }) => assert_eq!(field, "tls_ca"),
        Err(other) => panic!("expected a config error naming tls_ca, got {other:?}"),
        Ok(_) => panic!("an unreadable tls_ca was accepted"),
    }
}
