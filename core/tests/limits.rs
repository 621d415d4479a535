//! Policy-wide limits set at runtime (issue 38, part 2): other numbers for
//! every key of a policy, kept in the store, applied at the next check by
//! every process on it; a per-key override still wins; on the memory store,
//! a real Redis and a Redis Cluster (where a process reads the record at
//! most once per `CLUSTER_REFRESH_MS`, on the breaker's clock). TTLs end on
//! the decision's clock (now_ms), never by sleeping.

mod support;

use std::sync::LazyLock;
use std::time::Duration;

use polylimit::breaker::ManualClock;
use polylimit::{CheckOptions, Error, Limiter, LimiterConfig, OverrideSpec, Policy, RequestInfo};
use serde_json::json;

static REDIS: LazyLock<support::RedisServer> = LazyLock::new(support::RedisServer::shared);
static CLUSTER: LazyLock<support::Topology> = LazyLock::new(support::Topology::cluster);

const NOW: i64 = 1_699_999_200_000; // an hour's start

fn policy(v: serde_json::Value) -> Policy {
    Policy::from_value(&v, "").unwrap()
}

fn config(p: &serde_json::Value, store: &str, prefix: &str) -> LimiterConfig {
    let mut config = LimiterConfig::new(policy(p.clone()));
    if store != "memory" {
        config = config.with_store(store.to_string());
    }
    config.prefix = prefix.into();
    config.overrides = true;
    config.timeout = support::DECISIONS;
    config
}

/// The same limiter on the memory store and on Redis (own prefix per test).
fn limiters(p: serde_json::Value, prefix: &str) -> Vec<(&'static str, Limiter)> {
    vec![
        ("memory", Limiter::new(config(&p, "memory", prefix)).unwrap()),
        ("redis", Limiter::new(config(&p, &REDIS.url(), prefix)).unwrap()),
    ]
}

fn at(now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    }
}

fn spec(rate: &str, burst: Option<u64>, ttl: Option<Duration>, now_ms: i64) -> OverrideSpec {
    OverrideSpec {
        policy: None,
        rate: rate.into(),
        burst,
        ttl,
        now_ms: Some(now_ms),
    }
}

async fn admitted(limiter: &Limiter, key: &str, n: usize, now: i64) -> usize {
    let mut allowed = 0;
    for _ in 0..n {
        allowed += limiter.check_with(key, at(now)).await.unwrap().allowed as usize;
    }
    allowed
}

#[tokio::test]
async fn a_limit_applies_to_every_key_and_removing_restores_the_policy() {
    for (store, limiter) in limiters(json!({"algorithm": "fixed_window", "rate": "5/1h"}), "lim-every") {
        assert_eq!(admitted(&limiter, "a", 1, NOW).await, 1, "{store}");
        let set = limiter.set_limit(&spec("2/1h", None, None, NOW)).await.unwrap();
        assert_eq!(
            (set.rate.as_str(), set.burst, set.expires_at_ms),
            ("2/1h", 2, None),
            "{store}"
        );
        for key in ["a", "b", "c"] {
            let d = limiter.check_with(key, at(NOW)).await.unwrap();
            assert_eq!(
                (d.allowed, d.limit, d.remaining),
                (true, 2, 1),
                "{store}: {key} starts fresh under the limit"
            );
            assert_eq!(admitted(&limiter, key, 5, NOW).await, 1, "{store}: {key}");
        }
        assert_eq!(limiter.get_limit(None, Some(NOW)).await.unwrap(), Some(set), "{store}");
        assert!(limiter.remove_limit(None).await.unwrap(), "{store}");
        assert!(!limiter.remove_limit(None).await.unwrap(), "{store}: removed already");
        assert_eq!(limiter.get_limit(None, Some(NOW)).await.unwrap(), None, "{store}");
        // The policy's own state, as the limit found it: a used 1 of 5.
        let d = limiter.check_with("a", at(NOW)).await.unwrap();
        assert_eq!((d.allowed, d.limit, d.remaining), (true, 5, 3), "{store}");
        let d = limiter.check_with("b", at(NOW)).await.unwrap();
        assert_eq!((d.limit, d.remaining), (5, 4), "{store}");
    }
}

#[tokio::test]
async fn a_changed_limit_starts_every_key_fresh() {
    for (store, limiter) in limiters(json!({"algorithm": "token_bucket", "rate": "3/1h"}), "lim-change") {
        limiter.set_limit(&spec("5/1h", None, None, NOW)).await.unwrap();
        assert_eq!(admitted(&limiter, "k", 9, NOW).await, 5, "{store}");
        limiter.set_limit(&spec("7/1h", None, None, NOW)).await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!(
            (d.allowed, d.limit, d.remaining),
            (true, 7, 6),
            "{store}: never the old state"
        );
        // The same numbers set again: a new generation, a fresh state.
        limiter.set_limit(&spec("7/1h", None, None, NOW)).await.unwrap();
        assert_eq!(admitted(&limiter, "k", 9, NOW).await, 7, "{store}");
        limiter.set_limit(&spec("1/1h", None, None, NOW)).await.unwrap();
        assert_eq!(admitted(&limiter, "k", 3, NOW).await, 1, "{store}");
        limiter.remove_limit(None).await.unwrap();
    }
}

#[tokio::test]
async fn a_per_key_override_wins_over_the_limit() {
    for (store, limiter) in limiters(json!({"algorithm": "gcra", "rate": "1/s", "burst": 2}), "lim-override") {
        limiter.set_limit(&spec("10/s", Some(4), None, NOW)).await.unwrap();
        limiter
            .set_override("vip", &spec("10/s", Some(20), None, NOW))
            .await
            .unwrap();
        assert_eq!(admitted(&limiter, "vip", 30, NOW).await, 20, "{store}: the override");
        assert_eq!(admitted(&limiter, "other", 30, NOW).await, 4, "{store}: the limit");
        let d = limiter.check_with("other", at(NOW + 100)).await.unwrap();
        assert_eq!((d.allowed, d.limit), (true, 4), "{store}: the limit's rate, 10/s");
        limiter.remove_override("vip", None).await.unwrap();
        let d = limiter.check_with("vip", at(NOW)).await.unwrap();
        assert_eq!(
            (d.allowed, d.limit, d.remaining),
            (true, 4, 3),
            "{store}: then the limit"
        );
        limiter.remove_limit(None).await.unwrap();
    }
}

#[tokio::test]
async fn a_ttl_ends_on_the_decisions_clock() {
    for (store, limiter) in limiters(json!({"algorithm": "fixed_window", "rate": "3/1h"}), "lim-ttl") {
        let set = limiter
            .set_limit(&spec("10/1h", None, Some(Duration::from_secs(60)), NOW))
            .await
            .unwrap();
        assert_eq!(set.expires_at_ms, Some(NOW + 60_000), "{store}");
        assert_eq!(admitted(&limiter, "k", 12, NOW + 59_999).await, 10, "{store}");
        let d = limiter.check_with("k", at(NOW + 60_000)).await.unwrap();
        assert_eq!(
            (d.allowed, d.limit, d.remaining),
            (true, 3, 2),
            "{store}: the policy again"
        );
        assert_eq!(
            limiter.get_limit(None, Some(NOW + 60_000)).await.unwrap(),
            None,
            "{store}"
        );
        assert!(
            limiter.get_limit(None, Some(NOW + 1)).await.unwrap().is_some(),
            "{store}"
        );
        limiter.remove_limit(None).await.unwrap();
    }
}

#[tokio::test]
async fn every_process_on_the_store_applies_it_at_the_next_check() {
    let p = json!({"name": "api", "algorithm": "fixed_window", "rate": "100/1h"});
    let a = Limiter::new(config(&p, &REDIS.url(), "lim-shared")).unwrap();
    let b = Limiter::new(config(&p, &REDIS.url(), "lim-shared")).unwrap();
    assert_eq!(b.check_with("k", at(NOW)).await.unwrap().limit, 100);
    a.set_limit(&spec("2/1h", None, None, NOW)).await.unwrap();
    assert_eq!(
        admitted(&b, "k", 5, NOW).await,
        2,
        "the other process, at its next check"
    );
    assert!(!a.check_with("k", at(NOW)).await.unwrap().allowed, "one state for both");
    assert!(b.remove_limit(Some("api")).await.unwrap());
    assert_eq!(a.check_with("k", at(NOW)).await.unwrap().limit, 100);
}

#[tokio::test]
async fn on_a_cluster_a_change_applies_within_the_refresh_bound() {
    let p = json!({"name": "api", "algorithm": "fixed_window", "rate": "100/1h"});
    let clock = ManualClock::new();
    let a = Limiter::new(config(&p, &CLUSTER.url, "lim-cluster")).unwrap();
    let b = Limiter::new(config(&p, &CLUSTER.url, "lim-cluster")).unwrap();
    b.set_breaker_clock(std::sync::Arc::new(clock.clone()));
    assert_eq!(b.check_with("k", at(NOW)).await.unwrap().limit, 100, "b read: no limit");
    a.set_limit(&spec("3/1h", None, None, NOW)).await.unwrap();
    // The process that set it applies it at once.
    assert_eq!(a.check_with("k", at(NOW)).await.unwrap().limit, 3);
    // Another one keeps what it read for less than the bound...
    clock.advance(Duration::from_millis(polylimit::CLUSTER_REFRESH_MS as u64 - 1));
    assert_eq!(
        b.check_with("k2", at(NOW)).await.unwrap().limit,
        100,
        "within the bound: stale"
    );
    // ...and applies it once the bound has passed.
    clock.advance(Duration::from_millis(1));
    assert_eq!(admitted(&b, "k", 5, NOW).await, 2, "b: 3/1h, one taken by a");
    assert!(
        !a.check_with("k", at(NOW)).await.unwrap().allowed,
        "one state on the cluster"
    );
    assert!(a.remove_limit(None).await.unwrap());
    clock.advance(Duration::from_millis(polylimit::CLUSTER_REFRESH_MS as u64));
    assert_eq!(b.check_with("k", at(NOW)).await.unwrap().limit, 100);
}

#[tokio::test]
async fn limits_are_opt_in_and_bad_input_names_its_field() {
    let p = json!({"name": "api", "algorithm": "fixed_window", "rate": "3/1h"});
    let mut off = config(&p, "memory", "x");
    off.overrides = false;
    let e = Limiter::new(off)
        .unwrap()
        .set_limit(&spec("1/s", None, None, NOW))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Config { .. }) && e.to_string().starts_with("overrides"),
        "{e}"
    );
    let limiter = Limiter::new(config(&p, "memory", "x")).unwrap();
    let e = limiter.set_limit(&spec("ten/s", None, None, NOW)).await.unwrap_err();
    assert!(e.to_string().starts_with("rate: \"ten/s\""), "{e}");
    let e = limiter.set_limit(&spec("10/s", Some(3), None, NOW)).await.unwrap_err();
    assert!(e.to_string().starts_with("burst"), "{e}");
    let mut bad = spec("10/s", None, None, NOW);
    bad.policy = Some("nope".into());
    let e = limiter.set_limit(&bad).await.unwrap_err();
    assert!(e.to_string().starts_with("policy: \"nope\""), "{e}");
    let e = limiter.get_limit(Some("nope"), None).await.unwrap_err();
    assert!(e.to_string().starts_with("policy"), "{e}");
    let e = OverrideSpec::from_value(&json!({"rate": "1/s", "ttl": "soon"}), polylimit::Naming::Snake).unwrap_err();
    assert!(e.to_string().starts_with("ttl"), "{e}");
}

#[tokio::test]
async fn each_change_is_counted() {
    for (store, limiter) in limiters(
        json!({"name": "api", "algorithm": "fixed_window", "rate": "3/1h"}),
        "lim-audit",
    ) {
        assert!(
            !limiter.metrics_text().contains("polylimit_limit_changes_total"),
            "{store}"
        );
        limiter.set_limit(&spec("5/1h", None, None, NOW)).await.unwrap();
        limiter.set_limit(&spec("6/1h", None, None, NOW)).await.unwrap();
        limiter.remove_limit(None).await.unwrap();
        let text = limiter.metrics_text();
        assert!(
            text.contains("# TYPE polylimit_limit_changes_total counter"),
            "{store}: {text}"
        );
        assert!(
            text.contains("polylimit_limit_changes_total{policy=\"api\",action=\"set\"} 2"),
            "{store}: {text}"
        );
        assert!(
            text.contains("polylimit_limit_changes_total{policy=\"api\",action=\"remove\"} 1"),
            "{store}: {text}"
        );
    }
}

/// `count: failed` on POST /login per user: a completion gives back to the
/// state it charged, the limit's; nothing once the limit changed.
#[tokio::test]
async fn a_completion_refunds_the_limits_state_and_nothing_once_it_changed() {
    for store in ["memory".to_string(), REDIS.url(), CLUSTER.url.clone()] {
        let rules = json!({
            "store": store,
            "prefix": "lim-complete",
            "timeout": "10s",
            "overrides": true,
            "policies": {"login": {"algorithm": "fixed_window", "rate": "5/1h"}},
            "rules": [{"match": {"path": "/login"}, "key": ["user"], "policy": "login", "count": "failed"}],
        });
        let limiter = Limiter::from_document(&rules).unwrap();
        let request = |now_ms: i64| RequestInfo {
            method: "POST".into(),
            path: "/login".into(),
            user: Some("alice".into()),
            now_ms: Some(now_ms),
            ..RequestInfo::default()
        };
        limiter.set_limit(&spec("2/1h", None, None, NOW)).await.unwrap();
        let o = limiter.check_request(&request(NOW)).await.unwrap();
        let header = |name: &str| o.headers.get(name).unwrap_or_default().to_string();
        assert_eq!(
            (header("X-RateLimit-Limit"), header("X-RateLimit-Remaining")),
            ("2".into(), "1".into()),
            "{store}: the limit in force"
        );
        assert_eq!(
            limiter
                .complete(o.completion.as_ref().unwrap(), Some(200))
                .await
                .unwrap(),
            1,
            "{store}"
        );
        let o = limiter.check_request(&request(NOW + 1)).await.unwrap();
        assert_eq!(
            o.decisions[0].decision.remaining, 1,
            "{store}: given back to the limit's state"
        );
        // A changed limit: the charge is not given to its fresh state.
        limiter.set_limit(&spec("3/1h", None, None, NOW)).await.unwrap();
        assert_eq!(
            limiter
                .complete(o.completion.as_ref().unwrap(), Some(200))
                .await
                .unwrap(),
            0,
            "{store}"
        );
        let o = limiter.check_request(&request(NOW + 2)).await.unwrap();
        assert_eq!(
            (o.decisions[0].decision.limit, o.decisions[0].decision.remaining),
            (3, 2),
            "{store}"
        );
        limiter.remove_limit(None).await.unwrap();
        limiter.reset("user=alice").await.unwrap();
    }
}

#[tokio::test]
async fn reset_keeps_the_limit_and_a_concurrency_policy_takes_none() {
    for (store, limiter) in limiters(
        json!({"name": "api", "algorithm": "fixed_window", "rate": "3/1h"}),
        "lim-reset",
    ) {
        limiter.set_limit(&spec("1/1h", None, None, NOW)).await.unwrap();
        assert_eq!(admitted(&limiter, "k", 2, NOW).await, 1, "{store}");
        limiter.reset("k").await.unwrap();
        assert!(limiter.get_limit(None, Some(NOW)).await.unwrap().is_some(), "{store}");
        assert_eq!(
            admitted(&limiter, "k", 2, NOW).await,
            1,
            "{store}: fresh, under the limit"
        );
        limiter.remove_limit(None).await.unwrap();
    }
    let c = Limiter::new(config(&json!({"algorithm": "concurrency", "limit": 2}), "memory", "c")).unwrap();
    let e = c.set_limit(&spec("1/s", None, None, NOW)).await.unwrap_err();
    assert!(e.to_string().starts_with("policy"), "{e}");
}
