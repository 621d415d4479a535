//! `cargo bench -p polylimit --bench inside_redis`: redis-server CPU per
//! decision (`INFO commandstats` usec_per_call) of polylimit's shape
//! functions, beside the peers' scripts run the same way on the same server
//! (redis-benchmark, 4 connections, 16 pipelined; the lowest of 8 runs, as
//! other processes share the cores). Every decision is an allowed one (the
//! write path). Ours is measured with the clock sent (what the limiter
//! sends) and with `now_ms` empty (a `TIME` inside the function), and
//! beside the floor of its state format ([`BOUNDS`]). When valgrind is
//! installed, the same calls are also counted in instructions redis-server
//! executes per call (callgrind): deterministic, so the ratio holds on a
//! busy machine, where the µs lines are noise.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHECKS: &str = "200000";
const RUNS: usize = 8;

/// rate-limiter-flexible 11.4 (RateLimiterRedis, fixed window): its script
/// as ioredis sends it (EVALSHA), `points secDuration`.
const RLF: &str = "redis.call('set', KEYS[1], 0, 'EX', ARGV[2], 'NX') \
local consumed = redis.call('incrby', KEYS[1], ARGV[1]) \
local ttl = redis.call('pttl', KEYS[1]) \
if ttl == -1 then \
  redis.call('expire', KEYS[1], ARGV[2]) \
  ttl = 1000 * ARGV[2] \
end \
return {consumed, ttl}";

/// redis_rate v10 (GCRA): its allowN script, `burst rate period cost`.
const REDIS_RATE: &str = r#"
redis.replicate_commands()
local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])
local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst
local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)
local tat = redis.call("GET", rate_limit_key)
if not tat then
  tat = now
else
  tat = tonumber(tat)
end
tat = math.max(tat, now)
local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
local remaining = diff / emission_interval
if remaining < 0 then
  local reset_after = tat - now
  local retry_after = diff * -1
  return {0, 0, tostring(retry_after), tostring(reset_after)}
end
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
local retry_after = -1
return {cost, remaining, tostring(retry_after), tostring(reset_after)}
"#;

/// What bounds a shape function from below: an FCALL with a token bucket's
/// key and four arguments that only answers one integer, and one that also
/// does the GET and the in-place SETRANGE of a token bucket's cells (the
/// Redis work of its common case), with no decision.
const BOUNDS: &str = "#!lua name=bounds
local function reply_only(keys, argv) return 1 end
local function get_set(keys, argv)
  redis.call('GET', keys[1])
  redis.call('SETRANGE', keys[1], '1', struct.pack('<lll', 1, 2, 3))
  return 1
end
redis.register_function('reply_only', reply_only)
redis.register_function('get_set', get_set)";

/// A fixed window's limit: below 10^6, the one-integer state's bound
/// (common.lua), and above the decisions of a run, each on an empty key.
const FW_LIMIT: &str = "999999";

/// The lowest usec_per_call of `command` over [`RUNS`] runs.
fn usec_per_call(redis: &support::RedisServer, stat: &str, command: &[&str]) -> f64 {
    let reply = support::redis_cli(redis.port, command);
    assert!(!reply.contains("ERR"), "{command:?} answered {reply}");
    (0..RUNS)
        .map(|_| {
            redis.command("FLUSHDB").unwrap();
            redis.command("CONFIG RESETSTAT").unwrap();
            let status = Command::new("redis-benchmark")
                .args(["-p", &redis.port.to_string(), "-n", CHECKS, "-c", "4", "-P", "16", "-q"])
                .args(command)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("redis-benchmark (make deps installs it)");
            assert!(status.success());
            let stats = redis.command("INFO commandstats").unwrap();
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{stat}:")))
                .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no cmdstat_{stat} in {stats}"))
        })
        .fold(f64::INFINITY, f64::min)
}

/// A redis-server run under callgrind, to count the instructions it
/// executes per call. Stopped (by its pid) when dropped.
struct Callgrind {
    child: Child,
    port: u16,
    dir: PathBuf,
}

/// Calls per count.
const IR_CALLS: u64 = 20_000;

impl Callgrind {
    /// `None` when valgrind is not installed.
    fn start() -> Option<Callgrind> {
        let installed = |tool: &str| {
            Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !installed("valgrind") || !installed("callgrind_control") {
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let dir = std::env::temp_dir().join(format!("polylimit-callgrind-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let child = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}/cg.%p.out", dir.display()))
            .args([
                "redis-server",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let server = Callgrind { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !support::redis_cli(port, &["PING"]).contains("PONG") {
            assert!(Instant::now() < deadline, "redis-server under valgrind did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(server)
    }

    /// Instructions per call of `command` ([`IR_CALLS`] calls, on an empty database).
    fn ir_per_call(&self, command: &[&str]) -> u64 {
        let reply = support::redis_cli(self.port, command);
        assert!(!reply.contains("ERR"), "{command:?} answered {reply}");
        support::redis_cli(self.port, &["FLUSHDB"]);
        let pid = self.child.id().to_string();
        let control = |flag: &str| {
            let status = Command::new("callgrind_control")
                .args([flag, &pid])
                .stdout(Stdio::null())
                .status()
                .expect("callgrind_control");
            assert!(status.success());
        };
        control("-z");
        let status = Command::new("redis-benchmark")
            .args([
                "-p",
                &self.port.to_string(),
                "-n",
                &IR_CALLS.to_string(),
                "-c",
                "4",
                "-P",
                "16",
                "-q",
            ])
            .args(command)
            .stdout(Stdio::null())
            .status()
            .expect("redis-benchmark (make deps installs it)");
        assert!(status.success());
        control("-d");
        let mut total = None;
        for entry in std::fs::read_dir(&self.dir).unwrap().flatten() {
            // The dump of this count (numbered `.1`, `.2`… after the pid).
            if entry.path().extension().is_some_and(|e| e != "out") {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                total = text.lines().find_map(|l| {
                    l.strip_prefix("summary:")
                        .or_else(|| l.strip_prefix("totals:"))
                        .and_then(|v| v.split_whitespace().next())
                        .and_then(|v| v.parse::<u64>().ok())
                });
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
        total.expect("a callgrind dump") / IR_CALLS
    }
}

impl Drop for Callgrind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `FCALL` arguments of a shape's function (args.rs): a fixed window takes
/// `now cost period limit`, a token bucket and GCRA `now need count cap`
/// (need = cost * period, cap = burst * period): 10^9 per minute, cost 1.
fn shape_args<'a>(shape: &str, key: &'a str, now: &'a str) -> Vec<&'a str> {
    match shape {
        "fixed_window" => vec!["1", key, now, "1", "60000", FW_LIMIT],
        _ => vec!["1", key, now, "60000", "1000000000", "60000000000000"],
    }
}

/// The peer's call for `shape`: its name and its command.
fn peer(shape: &str, rlf: &str, redis_rate: &str) -> (&'static str, Vec<String>) {
    let args: &[&str] = match shape {
        "gcra" => &["EVALSHA", redis_rate, "1", "rr", "1000000000", "1000000000", "60", "1"],
        _ => &["EVALSHA", rlf, "1", "rlf", "1", "60"],
    };
    let name = if shape == "gcra" {
        "redis_rate v10"
    } else {
        "rate-limiter-flexible 11.4"
    };
    (name, args.iter().map(|a| a.to_string()).collect())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let redis = support::RedisServer::start();
    let library = polylimit::library();
    support::redis_cli(redis.port, &["FUNCTION", "LOAD", "REPLACE", &library.code]);
    support::redis_cli(redis.port, &["FUNCTION", "LOAD", "REPLACE", BOUNDS]);
    let sha = |port: u16, script: &str| support::redis_cli(port, &["SCRIPT", "LOAD", script]).trim().to_string();
    let (rlf, redis_rate) = (sha(redis.port, RLF), sha(redis.port, REDIS_RATE));
    // The clock as the limiter sends it (its estimate of the server's).
    let now = format!("{}", std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_millis());
    let fcall = |function: &str, args: Vec<&str>| {
        let command: Vec<&str> = ["FCALL", function].into_iter().chain(args).collect();
        usec_per_call(&redis, "fcall", &command)
    };
    let ours = |shape: &str, now: &str, key: &str| {
        fcall(&format!("{}_{shape}", library.function), shape_args(shape, key, now))
    };
    println!("redis-server µs per decision (INFO commandstats, lowest of {RUNS} runs, -c 4 -P 16):");
    for shape in ["fixed_window", "token_bucket", "gcra"] {
        let sent = ours(shape, &now, &format!("{shape}:sent"));
        let time = ours(shape, "", &format!("{shape}:time"));
        let (peer, command) = peer(shape, &rlf, &redis_rate);
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        let value = usec_per_call(&redis, "evalsha", &command);
        println!(
            "  {shape:<13} now sent {sent:>5.2}  TIME inside {time:>5.2}  {peer} {value:>5.2}  ratio {:.2} (target <= 1.00)",
            sent / value
        );
    }
    let bound = |function| fcall(function, shape_args("token_bucket", "bound", &now));
    println!(
        "  bounds: an FCALL answering one integer {:.2}; with a GET and an in-place SETRANGE {:.2}",
        bound("reply_only"),
        bound("get_set")
    );
    let Some(callgrind) = Callgrind::start() else {
        println!("redis-server instructions per decision: valgrind not installed: skipped");
        return;
    };
    support::redis_cli(callgrind.port, &["FUNCTION", "LOAD", "REPLACE", &library.code]);
    support::redis_cli(callgrind.port, &["FUNCTION", "LOAD", "REPLACE", BOUNDS]);
    let (rlf, redis_rate) = (sha(callgrind.port, RLF), sha(callgrind.port, REDIS_RATE));
    println!("redis-server instructions per decision (callgrind, {IR_CALLS} calls, -c 4 -P 16, now sent):");
    for shape in ["fixed_window", "token_bucket", "gcra"] {
        let function = format!("{}_{shape}", library.function);
        let command: Vec<&str> = ["FCALL", &function]
            .into_iter()
            .chain(shape_args(shape, "k", &now))
            .collect();
        let ours = callgrind.ir_per_call(&command);
        let (peer, command) = peer(shape, &rlf, &redis_rate);
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        let theirs = callgrind.ir_per_call(&command);
        println!(
            "  {shape:<13} {ours:>7} Ir  {peer} {theirs:>7} Ir  ratio {:.2} (target <= 1.00)",
            ours as f64 / theirs as f64
        );
    }
    let bound = |function: &str| {
        let command: Vec<&str> = ["FCALL", function]
            .into_iter()
            .chain(shape_args("token_bucket", "bound", &now))
            .collect();
        callgrind.ir_per_call(&command)
    };
    println!(
        "  bounds: an FCALL answering one integer {} Ir; with a GET and an in-place SETRANGE {} Ir",
        bound("reply_only"),
        bound("get_set")
    );
}
