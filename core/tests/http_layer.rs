//! The HTTP layer beyond the vectors: fail-closed 503 with the store down,
//! rules-file errors, the shared example rules file, bounded metrics labels.

use polylimit::{Error, Limiter, LimiterConfig, Policy, RequestInfo};

fn request(path: &str, peer: &str) -> RequestInfo {
    RequestInfo {
        method: "POST".into(),
        path: path.into(),
        peer: Some(peer.into()),
        user: Some("u1".into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn fail_closed_answers_503_and_local_keeps_limiting() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let rules = format!(
        "store: redis://127.0.0.1:{port}\n\
         policies:\n  api: {{ rate: 1/s, burst: 2 }}\n  payments: {{ rate: 1/s, on_store_error: fail_closed }}\n\
         rules:\n  - {{ match: {{ path: /pay }}, key: [user], policy: payments }}\n  - {{ match: {{ path: /api }}, key: [ip], policy: api }}\n"
    );
    let limiter = Limiter::from_rules(&rules).unwrap();
    let outcome = limiter.check_request(&request("/pay", "203.0.113.7")).await.unwrap();
    assert_eq!(outcome.status, Some(503));
    assert_eq!(
        outcome.body.as_deref(),
        Some("{\"error\":\"rate_limiter_unavailable\",\"message\":\"Service Unavailable\",\"retry_after\":1}")
    );
    assert!(
        outcome.headers.iter().any(|(k, v)| k == "Retry-After" && v == "1"),
        "{:?}",
        outcome.headers
    );

    let statuses: Vec<Option<u16>> = {
        let mut s = Vec::new();
        for _ in 0..3 {
            s.push(
                limiter
                    .check_request(&request("/api", "203.0.113.7"))
                    .await
                    .unwrap()
                    .status,
            );
        }
        s
    };
    assert_eq!(statuses, [None, None, Some(429)], "the local fallback still limits");
    let metrics = limiter.metrics_text();
    assert!(
        metrics.contains("rate_limit_blocked_total{policy=\"payments\",route=\"/pay\"} 1"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("203.0.113.7") && !metrics.contains("u1"),
        "no raw key or address in labels:\n{metrics}"
    );
}

#[test]
fn rules_file_errors_name_the_rule_and_field() {
    let cases = [
        (
            "policies: { api: { rate: ten/s } }\nrules: []",
            "policies.api.rate: \"ten/s\" is not",
        ),
        (
            "policies: { api: { rate: 1/s } }\nrules: [ { policy: nope } ]",
            "rules[0].policy: \"nope\" is not a policy of this file",
        ),
        (
            "policies: { api: { rate: 1/s } }\nrules: [ { policy: api, key: [shoe] } ]",
            "rules[0].key: \"shoe\" is not a key dimension",
        ),
        (
            "policies: { api: { rate: 1/s } }\nrules: [ { policy: api, match: { host: x } } ]",
            "rules[0].match.host: is not a match field",
        ),
        (
            "policies: { api: { rate: 1/s } }\ntrusted_proxies: [10.0.0.0/33]",
            "trusted_proxies[0]: \"10.0.0.0/33\" is not an address, a CIDR network or unix",
        ),
        (
            "policies: { api: { rate: 1/s } }\nheaders: fancy",
            "headers: \"fancy\" is not one of legacy, ietf, both, none",
        ),
        (
            "policies: { api: { rate: 1/s } }\nstore: postgres://x",
            "store: \"postgres://x\" is not",
        ),
        (
            "policies: { api: { rate: 1/s } }\nforwarded_header: x-real-ip",
            "forwarded_header: \"x-real-ip\" is not one of x-forwarded-for, forwarded",
        ),
        (
            "policies: { api: { rate: 1/s } }\nallowlist: [10.0.0.0/8, svc-batch]",
            "allowlist[1]: \"svc-batch\" is not a CIDR or a typed key (user:…, api_key:…, key:…)",
        ),
        (
            "policies: { api: { rate: 1/s } }\ndenylist: [\"ip:1.2.3.4\"]",
            "denylist[0]: \"ip:1.2.3.4\" is not a CIDR or a typed key",
        ),
        (
            "policies: { api: { rate: 1/s } }\ndenylist: [\"user:\"]",
            "denylist[0]: \"user:\" is not a CIDR or a typed key",
        ),
        ("rules: []", "policies: is required in a rules file"),
    ];
    for (text, expected) in cases {
        match Limiter::from_rules(text) {
            Err(e @ Error::Config { .. }) => assert!(
                e.to_string().starts_with(expected),
                "{text}\n  got: {e}\n  want: {expected}…"
            ),
            Err(e) => panic!("{text}: wrong kind {e:?}"),
            Ok(_) => panic!("{text}: accepted"),
        }
    }
}

#[tokio::test]
async fn the_example_rules_file_loads_and_limits() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/polylimit.yaml");
    let limiter = Limiter::from_file(path).unwrap();
    let mut statuses = Vec::new();
    for _ in 0..12 {
        let req = RequestInfo {
            method: "GET".into(),
            path: "/api/items".into(),
            peer: Some("198.51.100.1".into()),
            now_ms: Some(1_700_000_000_000),
            ..Default::default()
        };
        statuses.push(limiter.check_request(&req).await.unwrap().status);
    }
    assert_eq!(statuses.iter().filter(|s| s.is_none()).count(), 10);
    assert_eq!(statuses[10..], [Some(429), Some(429)]);
}

/// The example file's LLM endpoint has its own budget: a reservation of 1000
/// tokens is charged to the `llm` policy alone, never to the per-IP `api`
/// catch-all (burst 10), which still takes reads and payments.
#[tokio::test]
async fn the_example_rules_file_keeps_the_llm_endpoint_off_the_catch_all() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/polylimit.yaml");
    let limiter = Limiter::from_file(path).unwrap();
    let request = |method: &str, path: &str| RequestInfo {
        method: method.into(),
        path: path.into(),
        peer: Some("198.51.100.2".into()),
        user: Some("alice".into()),
        now_ms: Some(1_700_000_000_000),
        ..Default::default()
    };
    let mut llm = request("POST", "/api/llm");
    llm.headers = vec![("x-reserve".into(), "1000".into())];
    let decided = |o: &polylimit::Outcome| {
        o.decisions
            .iter()
            .map(|d| (d.policy.to_string(), d.decision.remaining))
            .collect::<Vec<_>>()
    };
    let first = limiter.check_request(&llm).await.unwrap();
    assert_eq!((first.status, decided(&first)), (None, vec![("llm".to_string(), 9000)]));
    let hello = limiter.check_request(&request("GET", "/api/hello")).await.unwrap();
    assert_eq!(decided(&hello), [("api".to_string(), 9)]);
    let paid = limiter
        .check_request(&request("POST", "/api/payments/7"))
        .await
        .unwrap();
    let mut policies = decided(&paid);
    policies.sort();
    assert_eq!(policies, [("api".to_string(), 8), ("payments".to_string(), 4)]);
}

#[test]
fn the_headers_a_request_is_decided_by() {
    let limiter = Limiter::from_rules(
        "policies: { a: { rate: 1/s }, b: { rate: 2/s } }
rules:
  - { match: { path: /x }, key: [ip, \"header:X-Login-User\"], policy: a }
  - { match: { path: /y }, key: [ip], tier: \"header:x-plan\", tiers: { pro: b } }",
    )
    .unwrap();
    // The forwarding header, and each header a key or a tier reads: any case, spaces around.
    for name in ["X-Forwarded-For", "x-login-user", " X-LOGIN-USER ", "X-Plan"] {
        assert!(limiter.reads_header(name), "{name}");
    }
    for name in ["User-Agent", "Forwarded", "x-login", "x-login-user-2", ""] {
        assert!(!limiter.reads_header(name), "{name}");
    }
    let forwarded = Limiter::from_rules(
        "forwarded_header: forwarded\npolicies: { a: { rate: 1/s } }\nrules: [{ key: [ip], policy: a }]",
    )
    .unwrap();
    assert!(forwarded.reads_header("Forwarded"));
    assert!(!forwarded.reads_header("X-Forwarded-For"));
    // A limiter without rules decides no request.
    let plain = Limiter::new(LimiterConfig::new(
        Policy::from_value(&serde_json::json!({"rate": "1/s"}), "").unwrap(),
    ))
    .unwrap();
    assert!(!plain.reads_header("X-Forwarded-For"));
}

#[test]
fn whether_a_request_is_decided_by_its_route() {
    let reads = |rules: &str| {
        Limiter::from_rules(&format!("policies: {{ a: {{ rate: 1/s }} }}\nrules:\n{rules}"))
            .unwrap()
            .reads_route()
    };
    // A rule matching on a route, keyed by it, or tiered by it.
    assert!(reads("  - { match: { route: \"/users/{id}\" }, key: [ip], policy: a }"));
    assert!(reads("  - { match: { path: /x }, key: [route, ip], policy: a }"));
    assert!(reads("  - { key: [ip], tier: route, tiers: { /x: a } }"));
    // Path, method and the other dimensions never read it.
    assert!(!reads("  - { match: { path: /x, method: GET }, key: [ip, method, \"header:x-a\"], policy: a }\n  - { key: [global], policy: a }"));
    let plain = Limiter::new(LimiterConfig::new(
        Policy::from_value(&serde_json::json!({"rate": "1/s"}), "").unwrap(),
    ))
    .unwrap();
    assert!(!plain.reads_route());
}

#[tokio::test]
async fn rules_naming_one_pair_merge_their_count_and_shadow() {
    // A failed rule and an all rule on the same (policy, key): every status
    // counts, so nothing is settled after the response (no completion token),
    // and the pair is enforced although the first rule is shadow.
    let limiter = Limiter::from_rules(
        "policies:\n  login: { algorithm: fixed_window, rate: 1/h }\n\
         rules:\n  - { match: { path: /login }, key: [ip], policy: login, count: failed, shadow: true }\n\
         \x20 - { match: { path: /login }, key: [ip], policy: login }\n",
    )
    .unwrap();
    let mut req = request("/login", "203.0.113.7");
    req.now_ms = Some(1_700_000_000_000);
    let first = limiter.check_request(&req).await.unwrap();
    assert_eq!(first.status, None);
    assert_eq!(first.completion, None, "all absorbs failed: nothing to settle");
    assert_eq!(first.decisions.len(), 1, "one limit, charged once");
    assert!(!first.decisions[0].shadow, "enforced by the second rule");
    assert_eq!(limiter.check_request(&req).await.unwrap().status, Some(429));
}
