//! The server on a real Redis: one budget with the libraries (a `Limiter`
//! built here from the same rules file), and each policy's fallback while
//! Redis hangs (SIGSTOP).

mod common;
#[path = "../../core/tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use common::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use common::{call, descriptor, Server};
use polylimit::{Limiter, RequestInfo};
use support::RedisServer;

const T0: i64 = 1_700_000_040_000;

#[tokio::test]
async fn the_server_and_a_library_draw_on_one_budget() {
    let redis = RedisServer::start();
    // One rules file, as the apps and the edge would share it.
    let rules = format!(
        "store: {}\ntimeout: 10s\npolicies:\n  payments: {{ algorithm: gcra, rate: 1/min, burst: 5 }}\n\
         rules:\n  - name: payments\n    match: {{ method: POST, path: /api/payments/* }}\n    key: [user, route]\n    policy: payments\n",
        redis.url()
    );
    let server = Server::start(&rules);
    let mut client = server.client().await;
    let app = Limiter::from_rules(&rules).unwrap();
    let d = descriptor(&[
        (":method", "POST"),
        (":path", "/api/payments/7"),
        ("route", "/api/payments/{id}"),
        ("user", "alice"),
    ]);
    let info = RequestInfo {
        method: "POST".into(),
        path: "/api/payments/9".into(),
        route: Some("/api/payments/{id}".into()),
        user: Some("alice".into()),
        now_ms: Some(T0),
        ..RequestInfo::default()
    };
    // Edge, app, edge, app, …: 5 admitted in all, then both refuse.
    let mut admitted = Vec::new();
    for i in 0..8 {
        let allowed = if i % 2 == 0 {
            let r = call(&mut client, vec![d.clone()], 0, Some(T0)).await.unwrap();
            r.overall_code == Code::Ok as i32
        } else {
            app.check_request(&info).await.unwrap().status.is_none()
        };
        admitted.push(allowed);
    }
    assert_eq!(admitted, [true, true, true, true, true, false, false, false]);
    // The remaining the edge reports counts the app's charges too.
    let other = RequestInfo {
        user: Some("bob".into()),
        ..info.clone()
    };
    app.check_request(&other).await.unwrap();
    app.check_request(&other).await.unwrap();
    let bob = descriptor(&[
        (":method", "POST"),
        (":path", "/api/payments/1"),
        ("route", "/api/payments/{id}"),
        ("user", "bob"),
    ]);
    let r = call(&mut client, vec![bob], 0, Some(T0)).await.unwrap();
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 2));
}

#[tokio::test]
async fn while_redis_hangs_each_policys_fallback_answers_within_the_timeout() {
    let redis = RedisServer::start();
    let timeout_ms = 200;
    let rules = format!(
        "store: {}\ntimeout: {timeout_ms}ms\npolicies:\n\
         \x20 strict: {{ algorithm: fixed_window, rate: 5/min, on_store_error: fail_closed }}\n\
         \x20 lenient: {{ algorithm: fixed_window, rate: 5/min, on_store_error: local }}\n\
         rules:\n  - match: {{ path: /strict }}\n    key: [key]\n    policy: strict\n\
         \x20 - match: {{ path: /lenient }}\n    key: [key]\n    policy: lenient\n",
        redis.url()
    );
    let server = Server::start(&rules);
    let mut client = server.client().await;
    let strict = descriptor(&[(":path", "/strict"), ("key", "k")]);
    let lenient = descriptor(&[(":path", "/lenient"), ("key", "k")]);
    // Connected and scripts loaded while Redis answers (retried: a loaded host
    // may miss the timeout once).
    common::eventually_async(|| async {
        let mut c = server.client().await;
        call(&mut c, vec![strict.clone()], 0, None).await.unwrap().overall_code == Code::Ok as i32
    })
    .await;
    redis.pause();
    let started = Instant::now();
    let r = call(&mut client, vec![strict.clone()], 0, None).await.unwrap();
    let strict_took = started.elapsed();
    let started = Instant::now();
    let l = call(&mut client, vec![lenient.clone()], 0, None).await.unwrap();
    let lenient_took = started.elapsed();
    redis.resume();
    // fail_closed: refused, with the 503 body (OVER_LIMIT whatever Envoy's failure_mode_deny).
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let body: serde_json::Value = serde_json::from_slice(&r.raw_body).unwrap();
    assert_eq!(body["error"], "rate_limiter_unavailable", "{body}");
    // local: this process's own limiter decides, from a full budget.
    assert_eq!((l.overall_code, l.statuses[0].limit_remaining), (Code::Ok as i32, 4));
    // Within the timeout (plus a loaded host's scheduling slack).
    let bound = Duration::from_millis(timeout_ms + 500);
    eprintln!("fallback answers while Redis hangs: fail_closed {strict_took:?}, local {lenient_took:?} (timeout {timeout_ms} ms)");
    assert!(
        strict_took < bound && lenient_took < bound,
        "{strict_took:?} {lenient_took:?}"
    );
}

#[tokio::test]
async fn on_redis_the_answers_are_the_memory_stores() {
    let redis = RedisServer::start();
    let rules = |store: &str| {
        format!(
            "store: {store}\ntimeout: 10s\nheaders: both\npolicies:\n  api: {{ algorithm: sliding_window_counter, rate: 3/min }}\n\
             rules:\n  - match: {{ path: /api/* }}\n    key: [ip]\n    policy: api\n"
        )
    };
    let server = Server::start(&rules(&redis.url()));
    let mut client = server.client().await;
    let memory = Limiter::from_rules(&rules("memory")).unwrap();
    let d = descriptor(&[("remote_address", "203.0.113.7"), (":path", "/api/items")]);
    let info = RequestInfo {
        path: "/api/items".into(),
        peer: Some("203.0.113.7".into()),
        ..RequestInfo::default()
    };
    let mut codes = Vec::new();
    for i in 0..5 {
        let now = T0 + 10_000 * i;
        let got = call(&mut client, vec![d.clone()], 0, Some(now)).await.unwrap();
        let want = memory
            .check_request(&RequestInfo {
                now_ms: Some(now),
                ..info.clone()
            })
            .await
            .unwrap();
        let headers: Vec<(String, String)> = got
            .response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .filter(|(k, _)| k != "content-type")
            .collect();
        assert_eq!(headers, want.headers.to_vec(), "call {i}");
        assert_eq!(got.raw_body, want.body.unwrap_or_default().into_bytes(), "call {i}");
        codes.push((got.overall_code, got.statuses[0].limit_remaining));
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [(ok, 2), (ok, 1), (ok, 0), (over, 0), (over, 0)]);
}
