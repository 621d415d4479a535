//! A real `redis-server` for tests: started on a free loopback port with no
//! persistence, waited for with PING, stopped by pid when dropped.
//!
//! `POLYLIMIT_SERVER` names another server binary (a path or a command on
//! PATH) for every server these tests start, the topologies' too:
//! `make valkey-test` runs the vector runners on Valkey this way, with
//! `POLYLIMIT_SERVER_NAME=valkey` so that every server started is checked to
//! be one (its `INFO server`), never a `redis-server` found instead.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The store timeout of a test that asserts decisions, not latency: on a
/// loaded CI host a store call can miss the 100 ms default and fall back. A
/// test of timeouts sets its own.
pub const DECISIONS: Duration = Duration::from_secs(10);

/// `LimiterConfig::new(p).with_store(url).for_decisions()`: the [`DECISIONS`] timeout.
pub trait ForDecisions {
    fn for_decisions(self) -> Self;
}

impl ForDecisions for polylimit::LimiterConfig {
    fn for_decisions(mut self) -> Self {
        self.timeout = DECISIONS;
        self
    }
}

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
}

/// The server binary: `$POLYLIMIT_SERVER`, else `redis-server`.
pub fn server_binary() -> String {
    std::env::var("POLYLIMIT_SERVER")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// The server on `port` as `INFO server` names it: `valkey 9.1.2`,
/// `redis 7.0.15`.
fn server_name(port: u16) -> String {
    let info = raw_command(port, "INFO server").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
    };
    match field("valkey_version") {
        Some(version) => format!("valkey {version}"),
        None => format!("redis {}", field("redis_version").unwrap_or_else(|| "?".into())),
    }
}

/// With `$POLYLIMIT_SERVER_NAME` set, fails unless the server on `port`
/// names itself so (`valkey`, `redis`).
fn check_server_name(port: u16) {
    if let Some(expected) = std::env::var("POLYLIMIT_SERVER_NAME").ok().filter(|s| !s.is_empty()) {
        let name = server_name(port);
        assert!(
            name.split(' ').next() == Some(expected.as_str()),
            "the server on port {port} is {name}, not {expected} (POLYLIMIT_SERVER_NAME)"
        );
    }
}

/// Sends one inline command to `127.0.0.1:port` and returns the raw reply.
fn raw_command(port: u16, line: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(format!("{line}\r\n").as_bytes()).ok()?;
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let mut server = RedisServer {
            child: None,
            port: free_port(),
        };
        // A free port can be taken by another test's server between
        // `free_port` and the bind: ours then exits, and the PING is
        // answered by the other one (which that test later kills). Try
        // another port until the server answering is ours.
        for _ in 0..5 {
            server.spawn();
            if server.answers_as_child() {
                return server;
            }
            server.kill();
            server.port = free_port();
        }
        panic!("no redis-server of ours answered on a free port");
    }

    /// Whether the server answering on the port is our child process.
    fn answers_as_child(&self) -> bool {
        let pid = format!("process_id:{}\r\n", self.pid());
        self.command("INFO server").is_some_and(|info| info.contains(&pid))
    }

    /// A server for a test binary's tests to share from a `static`. Statics
    /// are never dropped, so its pid is killed when the test process exits
    /// (an `atexit` handler), never left behind.
    pub fn shared() -> RedisServer {
        static PIDS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        extern "C" fn kill_shared() {
            for pid in PIDS.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                // SAFETY: kill(2) on a pid this process started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let server = RedisServer::start();
        PIDS.lock().unwrap_or_else(|e| e.into_inner()).push(server.pid() as i32);
        // SAFETY: registers a plain function that only calls kill(2).
        AT_EXIT.call_once(|| assert_eq!(unsafe { libc::atexit(kill_shared) }, 0));
        server
    }

    fn spawn(&mut self) {
        let binary = server_binary();
        let child = Command::new(&binary)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{binary} must be installed (make test installs it): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.command("PING").as_deref() == Some("+PONG\r\n") {
                check_server_name(self.port);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{binary} on port {} did not answer PING", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends one inline command and returns the raw reply.
    pub fn command(&self, line: &str) -> Option<String> {
        raw_command(self.port, line)
    }

    /// `calls=` of one command in INFO commandstats (0 when never called).
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.command("INFO commandstats").unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILL; the port stays reserved for [`RedisServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: the server hangs, connections stay open. Returns once the
    /// kernel reports the process stopped.
    pub fn pause(&self) {
        self.signal("-STOP");
        let stat = format!("/proc/{}/stat", self.pid());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let state = std::fs::read_to_string(&stat).unwrap_or_default();
            // The state follows the parenthesised command name.
            if state.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("redis-server {} did not stop", self.pid());
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Starts a fresh server (empty, no scripts cached) on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill").args(["-CONT", &child.id().to_string()]).status();
        }
        self.kill();
    }
}

/// A TCP proxy on loopback in front of a real server. [`Proxy::black_hole`]
/// makes every connection open at that moment stop forwarding while its
/// sockets stay open (a stuck proxy, a half-open TCP connection: no FIN, no
/// RST, no reply); connections opened later forward normally.
pub struct Proxy {
    pub port: u16,
    /// Connections numbered below this forward nothing.
    cut_below: std::sync::Arc<std::sync::atomic::AtomicU64>,
    next: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Forwards a free loopback port to `127.0.0.1:upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        Proxy::start_delayed(upstream, Duration::ZERO).await
    }

    /// The same, but each connection reaches the server only `delay` after
    /// it was accepted (a slow network, a TLS handshake across regions):
    /// what the client sends meanwhile waits in the proxy's socket.
    pub async fn start_delayed(upstream: u16, delay: Duration) -> Proxy {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut_below = Arc::new(AtomicU64::new(0));
        let next = Arc::new(AtomicU64::new(0));
        let (cut, counter) = (cut_below.clone(), next.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = counter.fetch_add(1, Ordering::SeqCst);
                let cut = cut.clone();
                tokio::spawn(async move {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::spawn(pump(client_read, server_write, id, cut.clone()));
                    tokio::spawn(pump(server_read, client_write, id, cut));
                });
            }
        });
        Proxy {
            port,
            cut_below,
            next,
            task,
        }
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.next.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Every connection open now goes silent for good, sockets kept open.
    pub fn black_hole(&self) {
        use std::sync::atomic::Ordering;
        self.cut_below.store(self.next.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A loopback listener that accepts connections and never answers (a server
/// stuck before its handshake, a black-holed Redis behind a load balancer),
/// keeping every socket open; counts what it accepted.
pub struct Silent {
    pub port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Silent {
    pub async fn start() -> Silent {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = accepted.clone();
        let task = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                open.push(socket);
            }
        });
        Silent { port, accepted, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to` until `id` is cut, then swallows what arrives,
/// keeping both sockets open.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    id: u64,
    cut_below: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if id < cut_below.load(std::sync::atomic::Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// The vector files of `$POLYLIMIT_VECTORS/<sub>` (default
/// `tests/conformance/<sub>`), sorted, as (file name, parsed JSON). An
/// unreadable or unparsable file, or an empty directory, fails the run.
pub fn vector_files<T: serde::de::DeserializeOwned>(sub: &str) -> Vec<(String, T)> {
    let base = match std::env::var_os("POLYLIMIT_VECTORS") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance"),
    };
    let dir = base.join(sub);
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read vectors in {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no vectors in {}", dir.display());
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let parsed = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path.file_name().unwrap().to_string_lossy().into_owned(), parsed)
        })
        .collect()
}

/// A real Redis topology started by `tests/topology/redis_topology.py` (the
/// one harness every language's suite uses): its servers live until this is
/// dropped, or until the test process ends (the script's stdin closes).
pub struct Topology {
    child: Child,
    /// The store URL (`redis+cluster://…`, `redis+sentinel://…`).
    pub url: String,
    /// Each server's port, pid and role (`primary`, `replica`).
    pub nodes: Vec<serde_json::Value>,
    /// With TLS: the PEM file of the CA that signed the servers' certificates.
    pub ca: Option<String>,
}

impl Topology {
    /// A 6-node Redis Cluster: 3 primaries, 3 replicas.
    pub fn cluster() -> Topology {
        Topology::start("cluster")
    }

    /// A primary, its replica and 3 sentinels (`redis+sentinel://…/polylimit`).
    pub fn sentinel() -> Topology {
        Topology::start("sentinel")
    }

    /// The pid of the first node with `role`.
    pub fn pid_of(&self, role: &str) -> u32 {
        self.nodes
            .iter()
            .find(|n| n["role"] == role)
            .and_then(|n| n["pid"].as_u64())
            .unwrap_or_else(|| panic!("no {role} node")) as u32
    }

    /// `kind` (`single`, `cluster`, `sentinel`) whose data nodes require
    /// `password`; the URL carries it.
    pub fn with_password(kind: &str, password: &str) -> Topology {
        Topology::start_with(kind, &["--password", password])
    }

    /// `kind` serving TLS only (`rediss…` URL), certificates from [`Topology::ca`].
    pub fn with_tls(kind: &str) -> Topology {
        Topology::start_with(kind, &["--tls"])
    }

    fn start(kind: &str) -> Topology {
        Topology::start_with(kind, &[])
    }

    fn start_with(kind: &str, args: &[&str]) -> Topology {
        use std::io::BufRead;
        // One topology coming up at a time in a test binary: each loads both
        // cores while it converges, and picks its ports while they are free.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/topology/redis_topology.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(kind)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the topology harness");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the harness describes the topology");
        let described: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("the {kind} harness failed to start: {e}: {line:?}"));
        let topology = Topology {
            child,
            url: described["url"].as_str().expect("a url").to_string(),
            nodes: described["nodes"].as_array().cloned().unwrap_or_default(),
            ca: described["ca"].as_str().map(str::to_string),
        };
        // Data nodes without TLS or a password answer a plain INFO.
        if args.is_empty() {
            for node in topology.nodes.iter().filter(|n| n["role"] != "sentinel") {
                check_server_name(node["port"].as_u64().expect("a port") as u16);
            }
        }
        topology
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        // Closing stdin makes the harness stop every server it started.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Sends `signal` (`-KILL`, `-STOP`, `-CONT`) to `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} {pid}");
}

/// `redis-cli -p <port> <args…>`'s output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Fails with every mismatch a vector runner collected.
pub fn assert_no_mismatches(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A file of decision vectors (`tests/conformance/*.json` and its
/// subdirectories of the same shape): cases of one policy and their steps.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorFile<S> {
    pub cases: Vec<VectorCase<S>>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorCase<S> {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub policy: serde_json::Value,
    pub steps: Vec<S>,
}

/// A step's key when it names none.
pub fn default_key() -> String {
    "k".into()
}

/// A step's cost when it names none.
pub fn one() -> u64 {
    1
}
