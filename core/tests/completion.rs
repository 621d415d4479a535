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
