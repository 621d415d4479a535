//! The HTTP side of the real `polylimit-server` binary (port 0, the
//! `listening` line): `/check` answers exactly what the core decides for the
//! HTTP vectors it can carry, a bad rules file on SIGHUP keeps the old rules,
//! and SIGTERM finishes a /check in flight.

#[path = "../src/proto/mod.rs"]
mod proto;
#[path = "../../core/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use polylimit::{Limiter, RequestInfo};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;

/// A running server, stopped by pid when dropped.
struct Server {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
    lines: mpsc::Receiver<Value>,
}

impl Server {
    fn start(rules: &Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_polylimit-server"))
            .args([
                "--rules",
                rules.to_str().unwrap(),
                "--grpc",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--domain",
                "edge",
            ])
            .env("POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK", "1")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start polylimit-server");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a JSON log line: {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            http: "0.0.0.0:0".parse().unwrap(),
            grpc: "0.0.0.0:0".parse().unwrap(),
            lines,
        };
        let listening = server.line("listening");
        server.http = listening["http"].as_str().unwrap().parse().unwrap();
        server.grpc = listening["grpc"].as_str().unwrap().parse().unwrap();
        server
    }

    /// The next log line whose `msg` starts with `msg` (30 s at most).
    fn line(&self, msg: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log line {msg:?}"));
            if line["msg"].as_str().unwrap_or("").starts_with(msg) {
                return line;
            }
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP answer: status, headers (names lower case, in order), body.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

/// One HTTP/1.1 request on a fresh connection from `from`.
async fn send(server: SocketAddr, from: [u8; 4], method: &str, target: &str, headers: &[(String, String)]) -> Answer {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let mut stream = socket.connect(server).await.unwrap();
    let mut request = format!("{method} {target} HTTP/1.1\r\nhost: polylimit\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head: {raw:?}"));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .map(|l| l.split_once(": ").unwrap())
        .filter(|(name, _)| !matches!(*name, "date" | "content-length" | "connection"))
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("polylimit-server-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The core's outcome for `request`, as /check should answer it.
fn expected(outcome: polylimit::Outcome) -> Answer {
    let mut headers: Vec<(String, String)> = outcome
        .headers
        .into_iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v))
        .collect();
    if outcome.status.is_some() && outcome.body.is_some() {
        headers.push(("content-type".into(), "application/json".into()));
    }
    Answer {
        status: outcome.status.unwrap_or(200),
        headers,
        body: outcome.status.and(outcome.body).unwrap_or_default(),
    }
}

/// The vector's request as /check's headers and query, or why /check cannot carry it.
fn as_check(request: &RequestInfo) -> Result<(String, Vec<(String, String)>), String> {
    if request.cost.is_some() || request.case_insensitive || request.ignore_trailing_slash {
        return Err("cost or a framework's matching".into());
    }
    let now = request.now_ms.ok_or("no now_ms")?;
    let mut headers = vec![
        ("x-original-method".to_string(), request.method.clone()),
        ("x-original-uri".to_string(), request.path.clone()),
        ("x-polylimit-now-ms".to_string(), now.to_string()),
    ];
    let mut query = Vec::new();
    if let Some(route) = &request.route {
        let escaped: String = route
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        query.push(format!("route={escaped}"));
    }
    for (dimension, value) in [
        ("user", &request.user),
        ("api_key", &request.api_key),
        ("key", &request.key),
    ] {
        if let Some(value) = value {
            query.push(format!("{dimension}_header=x-test-{dimension}"));
            headers.push((format!("x-test-{dimension}"), value.clone()));
        }
    }
    for (name, value) in &request.headers {
        let name = name.to_ascii_lowercase();
        if name.starts_with("x-original-")
            || matches!(
                name.as_str(),
                "x-forwarded-method" | "x-forwarded-uri" | "x-polylimit-now-ms"
            )
            || name.starts_with("x-test-")
        {
            return Err(format!("header {name} is /check's own"));
        }
        headers.push((name, value.clone()));
    }
    let printable = |s: &str| s.bytes().all(|b| (0x20..0x7f).contains(&b)) && !s.is_empty();
    if !headers
        .iter()
        .all(|(n, v)| printable(n) && (printable(v) || v.is_empty()))
    {
        return Err("a value a header line cannot carry".into());
    }
    let target = if query.is_empty() {
        "/check".to_string()
    } else {
        format!("/check?{}", query.join("&"))
    };
    Ok((target, headers))
}

/// Every HTTP vector case /check can carry (no completions, peeks or
/// costs): played through the binary, each request from its own loopback
/// address standing for the vector's peer, and compared with the core's
/// own outcome for the same requests on the same rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_answers_what_the_core_decides_for_the_http_vectors() {
    play_vectors("memory").await;
}

/// The same on a real Redis (the server and the core's reference under
/// prefixes of their own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_answers_what_the_core_decides_for_the_http_vectors_on_redis() {
    let redis = support::RedisServer::start();
    play_vectors(&redis.url()).await;
}

async fn play_vectors(store: &str) {
    let dir = temp_dir(if store == "memory" { "vectors" } else { "vectors-redis" });
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance/http");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&vectors)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let (mut played, mut steps, mut skipped) = (0, 0, BTreeMap::<String, usize>::new());
    let mut failures = Vec::new();
    for file in &files {
        let vectors: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        'case: for case in vectors["cases"].as_array().unwrap() {
            let mut requests = Vec::new();
            for step in case["requests"].as_array().unwrap() {
                let Some(request) = step
                    .get("request")
                    .filter(|_| step.get("peek").is_none() && step.get("complete").is_none())
                else {
                    *skipped.entry("completions or peeks".into()).or_default() += 1;
                    continue 'case;
                };
                let request = RequestInfo::from_value(request).unwrap();
                if let Err(why) = as_check(&request) {
                    *skipped.entry(why).or_default() += 1;
                    continue 'case;
                }
                requests.push(request);
            }
            // Each distinct peer becomes a loopback address of its own.
            let mut peers: Vec<Option<String>> = Vec::new();
            for r in &requests {
                if !peers.contains(&r.peer) {
                    peers.push(r.peer.clone());
                }
            }
            let address = |peer: &Option<String>| {
                let i = peers.iter().position(|p| p == peer).unwrap() as u8;
                [127, 0, 0, 2 + i]
            };
            let mut rules = case["rules"].clone();
            rules["store"] = store.into();
            rules["timeout"] = "10s".into();
            let case_id = format!("{name}-{played}");
            rules["prefix"] = format!("core-{case_id}").into();
            let core = Limiter::from_rules(&rules.to_string()).unwrap();
            rules["prefix"] = format!("edge-{case_id}").into();
            let path = dir.join("rules.json");
            std::fs::write(&path, rules.to_string()).unwrap();
            let server = Server::start(&path);
            for (i, request) in requests.iter().enumerate() {
                steps += 1;
                let from = address(&request.peer);
                let (target, headers) = as_check(request).unwrap();
                let started = Instant::now();
                let got = send(server.http, from, "GET", &target, &headers).await;
                let mut mapped = request.clone();
                mapped.peer = Some(std::net::Ipv4Addr::from(from).to_string());
                let outcome = core.check_request(&mapped).await.unwrap();
                // /check gives a concurrency slot back once decided (see below).
                core.release_at(&outcome.leases, mapped.now_ms.unwrap()).await.unwrap();
                let delay = outcome.delay_ms;
                let want = expected(outcome);
                if got != want {
                    failures.push(format!(
                        "{name}: {:?} request {i}: expected {want:?}, got {got:?}",
                        case["name"]
                    ));
                }
                if started.elapsed() < Duration::from_millis(delay) {
                    failures.push(format!(
                        "{name}: {:?} request {i}: answered before its delay of {delay} ms",
                        case["name"]
                    ));
                }
            }
            played += 1;
        }
    }
    eprintln!("/check on {store} played {played} cases ({steps} requests); skipped cases: {skipped:?}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        played >= 40 && steps >= 150,
        "only {played} cases, {steps} requests played"
    );
}

const RULES: &str = "store: memory\npolicies: { api: { algorithm: fixed_window, rate: 2/min } }\n\
                     rules: [{ match: { path: /api/* }, key: [ip], policy: api }]\n";

fn check_headers(uri: &str) -> Vec<(String, String)> {
    vec![
        ("x-original-uri".into(), uri.into()),
        ("x-polylimit-now-ms".into(), "1700000000000".into()),
    ]
}

fn limit(answer: &Answer) -> &str {
    header(answer, "x-ratelimit-limit")
}

fn header<'a>(answer: &'a Answer, name: &str) -> &'a str {
    answer
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("-")
}

async fn metrics(server: &Server) -> String {
    send(server.http, [127, 0, 0, 1], "GET", "/metrics", &[]).await.body
}

/// SIGHUP with a bad file: the error names the field, the old rules stay,
/// the reload is counted; a good file then takes effect on the same limiter:
/// the memory store's counters and the metrics carry over.
#[tokio::test]
async fn a_bad_rules_file_on_reload_keeps_serving_the_old_rules() {
    let dir = temp_dir("reload");
    let path = dir.join("rules.yaml");
    std::fs::write(&path, RULES).unwrap();
    let server = Server::start(&path);
    let first = send(server.http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await;
    assert_eq!((first.status, limit(&first)), (200, "2"));

    std::fs::write(&path, RULES.replace("rate: 2/min", "rate: 2/min, burts: 3")).unwrap();
    server.signal("HUP");
    let failed = server.line("rules reload failed");
    let error = failed["error"].as_str().unwrap();
    assert!(error.contains("burts"), "the error names the field: {error}");
    let kept = send(server.http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await;
    assert_eq!((kept.status, limit(&kept)), (200, "2"));
    let denied = send(server.http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await;
    assert_eq!(denied.status, 429, "the old rules' counters are kept too");

    std::fs::write(&path, RULES.replace("2/min", "5/min")).unwrap();
    server.signal("HUP");
    server.line("rules reloaded");
    let fresh = send(server.http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await;
    assert_eq!((fresh.status, limit(&fresh)), (200, "5"));
    // The same window on the same store: the two spent before the reload
    // stay spent (a limiter built anew would have said 4).
    assert_eq!(
        header(&fresh, "x-ratelimit-remaining"),
        "2",
        "the memory store's state survives a reload"
    );
    let text = metrics(&server).await;
    assert_eq!(
        text.matches("# TYPE polylimit_config_reloads_total counter").count(),
        1,
        "one reload counter, the core's: {text}"
    );
    let allowed = text
        .lines()
        .find(|l| l.starts_with("polylimit_requests_total{policy=\"api\"") && l.contains("decision=\"allowed\""))
        .and_then(|l| l.rsplit(' ').next());
    assert_eq!(allowed, Some("3"), "the request counters survive a reload: {text}");
    assert!(
        text.contains("polylimit_config_reloads_total{result=\"ok\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("polylimit_config_reloads_total{result=\"error\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("polylimit_server_checks_total{status=\"429\"} 1\n"),
        "{text}"
    );
}

/// SIGTERM while a shaped /check is held: it is answered, new connections
/// are refused, the process exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_check_in_flight() {
    let dir = temp_dir("sigterm");
    let path = dir.join("rules.yaml");
    std::fs::write(
        &path,
        "store: memory\npolicies: { shaped: { algorithm: leaky_bucket, mode: shape, rate: 1/s, burst: 3 } }\n\
         rules: [{ match: { path: /api/* }, key: [ip], policy: shaped }]\n",
    )
    .unwrap();
    let mut server = Server::start(&path);
    let http = server.http;
    let first = send(http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await;
    assert_eq!(first.status, 200);
    // The second request is held 1 s (shaping) before its 200.
    let held = tokio::spawn(async move { send(http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !metrics(&server).await.contains("polylimit_server_checks_in_flight 1\n") {
        assert!(Instant::now() < deadline, "the held check never showed in flight");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.signal("TERM");
    server.line("shutting down");
    let answer = held.await.unwrap();
    assert_eq!((answer.status, limit(&answer)), (200, "3"));
    let status = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().unwrap();
        (status, server)
    })
    .await
    .unwrap()
    .0;
    assert_eq!(status.code(), Some(0));
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "still accepting after shutdown"
    );
}

/// A concurrency rule's slot is given back once /check has decided (the
/// proxy never says when the response ends): one after the other, every
/// check gets the one slot.
#[tokio::test]
async fn a_concurrency_slot_is_given_back_after_the_check() {
    let dir = temp_dir("concurrency");
    let path = dir.join("rules.yaml");
    std::fs::write(
        &path,
        "store: memory\npolicies: { one: { algorithm: concurrency, limit: 1, lease: 1h } }\n\
         rules: [{ match: { path: /reports/* }, key: [ip], policy: one }]\n",
    )
    .unwrap();
    let server = Server::start(&path);
    for _ in 0..3 {
        let answer = send(
            server.http,
            [127, 0, 0, 1],
            "GET",
            "/check",
            &check_headers("/reports/1"),
        )
        .await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
}

/// The forms a proxy or a hostile client may send: an absolute-form URI and
/// percent-escapes count on the same key as the plain path, HEAD gets the
/// headers without a body, and what /check cannot decide is a 400 naming
/// the header.
#[tokio::test]
async fn hostile_forms_through_the_binary() {
    let dir = temp_dir("hostile");
    let path = dir.join("rules.yaml");
    std::fs::write(&path, RULES.replace("2/min", "5/min")).unwrap();
    let server = Server::start(&path);
    let remaining = |a: &Answer| {
        a.headers
            .iter()
            .find(|(n, _)| n == "x-ratelimit-remaining")
            .map(|(_, v)| v.clone())
    };
    let mut left = Vec::new();
    for (method, uri) in [
        ("GET", "/api/a"),
        ("GET", "http://example.com/api/a?x=1"),
        ("HEAD", "/api/%61"),
    ] {
        let answer = send(server.http, [127, 0, 0, 1], method, "/check", &check_headers(uri)).await;
        assert_eq!((answer.status, answer.body.as_str()), (200, ""), "{uri}: {answer:?}");
        left.push(remaining(&answer).unwrap());
    }
    assert_eq!(left, ["4", "3", "2"], "one key for the three forms");

    let bad = |headers: Vec<(String, String)>| async move {
        let answer = send(server.http, [127, 0, 0, 1], "GET", "/check", &headers).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        let body: Value = serde_json::from_str(&answer.body).unwrap();
        assert_eq!(body["error"], "bad_request");
        body["message"].as_str().unwrap().to_string()
    };
    assert_eq!(
        bad(vec![]).await,
        "X-Forwarded-Uri or X-Original-URI is missing: the original request's URI"
    );
    let twice = vec![
        ("x-forwarded-uri".to_string(), "/api/a".to_string()),
        ("x-forwarded-uri".to_string(), "/api/b".to_string()),
    ];
    assert_eq!(bad(twice).await, "X-Forwarded-Uri has several field lines");
    let text = metrics(&server).await;
    assert!(
        text.contains("polylimit_server_checks_total{status=\"400\"} 2\n"),
        "{text}"
    );
}

/// /readyz: ready on a store that answers; not ready once the store's
/// breaker opens (5 failed calls to a Redis that is not there).
#[tokio::test]
async fn readyz_follows_the_stores_breaker() {
    let dir = temp_dir("readyz");
    let path = dir.join("rules.yaml");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    std::fs::write(
        &path,
        RULES.replace("store: memory", &format!("store: redis://{closed}\ntimeout: 50ms")),
    )
    .unwrap();
    let server = Server::start(&path);
    let ready = send(server.http, [127, 0, 0, 1], "GET", "/readyz", &[]).await;
    assert_eq!(
        (ready.status, ready.body.as_str()),
        (200, r#"{"breaker":"closed","ready":true}"#)
    );
    let health = send(server.http, [127, 0, 0, 1], "GET", "/healthz", &[]).await;
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    for _ in 0..6 {
        let answer = send(server.http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/a")).await;
        assert!(
            matches!(answer.status, 200 | 429),
            "the local fallback decides: {answer:?}"
        );
    }
    let ready = send(server.http, [127, 0, 0, 1], "GET", "/readyz", &[]).await;
    assert_eq!(ready.status, 503, "{ready:?}");
    let body: Value = serde_json::from_str(&ready.body).unwrap();
    assert_eq!(body["ready"], false);
    assert!(
        body["reason"].as_str().unwrap().contains("circuit breaker is open"),
        "{body}"
    );
}

/// SIGTERM while a gRPC call and a /check wait on a Redis that hangs
/// (SIGSTOP, `timeout: 2s`): both listeners stop accepting, both calls are
/// answered (by the local fallback, once the timeout is up), the process
/// exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_calls_in_flight_on_both_listeners() {
    use proto::envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor::Entry, RateLimitDescriptor};
    use proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use proto::envoy::service::ratelimit::v3::RateLimitRequest;

    let redis = support::RedisServer::start();
    let dir = temp_dir("sigterm-both");
    let path = dir.join("rules.yaml");
    std::fs::write(
        &path,
        RULES.replace("store: memory", &format!("store: {}\ntimeout: 2s", redis.url())),
    )
    .unwrap();
    let mut server = Server::start(&path);
    let (http, grpc) = (server.http, server.grpc);
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}")).await.unwrap();
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: ":path".into(),
                value: "/api/a".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    // Both paths connected while Redis answers.
    let first = client.should_rate_limit(request.clone()).await.unwrap().into_inner();
    assert_eq!(first.overall_code, Code::Ok as i32);
    assert_eq!(
        send(http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/b"))
            .await
            .status,
        200
    );

    redis.pause();
    let started = Instant::now();
    let held_grpc = tokio::spawn(async move { client.should_rate_limit(request).await });
    let held_check =
        tokio::spawn(async move { send(http, [127, 0, 0, 1], "GET", "/check", &check_headers("/api/b")).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = metrics(&server).await;
        if text.contains("polylimit_server_checks_in_flight 1\n")
            && text.contains("polylimit_server_grpc_in_flight 1\n")
        {
            break;
        }
        assert!(Instant::now() < deadline, "the held calls never showed in flight");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.signal("TERM");
    server.line("shutting down");
    let answer = held_grpc
        .await
        .unwrap()
        .expect("the gRPC call in flight is answered")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
    assert_eq!(held_check.await.unwrap().status, 200);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "answered after the store's timeout"
    );
    let status = tokio::task::spawn_blocking(move || server.child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    redis.resume();
    assert!(
        tokio::net::TcpStream::connect(http).await.is_err(),
        "HTTP still accepting after shutdown"
    );
    assert!(
        tokio::net::TcpStream::connect(grpc).await.is_err(),
        "gRPC still accepting after shutdown"
    );
}

/// A client that never finishes its request does not hold a shutdown past
/// the server's grace of 10 s.
#[tokio::test]
async fn a_request_never_finished_does_not_hold_the_shutdown() {
    let dir = temp_dir("unfinished");
    let path = dir.join("rules.yaml");
    std::fs::write(&path, RULES).unwrap();
    let mut server = Server::start(&path);
    let mut stream = tokio::net::TcpStream::connect(server.http).await.unwrap();
    stream
        .write_all(b"GET /check HTTP/1.1\r\nhost: polylimit\r\n")
        .await
        .unwrap();
    // The server accepts in order: the half request's connection is in once a
    // whole request sent after it is answered.
    metrics(&server).await;
    let started = Instant::now();
    server.signal("TERM");
    server.line("shutting down");
    let warned = server.line("connections still open after the shutdown grace");
    assert_eq!(
        (warned["server"].as_str(), warned["grace_s"].as_u64()),
        (Some("HTTP"), Some(10))
    );
    let status = tokio::task::spawn_blocking(move || server.child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    drop(stream);
}

/// A gRPC call whose request never ends does not hold a shutdown past the
/// grace either (before the bound, only HTTP had one: SIGTERM waited forever).
#[tokio::test]
async fn a_grpc_call_never_finished_does_not_hold_the_shutdown() {
    let dir = temp_dir("unfinished-grpc");
    let path = dir.join("rules.yaml");
    std::fs::write(&path, RULES).unwrap();
    let mut server = Server::start(&path);
    let mut stream = tokio::net::TcpStream::connect(server.grpc).await.unwrap();
    // HTTP/2 by hand: the preface, empty SETTINGS, then a call's HEADERS with
    // no body and no END_STREAM, then a PING: its ACK comes after the server
    // read the HEADERS, so the call's stream is open when SIGTERM comes.
    let frame = |kind: u8, flags: u8, stream_id: u32, payload: &[u8]| {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream_id.to_be_bytes());
        f.extend(payload);
        f
    };
    let literal = |prefix: u8, value: &str| {
        let mut v = vec![prefix, value.len() as u8];
        v.extend(value.as_bytes());
        v
    };
    let mut headers = vec![0x83, 0x86]; // :method POST, :scheme http (HPACK static table)
    headers.extend(literal(
        0x44,
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    ));
    headers.extend(literal(0x41, "polylimit"));
    headers.extend(literal(0x5f, "application/grpc"));
    headers.extend(literal(0x40, "te"));
    headers.extend([8]);
    headers.extend(b"trailers");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x4, 1, &headers));
    out.extend(frame(0x6, 0, 0, b"pingpong"));
    stream.write_all(&out).await.unwrap();
    loop {
        let mut head = [0u8; 9];
        stream.read_exact(&mut head).await.unwrap();
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        stream.read_exact(&mut payload).await.unwrap();
        match (head[3], head[4]) {
            (0x4, 0) => stream.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
            (0x6, 0x1) => break,
            (0x3 | 0x7, _) => panic!("the server refused the call: frame {head:?} {payload:?}"),
            _ => {}
        }
    }
    let started = Instant::now();
    server.signal("TERM");
    server.line("shutting down");
    let warned = server.line("connections still open after the shutdown grace");
    assert_eq!(
        (warned["server"].as_str(), warned["grace_s"].as_u64()),
        (Some("gRPC"), Some(10))
    );
    let status = tokio::task::spawn_blocking(move || server.child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(10) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    drop(stream);
}
