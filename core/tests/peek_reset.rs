//! Peek and reset (issue 18): a peek gives the decision (or outcome) a check
//! would get and changes nothing, on memory, a real Redis and a real Redis
//! Cluster (where a request's keys fall in several slots), and while the
//! store is down; `reset_request` forgets exactly what a request would be
//! charged, penalty blocks included.

mod support;

use polylimit::{CheckOptions, Decision, Error, Limiter, LimiterConfig, Outcome, Policy, RequestInfo, Source};
use serde_json::{json, Value};

const NOW: i64 = 1_700_000_000_000;

/// Two policies on every key: a bucket (3, refilled within a second) and a
/// window of 5 per minute whose second denial within a minute blocks 10 s.
fn two_policies(store: &str, prefix: &str) -> Limiter {
    let bucket = Policy::from_value(
        &json!({"name": "per_second", "algorithm": "token_bucket", "rate": "10/s", "burst": 3}),
        "policy",
    )
    .unwrap();
    let window = Policy::from_value(
        &json!({"name": "per_minute", "algorithm": "fixed_window", "rate": "5/min",
                "penalty": {"threshold": 2, "within": "1m", "cooldowns": ["10s"]}}),
        "policy",
    )
    .unwrap();
    let mut config = LimiterConfig::new(bucket).with_store(store);
    config.timeout = support::DECISIONS;
    config.policies.push(window);
    config.prefix = prefix.to_string();
    Limiter::new(config).unwrap()
}

fn at(now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    }
}

/// Each second: two peeks, then a check. Returns (peek, check) per second.
async fn peek_then_check(limiter: &Limiter, key: &str, seconds: i64) -> Vec<(Decision, Decision)> {
    let mut out = Vec::new();
    for i in 0..seconds {
        let now = NOW + i * 1000;
        let first = limiter.peek_with(key, at(now)).await.unwrap();
        let second = limiter.peek_with(key, at(now)).await.unwrap();
        assert_eq!(first, second, "second {i}: a peek changed what the next one sees");
        let checked = limiter.check_with(key, at(now)).await.unwrap();
        out.push((first, checked));
    }
    out
}

async fn peeks_charge_nothing(store: &str, prefix: &str) {
    let limiter = two_policies(store, prefix);
    let steps = peek_then_check(&limiter, "k", 8).await;
    for (i, (peek, check)) in steps.iter().enumerate() {
        match i {
            // The window's 5 admissions, then its first denial: the peek saw each.
            0..=5 => assert_eq!(peek, check, "{store}: second {i}"),
            // The second denial starts the block; the peek before it reported
            // the plain denial (a peek records no denial).
            6 => {
                assert!(!peek.allowed && peek.source == Source::Store, "{store}: {peek:?}");
                assert!(!check.allowed && check.source == Source::Penalty, "{store}: {check:?}");
                assert_eq!(check.retry_after_ms, Some(10_000), "{store}");
            }
            // Blocked: the peek says so, and did not extend the block.
            _ => {
                assert_eq!(peek, check, "{store}: second {i}");
                assert_eq!(peek.source, Source::Penalty, "{store}");
                assert_eq!(peek.retry_after_ms, Some(9_000), "{store}");
            }
        }
    }
    assert!(steps[..5].iter().all(|(p, _)| p.allowed), "{store}: {steps:?}");
    // Peeks of another key, many times: that key is still fresh.
    for _ in 0..10 {
        limiter.peek_with("other", at(NOW)).await.unwrap();
    }
    let fresh = limiter.check_with("other", at(NOW)).await.unwrap();
    assert_eq!((fresh.allowed, fresh.remaining), (true, 2), "{store}: {fresh:?}");

    // reset(key) forgets the block too, in the store and the local fallback.
    limiter.reset("k").await.unwrap();
    let after = limiter.check_with("k", at(NOW + 8000)).await.unwrap();
    assert!(
        after.allowed && after.source == Source::Store,
        "{store}: after reset: {after:?}"
    );

    limiter.close();
    assert!(matches!(limiter.peek("k").await, Err(Error::Closed)));
}

#[tokio::test]
async fn peeks_on_memory_and_redis_charge_nothing() {
    peeks_charge_nothing("memory", "peek-mem").await;
    let redis = support::RedisServer::start();
    peeks_charge_nothing(&redis.url(), "peek-redis").await;
}

#[tokio::test]
async fn peeks_are_not_counted_in_the_metrics() {
    let limiter = two_policies("memory", "metrics");
    let fresh = limiter.metrics_text();
    for i in 0..20 {
        limiter.peek_with("k", at(NOW + i)).await.unwrap();
    }
    assert_eq!(limiter.metrics_text(), fresh);
    let rules = Limiter::from_rules(&rules_file("memory", "metrics-http").to_string()).unwrap();
    let fresh = rules.metrics_text();
    rules.peek_request(&login("203.0.113.7", "ann", NOW)).await.unwrap();
    assert_eq!(rules.metrics_text(), fresh);
    rules.check_request(&login("203.0.113.7", "ann", NOW)).await.unwrap();
    assert_ne!(rules.metrics_text(), fresh, "a check is counted");
}

/// Every API request is limited per client address; a login also per user
/// and address, with a block after two denials. An allowlisted network and
/// a path no rule matches are not limited.
fn rules_file(store: &str, prefix: &str) -> Value {
    json!({
        "store": store,
        "timeout": "10s", // decisions, not latency
        "prefix": prefix,
        "allowlist": ["10.0.0.0/8"],
        "policies": {
            "api": {"rate": "100/min", "burst": 100},
            "login": {"algorithm": "fixed_window", "rate": "3/15m",
                      "penalty": {"threshold": 2, "within": "15m", "cooldowns": ["1h"]}}
        },
        "rules": [
            {"match": {"path": "/api/*"}, "key": ["ip"], "policy": "api"},
            {"match": {"method": "POST", "path": "/api/login"}, "key": ["user", "ip"], "policy": "login"}
        ]
    })
}

fn login(ip: &str, user: &str, now_ms: i64) -> RequestInfo {
    RequestInfo::from_value(&json!({
        "method": "POST", "path": "/api/login", "peer": ip, "user": user, "now_ms": now_ms
    }))
    .unwrap()
}

/// The parts of an outcome a client sees (status, headers, body), and each
/// policy's decision.
type Seen = (Option<u16>, Vec<(String, String)>, Option<String>, Vec<Decision>);

fn seen(o: &Outcome) -> Seen {
    (
        o.status,
        o.headers.to_vec(),
        o.body.clone(),
        o.decisions.iter().map(|d| d.decision).collect(),
    )
}

async fn requests_peek_and_reset(store: &str, prefix: &str) {
    let limiter = Limiter::from_rules(&rules_file(store, prefix).to_string()).unwrap();
    let (ann, bob) = ("203.0.113.7", "198.51.100.9");
    // Ann: 3 logins pass, the 4th is denied, the 5th starts a block. Each
    // peeked twice first: the peek is the answer, and changes nothing.
    for i in 0..6 {
        let req = login(ann, "ann", NOW + i * 1000);
        let peeked = limiter.peek_request(&req).await.unwrap();
        assert_eq!(
            seen(&peeked),
            seen(&limiter.peek_request(&req).await.unwrap()),
            "{store}: {i}"
        );
        let checked = limiter.check_request(&req).await.unwrap();
        assert_eq!(peeked.decisions.len(), 2, "{store}: both rules match");
        if i == 4 {
            // The denial that starts the block: the peek reports the plain denial.
            assert_eq!(peeked.status, Some(429));
            assert_eq!(peeked.decisions[1].decision.source, Source::Store, "{store}");
            assert_eq!(checked.decisions[1].decision.source, Source::Penalty, "{store}");
        } else {
            assert_eq!(seen(&peeked), seen(&checked), "{store}: login {i}");
        }
        assert_eq!(checked.status.is_some(), i >= 3, "{store}: login {i}: {checked:?}");
    }
    let blocked = limiter.peek_request(&login(ann, "ann", NOW + 7000)).await.unwrap();
    assert_eq!(blocked.status, Some(429));
    assert_eq!(
        blocked.headers.get("Retry-After"),
        Some("3597"),
        "{store}: the rest of the 1 h block, not extended by peeks"
    );

    // Bob used the API once; Ann's reset leaves him alone. (At Ann's reset's
    // time: a state at NOW is idle again by NOW + 8 s, and the memory store
    // may reclaim an idle key once it has seen that later time.)
    let bob_api = RequestInfo::from_value(&json!({"path": "/api/x", "peer": bob, "now_ms": NOW + 8000})).unwrap();
    limiter.check_request(&bob_api).await.unwrap();

    // Ann's reset forgets her two (policy, key) pairs, the block included.
    let count = limiter.reset_request(&login(ann, "ann", NOW + 8000)).await.unwrap();
    assert_eq!(count, 2, "{store}");
    let again = limiter.check_request(&login(ann, "ann", NOW + 8000)).await.unwrap();
    assert_eq!(again.status, None, "{store}: {again:?}");
    assert_eq!(
        again.decisions[0].decision.remaining, 99,
        "{store}: the api budget is fresh"
    );
    assert_eq!(
        again.decisions[1].decision.remaining, 2,
        "{store}: the login window is fresh"
    );
    let bob_next = limiter.check_request(&bob_api).await.unwrap();
    assert_eq!(
        bob_next.decisions[0].decision.remaining, 98,
        "{store}: Bob's state stays"
    );

    // Nothing limits these: nothing to forget.
    let other = RequestInfo::from_value(&json!({"path": "/health", "peer": ann, "now_ms": NOW})).unwrap();
    assert_eq!(limiter.reset_request(&other).await.unwrap(), 0);
    let inside = RequestInfo::from_value(&json!({"path": "/api/x", "peer": "10.1.2.3", "now_ms": NOW})).unwrap();
    assert_eq!(limiter.reset_request(&inside).await.unwrap(), 0);
    assert_eq!(limiter.peek_request(&inside).await.unwrap().status, None);
}

#[tokio::test]
async fn requests_on_memory_and_redis() {
    requests_peek_and_reset("memory", "req-mem").await;
    let redis = support::RedisServer::start();
    requests_peek_and_reset(&redis.url(), "req-redis").await;
}

// A login's two keys (`ip=…` and `user=…|ip=…`) live in different cluster
// slots: the peek peeks every slot group and charges none.
#[tokio::test]
async fn requests_on_a_redis_cluster() {
    let cluster = support::Topology::cluster();
    requests_peek_and_reset(&cluster.url, "req-cluster").await;
    peeks_charge_nothing(&cluster.url, "peek-cluster").await;
}

#[tokio::test]
async fn a_limiter_without_rules_has_no_request_to_peek_or_reset() {
    let limiter = two_policies("memory", "none");
    let req = login("203.0.113.7", "ann", NOW);
    assert!(matches!(limiter.peek_request(&req).await, Err(Error::Config { .. })));
    assert!(matches!(limiter.reset_request(&req).await, Err(Error::Config { .. })));
}

/// A store nothing listens on: every call fails at once.
fn dead_store() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("redis://127.0.0.1:{port}")
}

#[tokio::test]
async fn while_the_store_is_down_peeks_decide_by_each_policy_fallback() {
    let store = dead_store();
    let policy = |mode: &str| {
        Policy::from_value(
            &json!({"name": mode, "rate": "2/min", "burst": 2, "on_store_error": mode}),
            "policy",
        )
        .unwrap()
    };
    let one = |mode: &str| Limiter::new(LimiterConfig::new(policy(mode)).with_store(store.clone())).unwrap();

    // local: the local memory store is peeked, not charged.
    let local = one("local");
    for _ in 0..5 {
        let d = local.peek_with("k", at(NOW)).await.unwrap();
        assert_eq!((d.allowed, d.remaining, d.source), (true, 1, Source::Local), "{d:?}");
    }
    let d = local.check_with("k", at(NOW)).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.source), (true, 1, Source::Local), "{d:?}");
    let d = local.peek_with("k", at(NOW)).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.source), (true, 0, Source::Local), "{d:?}");

    let open = one("fail_open").peek_with("k", at(NOW)).await.unwrap();
    assert_eq!((open.allowed, open.source), (true, Source::FailOpen));
    let closed = one("fail_closed").peek_with("k", at(NOW)).await.unwrap();
    assert_eq!((closed.allowed, closed.source), (false, Source::FailClosed));

    // A request's peek: a fail_closed policy answers 503, as a check would.
    let mut rules = rules_file(&store, "down");
    rules["policies"]["api"]["on_store_error"] = json!("fail_closed");
    let limiter = Limiter::from_rules(&rules.to_string()).unwrap();
    let api = RequestInfo::from_value(&json!({"path": "/api/x", "peer": "203.0.113.7", "now_ms": NOW})).unwrap();
    assert_eq!(limiter.peek_request(&api).await.unwrap().status, Some(503));
    // A reset needs the store: it says so, it does not pretend.
    assert!(matches!(
        limiter.reset_request(&api).await,
        Err(Error::StoreUnavailable { .. })
    ));
}
