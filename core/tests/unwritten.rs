//! Behaviours issue 32 item 12 asked to write down (README), and one to add:
//! a limiter without `overrides: true` says once that it ignores the
//! overrides others set in its store (SPEC §11); a regional cost above every
//! region's share is never admitted. Real redis-servers.

mod support;

use polylimit::{CheckOptions, Limiter, OverrideSpec, Source};
use serde_json::json;
use support::RedisServer;

const NOW: i64 = 1_700_000_000_000;

fn at(now_ms: i64, cost: u64) -> CheckOptions {
    CheckOptions {
        cost,
        now_ms: Some(now_ms),
    }
}

/// Limiter A honours overrides and sets one; limiter B, on the same store and
/// policy without `overrides: true`, ignores it, and says so: one look per
/// policy, started by a check, off its path.
#[tokio::test]
async fn a_limiter_ignoring_overrides_says_so_once() {
    let redis = RedisServer::start();
    let build = |overrides: bool, prefix: &str| {
        Limiter::from_value(&json!({
            "policy": { "algorithm": "fixed_window", "rate": "2/h" },
            "store": redis.url(),
            "timeout": "10s", // decisions, not latency
            "prefix": prefix,
            "overrides": overrides,
        }))
        .unwrap()
    };
    let honours = build(true, "shared");
    let ignores = build(false, "shared");
    let elsewhere = build(false, "other");
    let spec =
        OverrideSpec::from_value(&json!({"rate": "20/h", "ttl": "1h"}), polylimit::options::Naming::Snake).unwrap();
    honours.set_override("vip", &spec).await.unwrap();

    // B checks "vip" (under the policy's own numbers: it ignores the override).
    for n in 0..3 {
        let d = ignores.check_with("vip", at(NOW, 1)).await.unwrap();
        assert_eq!(d.allowed, n < 2, "check {n}: B applies 2/h, not the override's 20/h");
    }
    elsewhere.check_with("vip", at(NOW, 1)).await.unwrap();
    let line = "polylimit_overrides_ignored{policy=\"default\"} 1\n";
    ignores.settled().await; // the lookup that found the override
    elsewhere.settled().await;
    assert!(ignores.metrics_text().contains(line), "{}", ignores.metrics_text());
    assert!(
        !honours.metrics_text().contains("polylimit_overrides_ignored"),
        "a limiter with overrides: true honours them"
    );
    assert!(
        !elsewhere.metrics_text().contains(line),
        "another prefix has no override"
    );
}

/// Regions split the limit; a request is charged in one region, never split:
/// a cost above every region's share is denied (no retry time: it never
/// fits), though the global limit would hold it.
#[tokio::test]
async fn a_regional_cost_above_every_share_is_never_admitted() {
    let (eu, us) = (RedisServer::start(), RedisServer::start());
    let limiter = Limiter::from_value(&json!({
        "policy": { "algorithm": "fixed_window", "rate": "10/min" },
        "regions": { "eu": eu.url(), "us": us.url() },
        "region": "eu",
    }))
    .unwrap();
    let d = limiter.check_with("k", at(NOW, 6)).await.unwrap();
    assert_eq!(
        (d.allowed, d.retry_after_ms, d.source, d.limit),
        (false, None, Source::Store, 10),
        "6 is above both shares of 5"
    );
    let d = limiter.check_with("k", at(NOW, 5)).await.unwrap();
    assert!(d.allowed, "a cost within the local share");
    let d = limiter.check_with("k", at(NOW, 5)).await.unwrap();
    assert!(d.allowed, "borrowed whole from us");
    assert!(!limiter.check_with("k", at(NOW, 1)).await.unwrap().allowed);
}
