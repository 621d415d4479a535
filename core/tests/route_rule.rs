//! Per-route rules (`Limiter::route_rule` / `check_route`, what the Python
//! decorator and dependency use): validated once, decided through the limiter
//! that built them, on its state, metrics and `close()`.

use polylimit::{Error, Limiter, RequestInfo, RouteShorthand};
use serde_json::json;

const NOW: i64 = 1_700_000_000_000;

fn request(peer: &str, key: Option<&str>) -> RequestInfo {
    RequestInfo {
        method: "GET".into(),
        path: "/x".into(),
        route: Some("/x".into()),
        peer: Some(peer.into()),
        key: key.map(str::to_string),
        now_ms: Some(NOW),
        ..Default::default()
    }
}

fn memory(burst: u64) -> Limiter {
    Limiter::from_value(&json!({ "policy": { "rate": "1/min", "burst": burst } })).unwrap()
}

#[test]
fn bad_key_dimensions_and_unknown_policies_are_config_errors() {
    let limiter = Limiter::from_rules("policies: { api: { rate: 1/s }, pay: { rate: 1/s } }\n").unwrap();
    let cases: [(&[&str], Option<&str>, &str); 4] = [
        (&["ip", "shoe"], None, "key: \"shoe\" is not a key dimension"),
        (&["header:"], None, "key: \"header:\" is not a key dimension"),
        (&[], None, "key: [] names no key dimension"),
        (
            &["ip"],
            Some("nope"),
            "policy: \"nope\" is not a policy of this limiter",
        ),
    ];
    for (key, policy, expected) in cases {
        match limiter.route_rule(key, policy) {
            Err(e @ Error::Config { .. }) => assert!(
                e.to_string().starts_with(expected),
                "{key:?} {policy:?}\n  got: {e}\n  want: {expected}…"
            ),
            Err(e) => panic!("{key:?} {policy:?}: wrong kind {e:?}"),
            Ok(_) => panic!("{key:?} {policy:?}: accepted"),
        }
    }
    assert!(limiter.route_rule(&["route", "header:X-Tenant"], Some("pay")).is_ok());
}

#[tokio::test]
async fn route_rules_charge_the_parent_state_and_count_in_its_metrics() {
    let limiter = memory(3);
    // Two routes with the same key dimensions (per_route off) share one budget...
    let a = limiter.route_rule(&["ip"], None).unwrap();
    let b = limiter.route_rule(&["ip"], None).unwrap();
    let mut statuses = Vec::new();
    for rule in [&a, &b, &a, &b] {
        statuses.push(
            limiter
                .check_route(&request("203.0.113.7", None), rule)
                .await
                .unwrap()
                .status,
        );
    }
    assert_eq!(statuses, [None, None, None, Some(429)]);
    // ...and a clone of the parent decides on that same state.
    let clone = limiter.clone();
    let outcome = clone.check_route(&request("203.0.113.8", None), &a).await.unwrap();
    assert_eq!(outcome.status, None);
    assert_eq!(outcome.headers.get("X-RateLimit-Remaining"), Some("2"));

    let metrics = limiter.metrics_text();
    for line in [
        "polylimit_requests_total{policy=\"default\",route=\"route_rule\",decision=\"allowed\",source=\"store\"} 4",
        "polylimit_requests_total{policy=\"default\",route=\"route_rule\",decision=\"denied\",source=\"store\"} 1",
        "rate_limit_blocked_total{policy=\"default\",route=\"route_rule\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    assert!(!metrics.contains("203.0.113"), "no address in labels:\n{metrics}");

    limiter.close();
    assert!(matches!(
        limiter.check_route(&request("203.0.113.9", None), &a).await,
        Err(Error::Closed)
    ));
}

#[tokio::test]
async fn a_route_rule_and_the_rules_file_share_keys_and_http_settings() {
    let limiter = Limiter::from_rules(
        "policies: { api: { rate: 1/min, burst: 2 }, other: { rate: 1/min, burst: 100 } }\n\
         trusted_proxies: [10.0.0.0/8]\n\
         denylist: [\"key:banned\"]\n\
         rules: [ { key: [key], policy: api } ]\n",
    )
    .unwrap();
    let rule = limiter.route_rule(&["key"], Some("api")).unwrap();
    // The rules file's rule and the route rule compose the same key: one budget.
    let first = limiter.check_request(&request("10.0.0.1", Some("k"))).await.unwrap();
    assert_eq!(first.status, None);
    let second = limiter
        .check_route(&request("10.0.0.1", Some("k")), &rule)
        .await
        .unwrap();
    assert_eq!(second.status, None);
    let third = limiter
        .check_route(&request("10.0.0.1", Some("k")), &rule)
        .await
        .unwrap();
    assert_eq!(third.status, Some(429));
    assert_eq!(
        third.decisions.len(),
        1,
        "only the route rule's policy: {:?}",
        third.decisions
    );
    assert_eq!(
        (&*third.decisions[0].rule, &*third.decisions[0].policy),
        ("route_rule", "api")
    );
    // The file's denylist applies, and its trusted proxies choose the client.
    let banned = limiter
        .check_route(&request("10.0.0.1", Some("banned")), &rule)
        .await
        .unwrap();
    assert_eq!(banned.status, Some(403));
    let by_ip = limiter.route_rule(&["ip"], Some("api")).unwrap();
    let mut forwarded = request("10.0.0.1", None);
    forwarded.headers = vec![("X-Forwarded-For".into(), "198.51.100.4".into())];
    for want in [None, None, Some(429)] {
        assert_eq!(limiter.check_route(&forwarded, &by_ip).await.unwrap().status, want);
    }
    let mut other_client = forwarded.clone();
    other_client.headers = vec![("X-Forwarded-For".into(), "198.51.100.5".into())];
    assert_eq!(limiter.check_route(&other_client, &by_ip).await.unwrap().status, None);

    // A rule is checked only through the limiter that built it.
    let stranger = memory(10);
    match stranger.check_route(&request("10.0.0.1", Some("k")), &rule).await {
        Err(Error::Config { field, .. }) => assert_eq!(field, "rule"),
        other => panic!("{other:?}"),
    }

    // Closed, the limiter refuses every request, even a denylisted one, through either path.
    limiter.close();
    let banned = request("10.0.0.1", Some("banned"));
    assert!(matches!(limiter.check_route(&banned, &rule).await, Err(Error::Closed)));
    assert!(matches!(limiter.check_request(&banned).await, Err(Error::Closed)));
}

/// The middleware shorthand's defaults, the same in every language: key `ip`,
/// `key` with a key function, `route` first for a per-route form.
#[tokio::test]
async fn the_middleware_shorthand_defaults_live_in_the_core() {
    let limiter = memory(1);
    let dims = |shorthand: RouteShorthand| format!("{:?}", limiter.route_rule_for(&shorthand).unwrap());
    let key = |dims: &[&str]| Some(dims.iter().map(|d| d.to_string()).collect::<Vec<_>>());
    let cases = [
        (RouteShorthand::default(), r#"["ip"]"#),
        (
            RouteShorthand {
                key_function: true,
                ..Default::default()
            },
            r#"["key"]"#,
        ),
        (
            RouteShorthand {
                per_route: true,
                ..Default::default()
            },
            r#"["route", "ip"]"#,
        ),
        (
            RouteShorthand {
                per_route: true,
                key_function: true,
                ..Default::default()
            },
            r#"["route", "key"]"#,
        ),
        (
            RouteShorthand {
                key: key(&["user", "route"]),
                per_route: true,
                ..Default::default()
            },
            r#"["user", "route"]"#,
        ),
        (
            RouteShorthand {
                key: key(&["ip", "key"]),
                key_function: true,
                ..Default::default()
            },
            r#"["ip", "key"]"#,
        ),
    ];
    for (shorthand, want) in cases {
        let got = dims(shorthand.clone());
        assert_eq!(
            got,
            format!("RouteRule {{ key: {want}, policies: [\"default\"] }}"),
            "{shorthand:?}"
        );
    }
    // A key function beside a key that leaves it out would be ignored: an error naming `key`.
    match limiter.route_rule_for(&RouteShorthand {
        key: key(&["ip"]),
        key_function: true,
        ..Default::default()
    }) {
        Err(Error::Config { field, value, .. }) => assert_eq!((field.as_str(), value.as_str()), ("key", "[\"ip\"]")),
        other => panic!("{other:?}"),
    }

    // Per route: two routes through one limiter keep two budgets (burst 1 each).
    let per_route = limiter
        .route_rule_for(&RouteShorthand {
            per_route: true,
            ..Default::default()
        })
        .unwrap();
    let mut other_route = request("203.0.113.7", None);
    other_route.route = Some("/y".into());
    for (req, want) in [
        (request("203.0.113.7", None), None),
        (other_route.clone(), None),
        (request("203.0.113.7", None), Some(429)),
        (other_route, Some(429)),
    ] {
        assert_eq!(limiter.check_route(&req, &per_route).await.unwrap().status, want);
    }
}

/// A request carrying a caller key (a middleware's key function, Go's
/// `WithKeyFunc`) on a limiter whose rules never read `key` is a config error
/// naming `key`, never a decision keyed by something else.
#[tokio::test]
async fn a_key_that_no_rule_reads_is_a_config_error() {
    let limiter = memory(5);
    for result in [
        limiter.check_request(&request("203.0.113.7", Some("k"))).await,
        limiter
            .check_route(
                &request("203.0.113.7", Some("k")),
                &limiter.route_rule(&["ip"], None).unwrap(),
            )
            .await,
    ] {
        match result {
            Err(Error::Config { field, .. }) => assert_eq!(field, "key"),
            other => panic!("{other:?}"),
        }
    }
    // Without a key, or with a rule that reads it, the request is decided.
    assert_eq!(
        limiter
            .check_request(&request("203.0.113.7", None))
            .await
            .unwrap()
            .status,
        None
    );
    let keyed = Limiter::from_value(&json!({ "policy": { "rate": "1/min" }, "key_function": true })).unwrap();
    let outcome = keyed.check_request(&request("203.0.113.7", Some("k"))).await.unwrap();
    assert_eq!(outcome.status, None);
}

/// `route`: a route's own limiter keys its store under `<prefix>:route:<route>`,
/// and beside a rules document its policy replaces the document's policies and rules.
#[test]
fn a_routes_own_limiter_is_scoped_by_the_core() {
    let config = polylimit::effective_config(
        polylimit::Naming::Camel,
        &json!({ "policy": { "rate": "1/s" }, "prefix": "app", "route": "/users/:id" }),
    )
    .unwrap();
    assert_eq!(config["prefix"], "app:route:/users/:id");
    let config = polylimit::effective_config(
        polylimit::Naming::Camel,
        &json!({
            "rules": "store: memory\nheaders: ietf\npolicies: { api: { rate: 9/s } }\nrules: [ { key: [ip], policy: api } ]\n",
            "policy": { "rate": "1/s" },
            "key": ["user"],
            "route": "/a",
        }),
    )
    .unwrap();
    assert_eq!(config["prefix"], "polylimit:route:/a");
    assert_eq!(config["headers"], "ietf");
    assert_eq!(
        config["policies"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["default"]
    );
    assert_eq!(
        config["rules"],
        json!([{ "name": "default", "key": ["user"], "policy": ["default"] }])
    );
    // Without `route`, a policy beside a document stays an error.
    let err = polylimit::effective_config(
        polylimit::Naming::Camel,
        &json!({ "rules": "policies: { api: { rate: 9/s } }\n", "policy": { "rate": "1/s" } }),
    )
    .unwrap_err();
    assert!(
        matches!(err, Error::Config { ref field, .. } if field == "policy"),
        "{err:?}"
    );
}
