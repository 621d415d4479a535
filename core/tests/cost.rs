//! Cost from the request and reconciled after the response: the overshoot
//! bound (N requests of one key admitted at once, each reserving `r`, each
//! costing up to `m`, take the key at most `N * (m - r)` past its limit,
//! and later requests wait it off), on the memory store and a real Redis.
//! The exact per-algorithm numbers are the vectors in `tests/conformance/cost`.

mod support;

use polylimit::{CompleteOptions, Limiter, Outcome, RequestInfo};
use serde_json::json;

const T0: i64 = 1_699_999_980_000; // a minute boundary
const N: usize = 5;
const RESERVED: u64 = 2;
const MAX_COST: u64 = 6;

fn limiter(store: &str, algorithm: &str, prefix: &str) -> Limiter {
    let rules = json!({
        "store": store,
        "prefix": prefix,
        "timeout": "10s",
        "policies": {"gen": {"algorithm": algorithm, "rate": "10/min"}},
        "rules": [{"match": {"path": "/v1/*"}, "key": ["ip"], "policy": "gen",
                   "cost": RESERVED, "max_cost": MAX_COST}],
    });
    Limiter::from_rules(&rules.to_string()).unwrap()
}

fn request(now_ms: i64) -> RequestInfo {
    RequestInfo::from_value(&json!({"method": "POST", "path": "/v1/gen", "peer": "203.0.113.7", "now_ms": now_ms}))
        .unwrap()
}

async fn check(limiter: &Limiter, now_ms: i64) -> Outcome {
    limiter.check_request(&request(now_ms)).await.unwrap()
}

/// Admits N requests at once (the limit is N * RESERVED), then completes
/// each reporting far more than max_cost: each is charged up to max_cost.
async fn overshoot(limiter: &Limiter) {
    let mut tokens = Vec::new();
    for _ in 0..N {
        let outcome = check(limiter, T0).await;
        assert_eq!(outcome.status, None, "admitted on its reservation");
        tokens.push(outcome.completion.expect("a request with a cost rule carries a token"));
    }
    assert_eq!(
        check(limiter, T0).await.status,
        Some(429),
        "the reservations fill the limit"
    );
    for token in &tokens {
        let options = CompleteOptions {
            cost: Some(1_000_000),
            now_ms: Some(T0),
        };
        assert_eq!(limiter.complete_with(token, Some(200), options).await.unwrap(), 1);
        // A token completes once: a second report changes nothing.
        assert_eq!(limiter.complete_with(token, Some(200), options).await.unwrap(), 0);
    }
}

async fn bound_on(store: &str) {
    let over = N as u64 * (MAX_COST - RESERVED); // 20 past the limit of 10
                                                 // Token bucket (10/min: one token per 6 s): 20 tokens of debt, then the
                                                 // reservation's 2: the next request waits exactly (20 + 2) * 6 s.
    let bucket = limiter(store, "token_bucket", "cost-bucket");
    overshoot(&bucket).await;
    let denied = check(&bucket, T0).await;
    assert_eq!(denied.status, Some(429));
    let wait = (over + RESERVED) * 6_000;
    assert_eq!(
        denied.decisions[0].decision.retry_after_ms,
        Some(wait),
        "{store}: at most N*(m-r) over"
    );
    assert_eq!(
        check(&bucket, T0 + wait as i64 - 1).await.status,
        Some(429),
        "{store}: the debt is waited off"
    );
    assert_eq!(check(&bucket, T0 + wait as i64).await.status, None, "{store}");

    // Fixed window: 10 + 20 counted; denied until the window ends, then a fresh window.
    let window = limiter(store, "fixed_window", "cost-window");
    overshoot(&window).await;
    let denied = check(&window, T0 + 59_999).await;
    assert_eq!(denied.status, Some(429), "{store}");
    assert_eq!(denied.decisions[0].decision.retry_after_ms, Some(1));
    assert_eq!(
        check(&window, T0 + 60_000).await.status,
        None,
        "{store}: the next window"
    );

    // GCRA: the TAT moves (20 + 10) * 6 s ahead of now: the next request of
    // cost 2 fits once it is back to burst - 2.
    let gcra = limiter(store, "gcra", "cost-gcra");
    overshoot(&gcra).await;
    let denied = check(&gcra, T0).await;
    assert_eq!(
        denied.decisions[0].decision.retry_after_ms,
        Some(wait),
        "{store}: the same bound as the bucket"
    );
}

#[tokio::test]
async fn the_overshoot_is_bounded_by_n_times_max_cost_minus_reservation() {
    bound_on("memory").await;
    let redis = support::RedisServer::start();
    bound_on(&redis.url()).await;
}

#[tokio::test]
async fn bad_costs_are_refused_with_400_and_charge_nothing() {
    let rules = json!({
        "policies": {"llm": {"rate": "10/min", "burst": 10}},
        "rules": [{"match": {"path": "/*"}, "key": ["ip"], "policy": "llm", "cost": "header:x-cost", "max_cost": 8}],
    });
    let limiter = Limiter::from_rules(&rules.to_string()).unwrap();
    for bad in ["abc", "0", "-1", "9", "1e3", "99999999999999999999999", "0x5"] {
        let req = RequestInfo::from_value(&json!({"path": "/x", "peer": "203.0.113.7", "now_ms": T0,
                                                 "headers": {"x-cost": bad}}))
        .unwrap();
        let outcome = limiter.check_request(&req).await.unwrap();
        assert_eq!(outcome.status, Some(400), "{bad}");
        let body: serde_json::Value = serde_json::from_str(outcome.body.as_deref().unwrap()).unwrap();
        assert_eq!(body["error"], "invalid_cost");
        assert_eq!(body["field"], "header:x-cost");
        assert_eq!(body["value"], bad);
        assert!(outcome.completion.is_none());
    }
    // Nothing was charged: the whole burst is there.
    let req = RequestInfo::from_value(&json!({"path": "/x", "peer": "203.0.113.7", "now_ms": T0,
                                             "headers": {"x-cost": "8"}}))
    .unwrap();
    let outcome = limiter.check_request(&req).await.unwrap();
    assert_eq!(outcome.decisions[0].decision.remaining, 2);
    // A binding's cost (a cost function) above max_cost is refused too, naming `cost`.
    let req = RequestInfo::from_value(&json!({"path": "/x", "peer": "203.0.113.7", "now_ms": T0, "cost": 9})).unwrap();
    let outcome = limiter.check_request(&req).await.unwrap();
    assert_eq!(outcome.status, Some(400));
    assert!(outcome.body.unwrap().contains("\"field\":\"cost\""));
    // Each refusal is counted in the request metrics (a peek is not): 7 bad headers and the 9.
    let bad = RequestInfo::from_value(&json!({"path": "/x", "peer": "203.0.113.7", "now_ms": T0,
                                             "headers": {"x-cost": "abc"}}))
    .unwrap();
    assert_eq!(limiter.peek_request(&bad).await.unwrap().status, Some(400));
    let text = limiter.metrics_text();
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("polylimit_requests_total") && l.contains("decision=\"invalid_cost\""))
        .collect();
    assert_eq!(refused.len(), 1, "{text}");
    assert!(
        refused[0].contains("policy=\"llm\"") && refused[0].contains("source=\"cost\""),
        "{text}"
    );
    assert!(refused[0].ends_with(" 8"), "{text}");
    // The header is one the rules read, so a binding passes it.
    assert!(limiter.reads_header("X-Cost"));
}

#[test]
fn bad_cost_fields_are_config_errors_naming_the_field() {
    for (rule, field) in [
        (json!({"cost": 0}), "rules[0].cost"),
        (json!({"cost": "header:"}), "rules[0].cost"),
        (json!({"cost": 2000}), "rules[0].cost"),
        (json!({"cost": 5, "max_cost": 0}), "rules[0].max_cost"),
        (json!({"cost": 5, "cost_default": 2}), "rules[0].cost_default"),
        (
            json!({"cost": "header:x-cost", "cost_default": 9, "max_cost": 8}),
            "rules[0].cost_default",
        ),
    ] {
        let mut r = json!({"match": {"path": "/*"}, "policy": "p"});
        r.as_object_mut().unwrap().extend(rule.as_object().unwrap().clone());
        let doc = json!({"policies": {"p": {"rate": "10/s"}}, "rules": [r]});
        match Limiter::from_rules(&doc.to_string()) {
            Err(polylimit::Error::Config { field: f, .. }) => assert_eq!(f, field, "{rule}"),
            Err(e) => panic!("{rule}: {e}"),
            Ok(_) => panic!("{rule}: accepted"),
        }
    }
}

/// A reported cost the core refuses is an error naming `cost`, and the
/// request is still completed without it: a concurrency slot is released
/// and the reservation stands, as if the handler had reported nothing.
#[tokio::test]
async fn a_refused_cost_completes_the_request_without_it() {
    let rules = json!({
        "policies": {"gen": {"rate": "10/min", "burst": 10}, "slots": {"algorithm": "concurrency", "limit": RESERVED, "lease": "1h"}},
        "rules": [{"match": {"path": "/v1/*"}, "key": ["ip"], "policy": ["gen", "slots"], "cost": RESERVED}],
    });
    let limiter = Limiter::from_rules(&rules.to_string()).unwrap();
    let mut last = String::new();
    for bad in [json!(-1), json!(1.5), json!("ten")] {
        let token = check(&limiter, T0).await.completion.expect("a lease carries a token");
        assert_eq!(check(&limiter, T0).await.status, Some(429), "the slots are taken");
        let refused = limiter
            .complete_values(&token, Some(200), Some(&bad), Some(&json!(T0)))
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, polylimit::Error::Config { field, .. } if field == "cost"),
            "{bad}: {refused}"
        );
        last = token;
    }
    // Completed once: the token gives nothing more.
    assert_eq!(limiter.complete_values(&last, Some(200), None, None).await.unwrap(), 0);
    let next = check(&limiter, T0).await;
    assert_eq!(next.status, None, "each slot was released");
    assert_eq!(
        next.decisions[0].decision.remaining,
        10 - 4 * RESERVED,
        "each reservation stands"
    );
    // A bad clock is refused before anything is done.
    let token = next.completion.unwrap();
    let refused = limiter
        .complete_values(&token, Some(200), None, Some(&json!("soon")))
        .await
        .unwrap_err();
    assert!(matches!(&refused, polylimit::Error::Config { field, .. } if field == "now_ms"));
    assert_eq!(
        check(&limiter, T0).await.status,
        Some(429),
        "still held: nothing was completed"
    );
}
