//! The real `polylimit-server` binary for tests: started on port 0 with a
//! rules file written for the test, its address read from its "listening"
//! log line, stopped by pid when dropped; and a gRPC client from Envoy's
//! own protos (the server's `src/proto`).
#![allow(dead_code)]

#[path = "../../src/proto/mod.rs"]
pub mod proto;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

pub const DOMAIN: &str = "edge";

pub struct Server {
    child: Child,
    pub grpc: String,
    pub http: String,
    pub rules: PathBuf,
    /// Every stdout line so far.
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// The server on `rules` (the text of a rules file), trusting the
    /// client's clock (`x-polylimit-now-ms`).
    pub fn start(rules: &str) -> Server {
        Server::start_with(rules, &[("POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK", "1")])
    }

    pub fn start_with(rules: &str, env: &[(&str, &str)]) -> Server {
        let path = rules_file(rules);
        let mut child = Command::new(env!("CARGO_BIN_EXE_polylimit-server"))
            .args([
                "--rules",
                path.to_str().unwrap(),
                "--grpc",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
            ])
            .args(["--domain", DOMAIN])
            .env_remove("POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the server binary starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let seen = lines.clone();
        // Drains stdout for the server's whole life (a full pipe would block its logs).
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let listening = line.contains("\"msg\":\"listening\"");
                seen.lock().unwrap().push(line.clone());
                if listening {
                    let _ = tx.send(line);
                }
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no listening line: {:?}", lines.lock().unwrap()));
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        Server {
            child,
            grpc: value["grpc"].as_str().unwrap().to_string(),
            http: value["http"].as_str().unwrap().to_string(),
            rules: path,
            lines,
        }
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.grpc))
            .await
            .expect("the gRPC port accepts")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.rules);
    }
}

/// A rules file of its own for one server.
pub fn rules_file(text: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("polylimit-server-test-{}-{n}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// A descriptor of `(key, value)` entries.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// `ShouldRateLimit` for `descriptors` in [`DOMAIN`] at `now_ms`.
pub async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    descriptors: Vec<RateLimitDescriptor>,
    hits_addend: u32,
    now_ms: Option<i64>,
) -> Result<RateLimitResponse, tonic::Status> {
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors,
        hits_addend,
    });
    if let Some(now) = now_ms {
        request
            .metadata_mut()
            .insert("x-polylimit-now-ms", now.to_string().parse().unwrap());
    }
    client.should_rate_limit(request).await.map(tonic::Response::into_inner)
}

/// Waits until the future `f` resolves to true, for at most 10 s.
pub async fn eventually_async<F: std::future::Future<Output = bool>>(mut f: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not within 10 s");
}
