//! The Envoy rate-limit service of the real `polylimit-server` binary,
//! through a gRPC client from Envoy's own protos: decisions, headers and
//! body of the same core as an in-process `Limiter` on the same rules, the
//! mapping of descriptors, bad input, and clock trust.

mod common;

use common::proto::envoy::config::core::v3::HeaderValue;
use common::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use common::proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use common::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use common::proto::google::protobuf::{Duration, UInt64Value};
use common::{call, descriptor, Server};
use polylimit::{Limiter, Outcome, RequestInfo};

const T0: i64 = 1_700_000_040_000; // a whole minute

const API: &str = "\
store: memory
headers: both
policies:
  api: { algorithm: fixed_window, rate: 3/min }
rules:
  - name: api
    match: { path: /api/* }
    key: [ip]
    policy: api
";

fn headers(outcome: &Outcome) -> Vec<HeaderValue> {
    let mut headers: Vec<HeaderValue> = outcome
        .headers
        .iter()
        .map(|(k, v)| HeaderValue {
            key: k.to_string(),
            value: v.to_string(),
            ..Default::default()
        })
        .collect();
    if outcome.status.is_some() {
        headers.push(HeaderValue {
            key: "content-type".into(),
            value: "application/json".into(),
            ..Default::default()
        });
    }
    headers
}

#[tokio::test]
async fn decisions_headers_and_body_are_the_cores() {
    let server = Server::start(API);
    let mut client = server.client().await;
    // The same rules in this process: the answers must be the core's, byte for byte.
    let limiter = Limiter::from_rules(API).unwrap();
    let info = RequestInfo {
        method: "GET".into(),
        path: "/api/items".into(),
        peer: Some("203.0.113.7".into()),
        now_ms: Some(T0 + 1_500),
        ..RequestInfo::default()
    };
    let d = descriptor(&[("remote_address", "203.0.113.7"), (":path", "/api/items")]);
    for (i, (code, remaining)) in [(Code::Ok, 2), (Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)]
        .into_iter()
        .enumerate()
    {
        let got = call(&mut client, vec![d.clone()], 0, Some(T0 + 1_500)).await.unwrap();
        let expected = limiter.check_request(&info).await.unwrap();
        assert_eq!(expected.status.is_some(), code == Code::OverLimit, "call {i}");
        let want = RateLimitResponse {
            overall_code: code as i32,
            statuses: vec![DescriptorStatus {
                code: code as i32,
                current_limit: Some(RateLimit {
                    name: "api".into(),
                    requests_per_unit: 3,
                    unit: Unit::Minute as i32,
                }),
                limit_remaining: remaining,
                duration_until_reset: Some(Duration {
                    seconds: 58,
                    nanos: 500_000_000,
                }),
                ..Default::default()
            }],
            response_headers_to_add: headers(&expected),
            raw_body: expected.body.clone().unwrap_or_default().into_bytes(),
            ..Default::default()
        };
        assert_eq!(got, want, "call {i}");
    }
    let over = call(&mut client, vec![d.clone()], 0, Some(T0 + 1_500)).await.unwrap();
    let names: Vec<&str> = over.response_headers_to_add.iter().map(|h| h.key.as_str()).collect();
    assert!(
        names.contains(&"Retry-After") && names.contains(&"X-RateLimit-Remaining"),
        "{names:?}"
    );
    assert_eq!(
        String::from_utf8(over.raw_body).unwrap(),
        "{\"error\":\"rate_limit_exceeded\",\"message\":\"Too Many Requests\",\"retry_after\":59}"
    );
    // Another client, and a path no rule limits.
    let other = descriptor(&[("remote_address", "203.0.113.8"), (":path", "/api/items")]);
    let got = call(&mut client, vec![other], 0, Some(T0)).await.unwrap();
    assert_eq!(
        (got.overall_code, got.statuses[0].limit_remaining),
        (Code::Ok as i32, 2)
    );
    let free = descriptor(&[("remote_address", "203.0.113.7"), (":path", "/health")]);
    let got = call(&mut client, vec![free], 0, Some(T0)).await.unwrap();
    assert_eq!(
        got,
        RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            }],
            ..Default::default()
        }
    );
}

#[tokio::test]
async fn the_listening_line_is_exact() {
    let server = Server::start(API);
    let line = server.lines.lock().unwrap()[0].clone();
    assert_eq!(
        line,
        format!(
            "{{\"level\":\"info\",\"msg\":\"listening\",\"grpc\":\"{}\",\"http\":\"{}\"}}",
            server.grpc, server.http
        )
    );
    assert!(server.grpc.starts_with("127.0.0.1:") && !server.grpc.ends_with(":0"));
    assert!(server.http.starts_with("127.0.0.1:") && !server.http.ends_with(":0"));
}

const PER_KEY: &str = "\
store: memory
policies:
  one: { algorithm: fixed_window, rate: 1/min }
  bucket: { algorithm: token_bucket, rate: 1/min, burst: 10 }
rules:
  - name: bucket
    match: { path: /bucket }
    key: [key]
    policy: bucket
  - name: one
    match: { path: / }
    key: [key]
    policy: one
";

#[tokio::test]
async fn each_descriptor_is_charged_alone() {
    let server = Server::start(PER_KEY);
    let mut client = server.client().await;
    let key = |k: &str| descriptor(&[("key", k)]);
    let codes = |r: &RateLimitResponse| {
        let each: Vec<i32> = r.statuses.iter().map(|s| s.code).collect();
        (r.overall_code, each)
    };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    let got = call(&mut client, vec![key("a"), key("b")], 0, Some(T0)).await.unwrap();
    assert_eq!(codes(&got), (ok, vec![ok, ok]));
    // `a` is over; `c` is charged all the same (as envoyproxy/ratelimit does).
    let got = call(&mut client, vec![key("a"), key("c")], 0, Some(T0)).await.unwrap();
    assert_eq!(codes(&got), (over, vec![over, ok]));
    let got = call(&mut client, vec![key("c")], 0, Some(T0)).await.unwrap();
    assert_eq!(codes(&got), (over, vec![over]));
}

#[tokio::test]
async fn the_headers_are_the_first_denial_else_the_closest_to_one() {
    let server = Server::start(PER_KEY);
    let mut client = server.client().await;
    let costly = |key: &str, hits: u64| {
        let mut d = descriptor(&[(":path", "/bucket"), ("key", key)]);
        d.hits_addend = Some(UInt64Value { value: hits });
        d
    };
    let remaining_header = |r: &RateLimitResponse| {
        let h = r
            .response_headers_to_add
            .iter()
            .find(|h| h.key == "X-RateLimit-Remaining");
        h.map(|h| h.value.clone())
    };
    // x keeps 2 of 10, y keeps 7: x's headers.
    let got = call(&mut client, vec![costly("y", 3), costly("x", 8)], 0, Some(T0))
        .await
        .unwrap();
    let left: Vec<u32> = got.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!((got.overall_code, left), (Code::Ok as i32, vec![7, 2]));
    assert_eq!(
        remaining_header(&got).as_deref(),
        Some("2"),
        "{:?}",
        got.response_headers_to_add
    );
    // y is over (8 > 7) and x keeps 1: y's refusal, whatever x's remaining.
    let got = call(&mut client, vec![costly("x", 1), costly("y", 8)], 0, Some(T0))
        .await
        .unwrap();
    let left: Vec<u32> = got.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!((got.overall_code, left), (Code::OverLimit as i32, vec![1, 7]));
    assert_eq!(
        remaining_header(&got).as_deref(),
        Some("7"),
        "{:?}",
        got.response_headers_to_add
    );
    assert!(got.response_headers_to_add.iter().any(|h| h.key == "Retry-After"));
    assert!(!got.raw_body.is_empty());
}

#[tokio::test]
async fn the_cost_is_the_descriptors_hits_else_the_requests() {
    let server = Server::start(PER_KEY);
    let mut client = server.client().await;
    let remaining = |r: &RateLimitResponse| (r.overall_code, r.statuses[0].limit_remaining);
    let d = descriptor(&[(":path", "/bucket"), ("key", "k")]);
    let got = call(&mut client, vec![d.clone()], 4, Some(T0)).await.unwrap();
    assert_eq!(remaining(&got), (Code::Ok as i32, 6));
    let mut five = d.clone();
    five.hits_addend = Some(UInt64Value { value: 5 });
    let got = call(&mut client, vec![five], 4, Some(T0)).await.unwrap();
    assert_eq!(remaining(&got), (Code::Ok as i32, 1));
    // hits_addend 0 is 1 (Envoy's rule).
    let got = call(&mut client, vec![d.clone()], 0, Some(T0)).await.unwrap();
    assert_eq!(remaining(&got), (Code::Ok as i32, 0));
    let got = call(&mut client, vec![d.clone()], 0, Some(T0)).await.unwrap();
    assert_eq!(remaining(&got), (Code::OverLimit as i32, 0));
    // The core bounds the cost.
    let mut huge = d.clone();
    huge.hits_addend = Some(UInt64Value { value: u64::MAX });
    let err = call(&mut client, vec![huge], 0, Some(T0)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.message(),
        "descriptors[0]: cost: 18446744073709551615 is not an integer from 1 to 4294967296"
    );
}

#[tokio::test]
async fn bad_input_is_invalid_argument_and_the_server_keeps_serving() {
    let mut server = Server::start(PER_KEY);
    let mut client = server.client().await;
    let ok = descriptor(&[("key", "fine")]);
    let invalid = |r: Result<RateLimitResponse, tonic::Status>| {
        let status = r.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        status.message().to_string()
    };
    let mut request = tonic::Request::new(common::proto::envoy::service::ratelimit::v3::RateLimitRequest {
        domain: "elsewhere".into(),
        descriptors: vec![ok.clone()],
        hits_addend: 0,
    });
    request
        .metadata_mut()
        .insert("x-polylimit-now-ms", T0.to_string().parse().unwrap());
    assert_eq!(
        invalid(client.should_rate_limit(request).await.map(tonic::Response::into_inner)),
        "domain \"elsewhere\" is not served here (this server's domain is \"edge\")"
    );
    assert_eq!(
        invalid(call(&mut client, vec![ok.clone(); 65], 0, Some(T0)).await),
        "descriptors: 65 descriptors, more than the limit of 64"
    );
    assert_eq!(
        invalid(call(&mut client, vec![], 0, Some(T0)).await),
        "descriptors: the list is empty"
    );
    let long = "v".repeat(8193);
    assert_eq!(
        invalid(
            call(
                &mut client,
                vec![ok.clone(), descriptor(&[("key", &long)])],
                0,
                Some(T0)
            )
            .await
        ),
        "descriptors[1].entries[0].value: 8193 bytes, more than the limit of 8192"
    );
    let many = vec![("x-h", "v"); 33];
    assert_eq!(
        invalid(call(&mut client, vec![descriptor(&many)], 0, Some(T0)).await),
        "descriptors[0]: 33 entries, more than the limit of 32"
    );
    let mut request = tonic::Request::new(common::proto::envoy::service::ratelimit::v3::RateLimitRequest {
        domain: common::DOMAIN.into(),
        descriptors: vec![ok.clone()],
        hits_addend: 0,
    });
    request
        .metadata_mut()
        .insert("x-polylimit-now-ms", "yesterday".parse().unwrap());
    assert_eq!(
        invalid(client.should_rate_limit(request).await.map(tonic::Response::into_inner)),
        "x-polylimit-now-ms: \"yesterday\" is not a time in ms since the epoch"
    );
    // A message above gRPC's 4 MiB is refused before it is read whole.
    let big = descriptor(&[("x-big", &"b".repeat(8192))]);
    let status = call(&mut client, vec![big; 600], 0, Some(T0)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().ends_with("the limit is: 4194304 bytes"), "{status:?}");
    // None of those charged anything, and the server still answers.
    let got = call(&mut client, vec![ok], 0, Some(T0)).await.unwrap();
    assert_eq!(got.overall_code, Code::Ok as i32);
    assert!(server.running());
}

#[tokio::test]
async fn a_concurrency_slot_is_given_back_once_decided() {
    // Envoy never says when a request ends: a slot held until its lease ran
    // out would refuse the next request for 5 s.
    let one = "store: memory\npolicies:\n  c: { algorithm: concurrency, limit: 1, lease: 5s }\nrules:\n  - key: [key]\n    policy: c\n";
    let server = Server::start(one);
    let mut client = server.client().await;
    let d = descriptor(&[("key", "k")]);
    for i in 0..3 {
        let got = call(&mut client, vec![d.clone()], 0, Some(T0 + i)).await.unwrap();
        assert_eq!(
            (got.overall_code, got.statuses[0].limit_remaining),
            (Code::Ok as i32, 0),
            "call {i}"
        );
    }
}

#[tokio::test]
async fn the_clients_clock_is_ignored_unless_trusted() {
    let daily = "store: memory\npolicies:\n  d: { algorithm: fixed_window, rate: 1/day }\nrules:\n  - key: [key]\n    policy: d\n";
    let server = Server::start_with(daily, &[]);
    let mut client = server.client().await;
    let d = descriptor(&[("key", "k")]);
    // Two days apart by the metadata, the same day by the server's clock.
    let first = call(&mut client, vec![d.clone()], 0, Some(0)).await.unwrap();
    let second = call(&mut client, vec![d.clone()], 0, Some(2 * 86_400_000))
        .await
        .unwrap();
    assert_eq!(
        (first.overall_code, second.overall_code),
        (Code::Ok as i32, Code::OverLimit as i32)
    );
}

#[test]
fn check_mode_prints_ok_or_the_error_naming_the_field() {
    let run = |text: &str| {
        let path = common::rules_file(text);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_polylimit-server"))
            .args(["--check", "--rules", path.to_str().unwrap()])
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr)
                .unwrap()
                .replace(path.to_str().unwrap(), "FILE"),
        )
    };
    assert_eq!(run(PER_KEY), (Some(0), "ok\n".into(), String::new()));
    assert_eq!(
        run("policies:\n  a: { rate: 3/fortnight }\n"),
        (
            Some(1),
            String::new(),
            "FILE: policies.a.rate: \"3/fortnight\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0\n"
                .into()
        )
    );
}

#[test]
fn a_bad_rules_file_at_startup_is_one_error_line_and_exit_1() {
    let path = common::rules_file("policies:\n  a: { rate: 3/fortnight }\n");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_polylimit-server"))
        .args([
            "--rules",
            path.to_str().unwrap(),
            "--grpc",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(1));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        line,
        serde_json::json!({
            "level": "error",
            "msg": "bad rules file",
            "path": path.to_str().unwrap(),
            "error": "policies.a.rate: \"3/fortnight\" is not \"<n>/<duration>\" or \"<n> per <duration>\" with n and duration > 0",
        })
    );
}
