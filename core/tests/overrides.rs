//! Per-key overrides (issue 18): a different rate and burst for one key of
//! one policy, set at runtime in the store, seen by every check of that key,
//! on the memory store and on a real Redis (and Cluster, for cross-slot
//! refunds); TTLs end on the decision's clock (now_ms), never by sleeping.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use polylimit::{CheckOptions, Error, Limiter, LimiterConfig, OverrideSpec, Policy, RefundProbe, RequestInfo};
use serde_json::json;

/// One Redis for this file's tests; each test uses its own prefix.
static REDIS: LazyLock<support::RedisServer> = LazyLock::new(support::RedisServer::shared);

fn policy(v: serde_json::Value) -> Policy {
    Policy::from_value(&v, "").unwrap()
}

/// The same limiter on the memory store and on Redis (own prefix per test).
fn limiters(p: serde_json::Value, prefix: &str) -> Vec<(&'static str, Limiter)> {
    let mut memory = LimiterConfig::new(policy(p.clone()));
    memory.overrides = true;
    let mut config = LimiterConfig::new(policy(p)).with_store(REDIS.url());
    config.prefix = prefix.into();
    config.overrides = true;
    // Admissions, not latency: under load a call past 100ms would go to the local fallback.
    config.timeout = std::time::Duration::from_secs(10);
    vec![
        ("memory", Limiter::new(memory).unwrap()),
        ("redis", Limiter::new(config).unwrap()),
    ]
}

/// A limiter with overrides on.
fn with_overrides(mut config: LimiterConfig) -> Limiter {
    config.overrides = true;
    config.timeout = support::DECISIONS;
    Limiter::new(config).unwrap()
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

/// How many of `n` checks at `now` are allowed.
async fn admitted(limiter: &Limiter, key: &str, n: usize, now: i64) -> usize {
    let mut allowed = 0;
    for _ in 0..n {
        allowed += limiter.check_with(key, at(now)).await.unwrap().allowed as usize;
    }
    allowed
}

const NOW: i64 = 1_700_000_000_000;

#[tokio::test]
async fn an_override_raises_one_key_and_lowers_another() {
    for (store, limiter) in limiters(json!({"algorithm": "fixed_window", "rate": "5/1h"}), "raise") {
        limiter
            .set_override("vip", &spec("20/1h", None, None, NOW))
            .await
            .unwrap();
        limiter
            .set_override("batch", &spec("2/1h", None, None, NOW))
            .await
            .unwrap();
        let d = limiter.check_with("vip", at(NOW)).await.unwrap();
        assert_eq!(
            (d.allowed, d.limit, d.remaining),
            (true, 20, 19),
            "{store}: the override's limit"
        );
        assert_eq!(admitted(&limiter, "vip", 25, NOW).await, 19, "{store}");
        assert_eq!(admitted(&limiter, "batch", 5, NOW).await, 2, "{store}");
        let d = limiter.check_with("other", at(NOW)).await.unwrap();
        assert_eq!((d.limit, d.remaining), (5, 4), "{store}: other keys keep the policy");
        assert_eq!(admitted(&limiter, "other", 5, NOW).await, 4, "{store}");
    }
}

#[tokio::test]
async fn a_bucket_override_sets_rate_and_burst() {
    for (store, limiter) in limiters(json!({"algorithm": "gcra", "rate": "1/s", "burst": 2}), "bucket") {
        let set = limiter
            .set_override("k", &spec("10/s", Some(50), None, NOW))
            .await
            .unwrap();
        assert_eq!(
            (set.rate.as_str(), set.burst, set.expires_at_ms),
            ("10/1s", 50, None),
            "{store}"
        );
        assert_eq!(admitted(&limiter, "k", 60, NOW).await, 50, "{store}: burst 50");
        // 100 ms later, one more (10/s), not the policy's 1/s.
        assert_eq!(admitted(&limiter, "k", 3, NOW + 100).await, 1, "{store}");
        let d = limiter.check_with("k", at(NOW + 100)).await.unwrap();
        assert_eq!((d.limit, d.retry_after_ms), (50, Some(100)), "{store}");
    }
}

#[tokio::test]
async fn a_ttl_ends_on_the_decisions_clock() {
    for (store, limiter) in limiters(json!({"algorithm": "fixed_window", "rate": "3/1h"}), "ttl") {
        let window = NOW - NOW % 3_600_000;
        let set = limiter
            .set_override("k", &spec("100/1h", None, Some(Duration::from_secs(60)), window))
            .await
            .unwrap();
        assert_eq!(set.expires_at_ms, Some(window + 60_000), "{store}");
        assert_eq!(
            admitted(&limiter, "k", 10, window + 59_999).await,
            10,
            "{store}: in force"
        );
        let got = limiter.get_override("k", None, Some(window + 59_999)).await.unwrap();
        assert_eq!(got.map(|o| o.limit), Some(100), "{store}");
        // From its end on, the policy decides again, on its own state.
        assert_eq!(admitted(&limiter, "k", 5, window + 60_000).await, 3, "{store}: ended");
        assert_eq!(
            limiter.get_override("k", None, Some(window + 60_000)).await.unwrap(),
            None,
            "{store}"
        );
    }
}

#[tokio::test]
async fn removing_restores_the_policy_and_changing_starts_afresh() {
    for (store, limiter) in limiters(json!({"algorithm": "token_bucket", "rate": "3/1h"}), "remove") {
        assert_eq!(admitted(&limiter, "k", 1, NOW).await, 1, "{store}");
        limiter.set_override("k", &spec("5/1h", None, None, NOW)).await.unwrap();
        assert_eq!(admitted(&limiter, "k", 9, NOW).await, 5, "{store}");
        // A changed override: its own state starts full under the new numbers.
        limiter.set_override("k", &spec("7/1h", None, None, NOW)).await.unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!((d.allowed, d.limit, d.remaining), (true, 7, 6), "{store}");
        // A lower one: decided sanely at once.
        limiter.set_override("k", &spec("1/1h", None, None, NOW)).await.unwrap();
        assert_eq!(admitted(&limiter, "k", 3, NOW).await, 1, "{store}");
        assert!(limiter.remove_override("k", None).await.unwrap(), "{store}");
        assert!(
            !limiter.remove_override("k", None).await.unwrap(),
            "{store}: removed already"
        );
        // The policy's own state, as the override found it: 2 of 3 left.
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!((d.allowed, d.limit, d.remaining), (true, 3, 1), "{store}");
        assert_eq!(
            limiter.get_override("k", None, Some(NOW)).await.unwrap(),
            None,
            "{store}"
        );
    }
}

#[tokio::test]
async fn bad_overrides_name_their_field() {
    let limiter = with_overrides(LimiterConfig::new(policy(
        json!({"algorithm": "fixed_window", "rate": "3/1h"}),
    )));
    let e = limiter
        .set_override("k", &spec("ten/s", None, None, NOW))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Config { .. }) && e.to_string().starts_with("rate: \"ten/s\""),
        "{e}"
    );
    let e = limiter
        .set_override("k", &spec("10/s", Some(3), None, NOW))
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("burst"), "{e}");
    let mut bad = spec("10/s", None, None, NOW);
    bad.policy = Some("nope".into());
    let e = limiter.set_override("k", &bad).await.unwrap_err();
    assert!(e.to_string().starts_with("policy: \"nope\""), "{e}");
}

#[tokio::test]
async fn foreign_data_under_an_override_key_never_fails_a_check() {
    let mut config = LimiterConfig::new(policy(
        json!({"algorithm": "fixed_window", "rate": "3/1h", "name": "api"}),
    ))
    .with_store(REDIS.url());
    config.prefix = "foreign".into();
    let limiter = with_overrides(config);
    let record = "foreign:fixed_window:api:{k}:override";
    for foreign in [
        format!("SET {record} garbage"),
        format!("SET {record} \"o1 0 1 1 0 0\""),
        format!("SET {record} \"o1 99999999999999999999 1 1 0 0\""),
        format!("HSET {record} a b"),
    ] {
        REDIS.command(&format!("DEL {record}")).unwrap();
        REDIS.command(&foreign).unwrap();
        let d = limiter.check_with("k", at(NOW)).await.unwrap();
        assert_eq!(d.limit, 3, "{foreign}: the policy decides");
        assert_eq!(
            limiter.get_override("k", None, Some(NOW)).await.unwrap(),
            None,
            "{foreign}"
        );
    }
    // The record's layout, as set by the API.
    REDIS.command(&format!("DEL {record}")).unwrap();
    limiter.set_override("k", &spec("9/1h", None, None, NOW)).await.unwrap();
    let raw = REDIS.command(&format!("GET {record}")).unwrap();
    assert!(raw.contains("o1 9 3600000 9 0 0"), "{raw}");
    assert_eq!(limiter.check_with("k", at(NOW)).await.unwrap().limit, 9);
}

#[tokio::test]
async fn a_redis_ttl_also_expires_the_record() {
    let mut config = LimiterConfig::new(policy(json!({"rate": "3/1h"}))).with_store(REDIS.url());
    config.prefix = "pttl".into();
    let limiter = with_overrides(config);
    let mut s = spec("9/1h", None, Some(Duration::from_secs(600)), NOW);
    s.now_ms = None;
    limiter.set_override("k", &s).await.unwrap();
    let reply = REDIS.command("PTTL pttl:token_bucket:default:{k}:override").unwrap();
    let pttl: i64 = reply.trim().trim_start_matches(':').parse().unwrap();
    assert!((590_000..=600_000).contains(&pttl), "PTTL {pttl}");
}

#[tokio::test]
async fn the_memory_store_bounds_overrides_by_max_keys() {
    let mut config = LimiterConfig::new(policy(json!({"rate": "3/1h"})));
    config.max_keys = 4;
    let limiter = with_overrides(config);
    for i in 0..4 {
        let ttl = (i == 0).then_some(Duration::from_secs(1));
        limiter
            .set_override(&format!("k{i}"), &spec("9/1h", None, ttl, NOW))
            .await
            .unwrap();
    }
    let e = limiter
        .set_override("k4", &spec("9/1h", None, None, NOW))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("max_keys"), "{e}");
    // An expired one makes room.
    limiter
        .set_override("k4", &spec("9/1h", None, None, NOW + 1000))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_override_wins_over_a_tier_and_shows_in_the_headers() {
    for store in ["memory".to_string(), REDIS.url()] {
        let rules = format!(
            r#"
store: {store}
prefix: tiers
overrides: true
policies:
  free: {{ algorithm: fixed_window, rate: 2/1h }}
  pro:  {{ algorithm: fixed_window, rate: 10/1h }}
rules:
  - key: [user]
    tier: header:x-tier
    tiers: {{ free: free, pro: pro }}
    default_tier: free
"#
        );
        let limiter = Limiter::from_rules(&rules).unwrap();
        let request = |user: &str| RequestInfo {
            method: "GET".into(),
            path: "/".into(),
            user: Some(user.into()),
            now_ms: Some(NOW),
            headers: vec![("x-tier".into(), "free".into())],
            ..RequestInfo::default()
        };
        let mut s = spec("50/1h", None, None, NOW);
        s.policy = Some("free".into());
        limiter.set_override("user=acme", &s).await.unwrap();
        let outcome = limiter.check_request(&request("acme")).await.unwrap();
        let header = |name: &str| outcome.headers.get(name).unwrap_or_default().to_string();
        assert_eq!(header("X-RateLimit-Limit"), "50", "{store}");
        assert_eq!(header("X-RateLimit-Remaining"), "49", "{store}");
        assert_eq!(header("RateLimit-Policy"), "\"free\";q=50;w=3600", "{store}");
        assert_eq!(outcome.decisions[0].decision.limit, 50, "{store}");
        // Another free user keeps the tier's numbers.
        let other = limiter.check_request(&request("bob")).await.unwrap();
        assert_eq!(other.decisions[0].decision.limit, 2, "{store}");
        limiter.remove_override("user=acme", Some("free")).await.unwrap();
        limiter.reset("user=acme").await.unwrap();
    }
}

/// One cluster for the cross-slot test.
static CLUSTER: LazyLock<support::Topology> = LazyLock::new(support::Topology::cluster);

/// A cross-slot decision denied in its charge pass refunds the earlier slot
/// on the override's state with the override's numbers, as it charged it.
#[tokio::test]
async fn a_cross_slot_refund_gives_back_under_the_override() {
    let url = CLUSTER.url.clone();
    let config = || {
        let wide = Policy::parse(r#"{"name": "wide", "algorithm": "token_bucket", "rate": "2/h"}"#).unwrap();
        let narrow = Policy::parse(r#"{"name": "narrow", "algorithm": "fixed_window", "rate": "1/h"}"#).unwrap();
        let mut config = LimiterConfig::new(wide).with_store(url.clone());
        config.policies.push(narrow);
        config.prefix = "ovcontention".into();
        config.overrides = true;
        config.timeout = support::DECISIONS;
        config
    };
    let options = at(1_000_000);
    let probe = RefundProbe::new(config()).unwrap();
    let other = RefundProbe::new(config()).unwrap();
    let mut s = spec("5/h", None, None, 1_000_000);
    s.policy = Some("wide".into());
    probe.set_override("a", &s).await.unwrap();
    let fired = Arc::new(AtomicUsize::new(0));
    let (hook_other, hook_fired) = (other.clone(), fired.clone());
    probe.between_slot_passes(Some(Arc::new(move || {
        hook_fired.fetch_add(1, Ordering::SeqCst);
        let other = hook_other.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            assert!(runtime.block_on(other.check(&[(1, "b")], options)).unwrap().allowed);
        })
        .join()
        .unwrap();
    })));
    let result = probe.check(&[(0, "a"), (1, "b")], options).await.unwrap();
    probe.between_slot_passes(None);
    assert_eq!(fired.load(Ordering::SeqCst), 1);
    assert!(!result.allowed && result.decisions[0].allowed && !result.decisions[1].allowed);
    assert_eq!(result.decisions[0].limit, 5, "decided under the override");
    let after = probe.check(&[(0, "a")], options).await.unwrap();
    assert_eq!(
        (after.decisions[0].limit, after.decisions[0].remaining),
        (5, 4),
        "the refund gave the override's token back"
    );
}

/// Off by default: setting one is an error naming `overrides`, and the checks
/// of a limiter without them run the script as before (no override keys), so
/// a record set by a limiter with them changes nothing here.
#[tokio::test]
async fn overrides_are_opt_in() {
    let p = json!({"algorithm": "fixed_window", "rate": "3/1h"});
    let mut config = LimiterConfig::new(policy(p.clone())).with_store(REDIS.url());
    config.prefix = "optin".into();
    config.timeout = support::DECISIONS;
    let plain = Limiter::new(config.clone()).unwrap();
    let e = plain
        .set_override("k", &spec("9/1h", None, None, NOW))
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("overrides: false"), "{e}");
    let e = Limiter::new(LimiterConfig::new(policy(p)))
        .unwrap()
        .get_override("k", None, None)
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("overrides"), "{e}");
    with_overrides(config)
        .set_override("k", &spec("9/1h", None, None, NOW))
        .await
        .unwrap();
    assert_eq!(plain.check_with("k", at(NOW)).await.unwrap().limit, 3);
    let effective = polylimit::effective_config(
        polylimit::Naming::Snake,
        &json!({"policy": {"rate": "1/s"}, "overrides": true}),
    )
    .unwrap();
    assert_eq!(effective["overrides"], json!(true));
    let e = Limiter::from_value(&json!({"policy": {"rate": "1/s"}, "overrides": "yes"}))
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("overrides: \"yes\""), "{e}");
}

/// The general path of the script (several policies, a penalty, the two keys
/// of a sliding log): each policy's override is found among its own keys.
#[tokio::test]
async fn overrides_in_a_multi_policy_check_with_a_log_and_a_penalty() {
    let log = policy(json!({"name": "log", "algorithm": "sliding_window_log", "rate": "3/1h",
        "penalty": {"threshold": 100, "within": "1m", "cooldowns": ["1m"]}}));
    let wide = policy(json!({"name": "wide", "algorithm": "token_bucket", "rate": "100/1h"}));
    for store in ["memory".to_string(), REDIS.url()] {
        let mut config = LimiterConfig::new(log.clone()).with_store(store.clone());
        config.policies.push(wide.clone());
        config.prefix = "multi".into();
        let limiter = with_overrides(config);
        let mut s = spec("5/1h", None, None, NOW);
        s.policy = Some("log".into());
        limiter.set_override("k", &s).await.unwrap();
        let mut allowed = 0;
        for _ in 0..8 {
            let result = limiter.check_all("k", at(NOW)).await.unwrap();
            assert_eq!(result.decisions[0].limit, 5, "{store}");
            assert_eq!(
                result.decisions[1].limit, 100,
                "{store}: the other policy keeps its numbers"
            );
            allowed += result.allowed as usize;
        }
        assert_eq!(allowed, 5, "{store}");
        // The other key of the same limiter: the policy's 3.
        let mut other = 0;
        for _ in 0..5 {
            other += limiter.check_all("j", at(NOW)).await.unwrap().allowed as usize;
        }
        assert_eq!(other, 3, "{store}");
    }
}

/// With overrides on and none set, every algorithm decides exactly as with
/// them off (the script's override path falls through to the policy's).
#[tokio::test]
async fn overrides_on_without_one_decide_as_off() {
    let policies = [
        json!({"algorithm": "token_bucket", "rate": "2/1s", "burst": 3}),
        json!({"algorithm": "token_bucket", "rate": "2/1s", "burst": 3, "refill": "interval"}),
        json!({"algorithm": "gcra", "rate": "2/1s", "burst": 3}),
        json!({"algorithm": "leaky_bucket", "rate": "2/1s", "burst": 3}),
        json!({"algorithm": "leaky_bucket", "rate": "2/1s", "burst": 3, "mode": "shape"}),
        json!({"algorithm": "fixed_window", "rate": "3/1s"}),
        json!({"algorithm": "sliding_window_log", "rate": "3/1s"}),
        json!({"algorithm": "sliding_window_counter", "rate": "3/1s"}),
    ];
    for (n, p) in policies.iter().enumerate() {
        let build = |on: bool| {
            let mut config = LimiterConfig::new(policy(p.clone())).with_store(REDIS.url());
            config.prefix = format!("same-{n}-{on}");
            config.overrides = on;
            Limiter::new(config).unwrap()
        };
        let (off, on) = (build(false), build(true));
        for step in 0..40 {
            let options = at(NOW + step * 150);
            let a = off.check_with("k", options).await.unwrap();
            let b = on.check_with("k", options).await.unwrap();
            assert_eq!(a, b, "{p}: step {step}");
        }
    }
}

/// A concurrency policy limits slots in flight, not a rate: an override of
/// it is refused by name, and so is reading or removing one.
#[tokio::test]
async fn a_concurrency_policy_takes_no_override() {
    let limiter = with_overrides(LimiterConfig::new(policy(
        json!({"algorithm": "concurrency", "limit": 2}),
    )));
    let e = limiter
        .set_override("k", &spec("10/s", None, None, NOW))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Config { .. }) && e.to_string().starts_with("policy: \"default\" is a concurrency policy"),
        "{e}"
    );
    let e = limiter.get_override("k", None, Some(NOW)).await.unwrap_err();
    assert!(e.to_string().starts_with("policy: \"default\""), "{e}");
}

// Issue 32, item 3: with an adaptive policy the adaptive record's key comes
// after the override keys. A refund of a request admitted under an
// override goes to the override's state, not to the policy's (where it
// let a 4th request through a 3/1h window).
#[tokio::test]
async fn a_refund_under_an_override_of_an_adaptive_policy_goes_to_the_override() {
    let p = json!({"name": "api", "algorithm": "fixed_window", "rate": "3/1h",
        "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "1000/s"}});
    let hour = 1_699_999_200_000;
    // The refund path of a completion and of a cross-slot decision (both
    // pick the refund's keys from one layout), on one server and a cluster.
    for url in ["memory".to_string(), REDIS.url(), CLUSTER.url.clone()] {
        let mut config = LimiterConfig::new(policy(p.clone())).with_store(url.clone());
        config.prefix = "ovadaptive-refund".into();
        config.overrides = true;
        config.timeout = Duration::from_secs(10);
        let probe = RefundProbe::new(config).unwrap();
        let at = |now_ms| CheckOptions {
            cost: 1,
            now_ms: Some(now_ms),
        };
        for n in 0..3 {
            assert!(probe.check(&[(0, "k")], at(hour + n)).await.unwrap().allowed, "{url}");
        }
        probe
            .set_override("k", &spec("10/1h", None, None, hour + 3))
            .await
            .unwrap();
        let under = probe.check(&[(0, "k")], at(hour + 4)).await.unwrap();
        assert_eq!(under.decisions[0].limit, 10, "{url}");
        assert_eq!(probe.refund(&[(0, "k")], 1, hour + 4).await.unwrap(), 1, "{url}");
        let again = probe.check(&[(0, "k")], at(hour + 5)).await.unwrap();
        assert_eq!(
            (again.decisions[0].limit, again.decisions[0].remaining),
            (10, 9),
            "{url}: the override's count went back"
        );
        probe.remove_override("k").await.unwrap();
        assert!(
            !probe.check(&[(0, "k")], at(hour + 6)).await.unwrap().allowed,
            "{url}: 3/1h stays full"
        );
    }
}
