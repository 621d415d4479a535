//! "Count only some responses" (`count`) through the public API: the route
//! shorthand and the limiter option take it, bad values name their field, a
//! malformed token is a config error, and requests decided by the fallback
//! are given back on the local store (fail_open gives nothing to settle).
//! The per-algorithm behaviour is in `tests/conformance/http/count.json`.

mod support;

use polylimit::{Error, Limiter, RequestInfo, RouteShorthand};
use serde_json::json;

const T0: i64 = 1_699_999_200_000;

fn login(now_ms: i64) -> RequestInfo {
    RequestInfo {
        method: "POST".into(),
        path: "/login".into(),
        peer: Some("203.0.113.7".into()),
        now_ms: Some(now_ms),
        ..RequestInfo::default()
    }
}

fn field_of(e: Error) -> String {
    match e {
        Error::Config { field, .. } => field,
        other => panic!("not a config error: {other}"),
    }
}

#[tokio::test]
async fn a_route_rule_with_count_gives_successes_back() {
    let limiter = Limiter::from_value(&json!({"policy": {"algorithm": "fixed_window", "rate": "2/10s"}})).unwrap();
    let rule = limiter
        .route_rule_for(&RouteShorthand {
            count: Some(json!("failed")),
            per_route: true,
            ..Default::default()
        })
        .unwrap();
    for i in 0..5 {
        let o = limiter.check_route(&login(T0 + i), &rule).await.unwrap();
        assert_eq!(o.status, None, "success {i} was given back");
        let token = o.completion.expect("a token");
        assert_eq!(limiter.complete(&token, Some(200)).await.unwrap(), 1);
    }
    for status in [Some(401), None] {
        let o = limiter.check_route(&login(T0 + 10), &rule).await.unwrap();
        assert_eq!(limiter.complete(&o.completion.unwrap(), status).await.unwrap(), 0);
    }
    let o = limiter.check_route(&login(T0 + 11), &rule).await.unwrap();
    assert_eq!((o.status, o.completion), (Some(429), None));

    // Without `count`, no token: nothing to settle.
    let all = limiter.route_rule_for(&RouteShorthand::default()).unwrap();
    assert_eq!(limiter.check_route(&login(T0), &all).await.unwrap().completion, None);
}

#[tokio::test]
async fn the_limiter_option_makes_the_one_rule_count() {
    let limiter = Limiter::from_value(&json!({
        "policy": {"algorithm": "sliding_window_log", "rate": "1/10s"},
        "count": ["4xx", 503],
    }))
    .unwrap();
    let o = limiter.check_request(&login(T0)).await.unwrap();
    assert_eq!(limiter.complete(&o.completion.unwrap(), Some(500)).await.unwrap(), 1);
    let o = limiter.check_request(&login(T0 + 1)).await.unwrap();
    assert_eq!(limiter.complete(&o.completion.unwrap(), Some(503)).await.unwrap(), 0);
    assert_eq!(limiter.check_request(&login(T0 + 2)).await.unwrap().status, Some(429));
}

#[tokio::test]
async fn bad_values_name_their_field() {
    let rules = |count: serde_json::Value| {
        json!({"policies": {"p": {"rate": "1/s"}}, "rules": [
            {"match": {"path": "/a"}, "policy": "p"},
            {"match": {"path": "/b"}, "policy": "p", "count": count}]})
    };
    let e = Limiter::from_document(&rules(json!("6xx"))).err().unwrap();
    assert!(e.to_string().contains("6xx"), "{e}");
    assert_eq!(field_of(e), "rules[1].count");
    let e = Limiter::from_document(&rules(json!([401, "sometimes"]))).err().unwrap();
    assert_eq!(field_of(e), "rules[1].count[1]");
    let e = Limiter::from_value(&json!({"policy": {"rate": "1/s"}, "count": "never"}))
        .err()
        .unwrap();
    assert_eq!(field_of(e), "count");
    let limiter = Limiter::from_value(&json!({"policy": {"rate": "1/s"}})).unwrap();
    let e = limiter
        .route_rule_for(&RouteShorthand {
            count: Some(json!([])),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(field_of(e), "count");
}

#[tokio::test]
async fn a_malformed_token_is_a_config_error() {
    let limiter = Limiter::from_value(&json!({"policy": {"rate": "1/s"}})).unwrap();
    for token in ["", "hello", "pl1;n1;c1;rs7,failed,k", "pl9;n1;c1"] {
        let e = limiter.complete(token, Some(200)).await.unwrap_err();
        assert_eq!(field_of(e), "token", "{token:?}");
    }
}

#[tokio::test]
async fn the_local_fallback_gives_back_on_the_local_store_and_fail_open_has_nothing_to_settle() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("redis://127.0.0.1:{port}");
    let limiter = Limiter::from_value(&json!({
        "policies": {
            "local": {"algorithm": "fixed_window", "rate": "1/10s", "on_store_error": "local"},
            "open": {"algorithm": "fixed_window", "rate": "1/10s", "on_store_error": "fail_open"},
        },
        "count": "failed",
        "store": down,
    }))
    .unwrap();
    for i in 0..3 {
        let o = limiter.check_request(&login(T0 + i)).await.unwrap();
        assert_eq!(o.status, None, "request {i}");
        let token = o.completion.expect("the local decision is settled");
        assert!(token.contains(";rl0,"), "{token}");
        assert!(!token.contains(";rs") && !token.contains(",open"), "{token}");
        // Given back on the local store; the store being down raises nothing.
        assert_eq!(limiter.complete(&token, Some(200)).await.unwrap(), 1);
    }
    let only_open = Limiter::from_value(&json!({
        "policy": {"rate": "1/s", "on_store_error": "fail_open"},
        "count": "failed",
        "store": down,
    }))
    .unwrap();
    assert_eq!(only_open.check_request(&login(T0)).await.unwrap().completion, None);
}

#[tokio::test]
async fn completing_while_redis_is_down_keeps_the_charge_and_raises_nothing() {
    let mut redis = support::RedisServer::start();
    let limiter = Limiter::from_value(&json!({
        "policy": {"algorithm": "fixed_window", "rate": "2/10s"},
        "count": "failed",
        "store": redis.url(),
        "timeout": "200ms",
    }))
    .unwrap();
    let o = limiter.check_request(&login(T0)).await.unwrap();
    let token = o.completion.expect("a store decision to settle");
    assert!(token.contains(";rs0,"), "{token}");
    redis.kill();
    assert_eq!(limiter.complete(&token, Some(200)).await.unwrap(), 0);
    let metrics = limiter.metrics_text();
    assert!(!metrics.contains("polylimit_store_errors_total 0\n"), "{metrics}");
}

/// One Redis for the refund tests below; each uses its own prefix.
static REDIS: std::sync::LazyLock<support::RedisServer> = std::sync::LazyLock::new(support::RedisServer::shared);

/// An hour's start: every check below falls in one window.
const HOUR: i64 = 1_699_999_200_000;

/// The same rules on the memory store and on Redis: `policy` on POST /login
/// per user, `count: failed`, per-key overrides on.
fn login_limiters(policy: serde_json::Value, prefix: &str) -> Vec<(&'static str, Limiter)> {
    let rules = |store: String| {
        json!({
            "store": store,
            "prefix": prefix,
            "timeout": "10s",
            "overrides": true,
            "headers": "none",
            "policies": {"login": policy},
            "rules": [{"match": {"path": "/login"}, "key": ["user"], "policy": "login", "count": "failed"}],
        })
    };
    vec![
        ("memory", Limiter::from_document(&rules("memory".into())).unwrap()),
        ("redis", Limiter::from_document(&rules(REDIS.url())).unwrap()),
    ]
}

fn alice(now_ms: i64) -> RequestInfo {
    RequestInfo {
        user: Some("alice".into()),
        ..login(now_ms)
    }
}

/// Checks a failing login of alice and completes it with 401: whether it was let through.
async fn fail(limiter: &Limiter, now_ms: i64) -> bool {
    let o = limiter.check_request(&alice(now_ms)).await.unwrap();
    if let Some(token) = &o.completion {
        assert_eq!(
            limiter.complete(token, Some(401)).await.unwrap(),
            0,
            "a failure is charged"
        );
    }
    o.status.is_none()
}

/// Deletes the override records under `prefix`, as their Redis TTL does when it ends.
fn expire_override_records(prefix: &str) {
    let reply = REDIS.command(&format!("KEYS {prefix}:*:override")).unwrap();
    let keys: Vec<&str> = reply.lines().filter(|l| l.ends_with(":override")).collect();
    assert_eq!(keys.len(), 1, "{reply}");
    assert!(REDIS.command(&format!("DEL {}", keys[0])).unwrap().starts_with(":1"));
}

// Issue 32, item 1: a request in flight, a failure counted, then the first
// request completed with 200 twice. The second completion gives nothing
// back (and is no error): two failures fill 2/min, a third is refused.
#[tokio::test]
async fn a_token_completes_once() {
    for (store, limiter) in login_limiters(json!({"algorithm": "fixed_window", "rate": "2/min"}), "once") {
        let a = limiter.check_request(&alice(HOUR)).await.unwrap();
        let token = a.completion.expect("a token");
        assert!(fail(&limiter, HOUR + 1).await, "{store}");
        assert_eq!(
            limiter.complete(&token, Some(200)).await.unwrap(),
            1,
            "{store}: given back"
        );
        assert_eq!(limiter.complete(&token, Some(200)).await.unwrap(), 0, "{store}: once");
        assert_eq!(
            limiter.complete(&token, None).await.unwrap(),
            0,
            "{store}: once, whatever the status"
        );
        assert!(fail(&limiter, HOUR + 2).await, "{store}: the second failure");
        assert!(!fail(&limiter, HOUR + 3).await, "{store}: a third failure is refused");
    }
}

// Issue 32, item 2: a request admitted under an override whose TTL ends
// (on Redis its record expires; here deleted, as the expiry does) or that
// is removed before the request completes. Its charge went to the
// override's state: nothing goes back to the policy's own, which two
// failures filled (2/1h), so a third failure is refused on both stores.
#[tokio::test]
async fn a_refund_under_an_override_that_is_gone_gives_nothing_back() {
    for ending in ["ttl", "removed"] {
        let prefix = format!("ovgone-{ending}");
        for (store, limiter) in login_limiters(json!({"algorithm": "fixed_window", "rate": "2/1h"}), &prefix) {
            assert!(fail(&limiter, HOUR).await && fail(&limiter, HOUR + 1).await);
            let spec = polylimit::OverrideSpec {
                policy: Some("login".into()),
                rate: "5/1h".into(),
                burst: None,
                ttl: Some(std::time::Duration::from_secs(600)),
                now_ms: Some(HOUR + 2),
            };
            limiter.set_override("user=alice", &spec).await.unwrap();
            let a = limiter.check_request(&alice(HOUR + 3)).await.unwrap();
            assert_eq!(a.status, None, "{store}: admitted under the override");
            let later = match ending {
                "ttl" => {
                    if store == "redis" {
                        expire_override_records(&prefix);
                    }
                    HOUR + 600_002
                }
                _ => {
                    // (Whether it was in force: on the memory store's clock, not the test's.)
                    limiter.remove_override("user=alice", Some("login")).await.unwrap();
                    HOUR + 4
                }
            };
            let given = limiter.complete(&a.completion.unwrap(), Some(200)).await.unwrap();
            if ending == "removed" || store == "redis" {
                assert_eq!(given, 0, "{store} {ending}: the override's state is gone");
            }
            assert!(
                !fail(&limiter, later).await,
                "{store} {ending}: the policy's 2/1h stays full"
            );
        }
    }
}

// Issue 32, item 2: a request admitted under the policy, then an override
// set before it completes: its charge goes back to the policy's state (the
// one it went to), not to the override's.
#[tokio::test]
async fn a_refund_goes_to_the_policys_state_when_an_override_came_since() {
    for (store, limiter) in login_limiters(json!({"algorithm": "fixed_window", "rate": "2/1h"}), "ovsince") {
        let a = limiter.check_request(&alice(HOUR)).await.unwrap();
        assert!(fail(&limiter, HOUR + 1).await);
        let spec = polylimit::OverrideSpec {
            policy: Some("login".into()),
            rate: "1/1h".into(),
            burst: None,
            ttl: None,
            now_ms: Some(HOUR + 2),
        };
        limiter.set_override("user=alice", &spec).await.unwrap();
        assert!(fail(&limiter, HOUR + 3).await, "{store}: the override's 1/1h");
        assert_eq!(
            limiter.complete(&a.completion.unwrap(), Some(200)).await.unwrap(),
            1,
            "{store}"
        );
        assert!(
            !fail(&limiter, HOUR + 4).await,
            "{store}: the override's state kept its charge"
        );
        assert!(limiter.remove_override("user=alice", Some("login")).await.unwrap());
        assert!(
            fail(&limiter, HOUR + 5).await,
            "{store}: the policy's state got its charge back"
        );
        assert!(!fail(&limiter, HOUR + 6).await, "{store}: 2/1h");
    }
}

// Issue 32, item 2: a request admitted, the key reset (`reset_request`),
// the fresh state filled again, then the first request completes with 200:
// the fresh state never held its charge and gets nothing; a third failure
// is refused, for every algorithm.
#[tokio::test]
async fn a_refund_after_a_reset_gives_nothing_to_the_fresh_state() {
    for algorithm in [
        "fixed_window",
        "sliding_window_counter",
        "sliding_window_log",
        "token_bucket",
        "gcra",
        "leaky_bucket",
    ] {
        let policy = json!({"algorithm": algorithm, "rate": "2/1h"});
        for (store, limiter) in login_limiters(policy, &format!("reset-{algorithm}")) {
            let at = format!("{store} {algorithm}");
            let a = limiter.check_request(&alice(HOUR)).await.unwrap();
            assert_eq!(limiter.reset_request(&alice(HOUR + 1)).await.unwrap(), 1, "{at}");
            assert!(fail(&limiter, HOUR + 2).await && fail(&limiter, HOUR + 3).await, "{at}");
            assert_eq!(
                limiter.complete(&a.completion.unwrap(), Some(200)).await.unwrap(),
                0,
                "{at}"
            );
            assert!(!fail(&limiter, HOUR + 4).await, "{at}: a third failure is refused");
        }
    }
}
