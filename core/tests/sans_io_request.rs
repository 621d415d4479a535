//! A request's sans-I/O path (`Limiter::sans_io_request_start` / `finish` /
//! `unanswered`): the call the core encodes, sent on a plain socket, gives the
//! outcome `check_request` / `check_route` give, headers and body included;
//! what needs a completion token, a clock or the memory store is refused.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use polylimit::{Limiter, Naming, Outcome, RequestInfo};
use serde_json::json;
use support::RedisServer;

const RULES: &str =
    "policies: { api: { algorithm: fixed_window, rate: 3/min }, other: { algorithm: gcra, rate: 2/min } }\n\
                     rules: [ { name: api, match: { path: \"/api/*\" }, key: [ip], policy: api } ]\n";

fn request(path: &str) -> RequestInfo {
    RequestInfo {
        method: "GET".into(),
        path: path.into(),
        peer: Some("203.0.113.9".into()),
        ..Default::default()
    }
}

fn limiter(url: &str, prefix: &str) -> Limiter {
    Limiter::build(
        Naming::Snake,
        &json!({ "rules": RULES, "store": url, "prefix": prefix }),
    )
    .unwrap()
}

/// Sends `bytes` on `socket` and reads one whole reply.
fn exchange(socket: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
    socket.write_all(bytes).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(n) = polylimit::sans_io_reply_len(&got) {
            assert_eq!(n, got.len(), "one reply");
            return got;
        }
        let n = socket.read(&mut buf).unwrap();
        assert!(n > 0, "the server closed");
        got.extend_from_slice(&buf[..n]);
    }
}

/// An outcome's status, headers, body and (allowed, remaining) per decision.
type Shown = (Option<u16>, Vec<(String, String)>, Option<String>, Vec<(bool, u64)>);

/// An outcome without what moves with the clock.
fn shown(o: &Outcome) -> Shown {
    let headers = o
        .headers
        .iter()
        .map(|(n, v)| {
            let v = if n.to_ascii_lowercase().contains("reset")
                || n.eq_ignore_ascii_case("retry-after")
                || n == "RateLimit"
            {
                "~".to_string()
            } else {
                v.to_string()
            };
            (n.to_string(), v)
        })
        .collect();
    let decisions = o
        .decisions
        .iter()
        .map(|d| (d.decision.allowed, d.decision.remaining))
        .collect();
    (o.status, headers, o.body.clone(), decisions)
}

/// Decides the usual way until the common case goes by the socket (the usual
/// path connects, loads the library and samples the clock first).
async fn warm(limiter: &Limiter) {
    let rule = Arc::new(limiter.route_rule(&["ip"], Some("api")).unwrap());
    let mut probe = request("/warm");
    probe.peer = Some("198.51.100.1".into());
    let mut out = Vec::new();
    for _ in 0..200 {
        limiter.check_route(&probe, &rule).await.unwrap();
        if limiter.sans_io_request_start(&probe, Some(&rule), &mut out).is_some() {
            return;
        }
    }
    panic!("the common case never went by the socket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_socket_outcomes_are_the_usual_paths() {
    let server = RedisServer::start();
    let url = server.url();
    let ours = limiter(&url, "sans-a");
    let theirs = limiter(&url, "sans-b");
    warm(&ours).await;
    let (host, port, _) = ours.sans_io_address().expect("a plain standalone URL");
    let mut socket = TcpStream::connect((host.as_str(), port)).unwrap();
    let rule = Arc::new(ours.route_rule(&["ip"], Some("other")).unwrap());
    let their_rule = theirs.route_rule(&["ip"], Some("other")).unwrap();
    for _ in 0..5 {
        let mut out = Vec::new();
        let call = ours
            .sans_io_request_start(&request("/api/x"), None, &mut out)
            .expect("the common case");
        let got = ours
            .sans_io_request_finish(call, &exchange(&mut socket, &out))
            .unwrap()
            .unwrap();
        let want = theirs.check_request(&request("/api/x")).await.unwrap();
        assert_eq!(shown(&got), shown(&want));
        let mut out = Vec::new();
        let call = ours
            .sans_io_request_start(&request("/y"), Some(&rule), &mut out)
            .expect("a route rule");
        let got = ours
            .sans_io_request_finish(call, &exchange(&mut socket, &out))
            .unwrap()
            .unwrap();
        let want = theirs.check_route(&request("/y"), &their_rule).await.unwrap();
        assert_eq!(shown(&got), shown(&want));
    }
    // 3/min and 2/min: the last ones refused, with the 429's body and Retry-After.
    let mut out = Vec::new();
    let call = ours.sans_io_request_start(&request("/api/x"), None, &mut out).unwrap();
    let got = ours
        .sans_io_request_finish(call, &exchange(&mut socket, &out))
        .unwrap()
        .unwrap();
    assert_eq!(got.status, Some(429));
    assert!(got.headers.iter().any(|(n, _)| n == "Retry-After"));
    // No reply: the policy's on_store_error decides (local by default), nothing sent again.
    let mut out = Vec::new();
    let call = ours.sans_io_request_start(&request("/api/z"), None, &mut out).unwrap();
    let fallback = ours.sans_io_request_unanswered(call).unwrap();
    assert_ne!(fallback.decisions[0].decision.source, polylimit::Source::Store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_needs_a_token_a_clock_or_no_store_is_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let ours = limiter(&url, "sans-refused");
    warm(&ours).await;
    let mut out = Vec::new();
    let counted = Arc::new(
        ours.route_rule_for(&polylimit::RouteShorthand {
            policy: Some("api".into()),
            count: Some(json!("failed")),
            ..Default::default()
        })
        .unwrap(),
    );
    assert!(ours
        .sans_io_request_start(&request("/api/x"), Some(&counted), &mut out)
        .is_none());
    let both = Arc::new(ours.route_rule(&["ip"], None).unwrap());
    assert!(
        ours.sans_io_request_start(&request("/api/x"), Some(&both), &mut out)
            .is_none(),
        "two targets"
    );
    let mut at = request("/api/x");
    at.now_ms = Some(1_700_000_000_000);
    assert!(ours.sans_io_request_start(&at, None, &mut out).is_none());
    assert!(
        ours.sans_io_request_start(&request("/unlimited"), None, &mut out)
            .is_none(),
        "no rule: a pass"
    );
    assert!(out.is_empty(), "nothing appended when refused");
    let rule = Arc::new(ours.route_rule(&["ip"], Some("api")).unwrap());
    assert!(
        ours.sans_io_request_start(&request("/api/x"), Some(&rule), &mut out)
            .is_some(),
        "the common case"
    );
    let memory = Limiter::build(Naming::Snake, &json!({ "rules": RULES })).unwrap();
    assert!(memory
        .sans_io_request_start(&request("/api/x"), None, &mut out)
        .is_none());
}

/// A reload between send and reply: the call finishes on the rules it
/// started with (as a call of the usual path does) and is charged once; a
/// call started after the reload is decided by the new rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_between_send_and_reply_finishes_on_the_old_rules_charged_once() {
    let server = RedisServer::start();
    let url = server.url();
    let ours = limiter(&url, "sans-reload");
    warm(&ours).await;
    let (host, port, _) = ours.sans_io_address().unwrap();
    let mut socket = TcpStream::connect((host.as_str(), port)).unwrap();

    let mut out = Vec::new();
    let call = ours.sans_io_request_start(&request("/api/x"), None, &mut out).unwrap();
    let options = |rate: &str| json!({ "rules": RULES.replace("3/min", rate), "store": url, "prefix": "sans-reload" });
    ours.reload_from_blocking(Naming::Snake, &options("7/min")).unwrap();

    let reply = exchange(&mut socket, &out);
    let got = ours
        .sans_io_request_finish(call, &reply)
        .expect("finished, not sent again the usual way")
        .unwrap();
    assert_eq!(got.decisions[0].decision.limit, 3, "the rules it started with");
    assert_eq!(got.decisions[0].decision.remaining, 2);

    // The next request: the new rules, and the one charge before it.
    let next = ours.check_request(&request("/api/x")).await.unwrap();
    assert_eq!(next.decisions[0].decision.limit, 7);
    assert_eq!(
        next.decisions[0].decision.remaining,
        7 - 2,
        "charged once by the socket, once now"
    );
}

/// The same for a check of a key (`sans_io_start` / `sans_io_finish`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_between_send_and_reply_of_a_check_finishes_on_the_old_policy() {
    let server = RedisServer::start();
    let url = server.url();
    let options = |rate: &str| json!({ "policy": { "algorithm": "fixed_window", "rate": rate }, "store": url, "prefix": "sans-check" });
    let ours = Limiter::build(Naming::Snake, &options("3/min")).unwrap();
    let mut out = Vec::new();
    let mut started = None;
    for _ in 0..200 {
        ours.check("warm").await.unwrap();
        started = ours.sans_io_start("k", Default::default(), &mut out);
        if started.is_some() {
            break;
        }
    }
    let call = started.expect("the common case went by the socket");
    let (host, port, _) = ours.sans_io_address().unwrap();
    let mut socket = TcpStream::connect((host.as_str(), port)).unwrap();
    ours.reload_from_blocking(Naming::Snake, &options("7/min")).unwrap();
    let decided = ours
        .sans_io_finish(&call, &exchange(&mut socket, &out))
        .expect("finished, not sent again the usual way")
        .unwrap();
    assert_eq!((decided.limit, decided.remaining), (3, 2), "the policy it started with");
    let next = ours.check("k").await.unwrap();
    assert_eq!(
        (next.limit, next.remaining),
        (7, 5),
        "charged once by the socket, once now"
    );
}
