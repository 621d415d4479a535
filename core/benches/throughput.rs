//! `make bench`: decisions per second of the memory store (one thread, all
//! cores) and of Redis (1 and 64 in flight on one multiplexed connection),
//! next to `redis-benchmark` running EVALSHA of the same script on the same
//! server in the same run, and the cost inside Redis of a sliding-window-log
//! denial at 10k live entries, and a 6-node Redis Cluster beside the single
//! server. `POLYLIMIT_BENCH=memory` runs only the memory-store lines,
//! `POLYLIMIT_BENCH=log` only the sliding-window-log ones,
//! `POLYLIMIT_BENCH=cluster` only the cluster ones, `POLYLIMIT_BENCH=block_cache`
//! only the blocked-key cache's (one blocked key, 64 in flight, cache off and on),
//! `POLYLIMIT_BENCH=regions` only the multi-region ones (admitted vs the global
//! limit, borrowing), `POLYLIMIT_BENCH=http` only the HTTP path's
//! (`check_request` on the memory store with the example rules file: ns and
//! allocations per request).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy, RequestInfo};
use serde_json::json;

const MEMORY_CHECKS: u64 = 5_000_000;
const REDIS_CHECKS: u64 = 200_000;
const ROUNDS: usize = 3;

fn policy() -> Policy {
    // Never denies, so every check runs the write path.
    Policy::from_value(&json!({"rate": "1000000000/s"}), "").unwrap()
}

fn memory_loop(limiter: &Limiter, key: &str, n: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..n {
        let d = limiter
            .check_with(key, CheckOptions::default())
            .now_or_never()
            .unwrap()
            .unwrap();
        allowed += d.allowed as u64;
    }
    allowed
}

fn memory_bench() -> (f64, f64) {
    let limiter = Limiter::new(LimiterConfig::new(policy())).unwrap();
    memory_loop(&limiter, "warm", 10_000);
    let started = Instant::now();
    assert_eq!(memory_loop(&limiter, "warm", MEMORY_CHECKS), MEMORY_CHECKS);
    let one = MEMORY_CHECKS as f64 / started.elapsed().as_secs_f64();

    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let limiter = &limiter;
            s.spawn(move || memory_loop(limiter, &format!("warm-{t}"), MEMORY_CHECKS));
        }
    });
    let all = (threads as u64 * MEMORY_CHECKS) as f64 / started.elapsed().as_secs_f64();
    (one, all)
}

const MANY_KEYS: u64 = 1_000_000;

/// The process's resident memory in bytes (Linux).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Decisions/s over 1M distinct keys (each check a different key, round
/// robin, so the map is large and cache-cold) and the resident bytes each
/// idle key costs.
fn many_keys_bench() -> (f64, f64) {
    // A slow refill, so every key holds state (an idle bucket is not stored).
    let slow = Policy::from_value(&json!({"rate": "1/h", "burst": 1000}), "").unwrap();
    let mut config = LimiterConfig::new(slow);
    config.max_keys = MANY_KEYS as usize * 2;
    let limiter = Limiter::new(config).unwrap();
    let keys: Vec<String> = (0..MANY_KEYS).map(|i| format!("user:{i}")).collect();
    let before = resident_bytes();
    for key in &keys {
        limiter
            .check_with(key, CheckOptions::default())
            .now_or_never()
            .unwrap()
            .unwrap();
    }
    let per_key = (resident_bytes().saturating_sub(before)) as f64 / MANY_KEYS as f64;
    let started = Instant::now();
    for key in &keys {
        let d = limiter
            .check_with(key, CheckOptions::default())
            .now_or_never()
            .unwrap()
            .unwrap();
        assert!(d.allowed);
    }
    (MANY_KEYS as f64 / started.elapsed().as_secs_f64(), per_key)
}

async fn redis_bench(limiter: &Limiter, in_flight: u64) -> f64 {
    limiter.check("bench").await.unwrap();
    let started = Instant::now();
    let per_task = REDIS_CHECKS / in_flight;
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let d = limiter.check("bench").await.unwrap();
                    assert_eq!(d.source, polylimit::Source::Store);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_task * in_flight) as f64 / started.elapsed().as_secs_f64()
}

/// The arguments of one token-bucket decision that never denies, after the
/// key and `now_ms`: the token-bucket shape function's (shapes.lua, as
/// `args.rs` packs them): need (cost x period), count, capacity (burst x
/// period), for 1,000,000,000 per second.
const DECISION_ARGS: [&str; 3] = ["1000", "1000000000", "1000000000000"];

/// A minimal correct token bucket (TIME, HMGET, HSET, PEXPIRE): what one
/// decision costs Redis without polylimit's generality, the yardstick of the
/// script's own cost.
const MINIMAL_TOKEN_BUCKET: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local v = redis.call('HMGET', KEYS[1], 't', 'l')
local tokens, last = tonumber(v[1]) or burst, tonumber(v[2]) or now
tokens = math.min(burst, tokens + (now - last) * rate / 1000)
local ok = 0
if tokens >= cost then tokens = tokens - cost; ok = 1 end
redis.call('HSET', KEYS[1], 't', tokens, 'l', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return {ok, math.floor(tokens)}
"#;

/// redis-benchmark, one connection, `pipeline` commands in flight: decisions/s.
fn redis_benchmark(port: u16, pipeline: u32, command: &[&str]) -> f64 {
    let output = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-n",
            &REDIS_CHECKS.to_string(),
            "-c",
            "1",
            "-P",
        ])
        .arg(pipeline.to_string())
        .arg("--csv")
        .args(command)
        .output()
        .expect("redis-benchmark (make deps installs it)");
    let text = String::from_utf8_lossy(&output.stdout);
    // CSV: "test","rps",... then one row per test.
    text.lines()
        .nth(1)
        .and_then(|row| row.split(',').nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("unexpected redis-benchmark output: {text}"))
}

/// FCALL of polylimit's function, as the limiter sends it: the shape
/// function, with the limiter's estimate of the server's clock (here: now).
fn our_function(port: u16, pipeline: u32) -> f64 {
    let function = format!("{}_token_bucket", polylimit::library().function);
    let now = std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .unwrap()
        .as_millis()
        .to_string();
    let mut command = vec![
        "FCALL",
        &function,
        "1",
        "polylimit:token_bucket:default:p1000:{bench}",
        &now,
    ];
    command.extend(DECISION_ARGS);
    // The arguments must be a valid decision (an allowed one), or the
    // benchmark would time error replies.
    let reply = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(&command)
        .output()
        .expect("redis-cli (make deps installs it)");
    let reply = String::from_utf8_lossy(&reply.stdout);
    // The shape function answers the tokens the bucket held before this
    // decision (alone, or with the cells it decided on): it admits when they
    // cover the need.
    let tokens: Option<u64> = reply.lines().next().and_then(|t| t.trim().parse().ok());
    assert!(
        tokens.is_some_and(|t| t >= 1000),
        "FCALL of the bench's arguments answered {reply:?}"
    );
    redis_benchmark(port, pipeline, &command)
}

/// EVALSHA of [`MINIMAL_TOKEN_BUCKET`], loaded with redis-cli.
fn minimal_script(port: u16, pipeline: u32) -> f64 {
    let load = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "SCRIPT", "LOAD", MINIMAL_TOKEN_BUCKET])
        .output()
        .expect("redis-cli (make deps installs it)");
    let sha = String::from_utf8_lossy(&load.stdout).trim().to_string();
    redis_benchmark(
        port,
        pipeline,
        &["EVALSHA", &sha, "1", "minimal:{bench}", "1000000000", "1000000000", "1"],
    )
}

/// Appends one result line to `$POLYLIMIT_BENCH_OUT` (JSON lines, read by
/// bench/report.py into bench/results.json and the docs/benchmarks.md table).
fn record(line: serde_json::Value) {
    let Ok(path) = std::env::var("POLYLIMIT_BENCH_OUT") else {
        return;
    };
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    writeln!(file, "{line}").unwrap();
}

/// The median of `rounds` measurements.
fn median(mut rounds: Vec<f64>) -> f64 {
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

const LOG_ENTRIES: u64 = 10_000;
const LOG_DENIALS: u64 = 200;

/// Sliding-window-log denials on a key holding 10k live entries: the retry
/// computation runs inside Redis's single thread. Returns µs per call inside
/// Redis (INFO commandstats) and µs per check seen by the caller.
async fn log_denial_bench(redis: &support::RedisServer, key: &str, cost: u64) -> (f64, f64) {
    let policy = Policy::from_value(&json!({"algorithm": "sliding_window_log", "rate": "10000/h"}), "").unwrap();
    let mut config = LimiterConfig::new(policy).with_store(redis.url());
    config.timeout = Duration::from_secs(5);
    let limiter = Limiter::new(config).unwrap();
    let at = |ms: u64| CheckOptions {
        cost: 1,
        now_ms: Some(1_000_000 + ms as i64),
    };
    for i in 0..LOG_ENTRIES {
        assert!(limiter.check_with(key, at(i)).await.unwrap().allowed);
    }
    redis.command("CONFIG RESETSTAT");
    let started = Instant::now();
    for _ in 0..LOG_DENIALS {
        let options = CheckOptions {
            cost,
            ..at(LOG_ENTRIES)
        };
        let d = limiter.check_with(key, options).await.unwrap();
        assert!(!d.allowed && d.retry_after_ms.is_some());
    }
    let caller = started.elapsed().as_secs_f64() * 1e6 / LOG_DENIALS as f64;
    let stats = redis.command("INFO commandstats").unwrap_or_default();
    let inside = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_fcall:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("unexpected INFO commandstats: {stats}"));
    (inside, caller)
}

fn main() {
    // cargo bench passes --bench; cargo test --benches passes nothing useful.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // POLYLIMIT_BENCH=memory runs only the memory-store lines (no Redis).
    if std::env::var("POLYLIMIT_BENCH").as_deref() == Ok("memory") {
        print_memory();
        return;
    }
    // POLYLIMIT_BENCH=http runs only the HTTP path's lines (no Redis).
    if std::env::var("POLYLIMIT_BENCH").as_deref() == Ok("http") {
        print_http();
        return;
    }
    let redis = support::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::var("POLYLIMIT_BENCH").as_deref() == Ok("cluster") {
        cluster(&redis, &runtime);
        return;
    }
    if std::env::var("POLYLIMIT_BENCH").as_deref() == Ok("block_cache") {
        block_cache(&redis, &runtime);
        return;
    }
    // POLYLIMIT_BENCH=regions runs only the multi-region lines.
    if std::env::var("POLYLIMIT_BENCH").as_deref() == Ok("regions") {
        regions(&redis, &runtime);
        return;
    }
    // POLYLIMIT_BENCH=log runs only the sliding-window-log lines.
    if std::env::var("POLYLIMIT_BENCH").as_deref() != Ok("log") {
        throughput(&redis, &runtime);
        cluster(&redis, &runtime);
        block_cache(&redis, &runtime);
        regions(&redis, &runtime);
    }
    println!("redis store, sliding_window_log denial at {LOG_ENTRIES} live entries (limit {LOG_ENTRIES}):");
    for (key, cost) in [("log-1", 1), ("log-half", LOG_ENTRIES / 2), ("log-all", LOG_ENTRIES)] {
        let (inside, caller) = runtime.block_on(log_denial_bench(&redis, key, cost));
        println!("  cost {cost:>5}: {inside:>9.1} µs per call inside Redis, {caller:>9.1} µs per check");
        record(
            json!({"suite": "rust", "what": format!("Redis, sliding log denial at {LOG_ENTRIES} entries, cost {cost}, inside Redis"),
            "value": inside, "unit": "µs"}),
        );
    }
}

fn print_memory() {
    let (one, all) = memory_bench();
    println!("memory store, token_bucket, warm key:");
    println!("  1 thread : {:>12.0} decisions/s (target >= 5,000,000)", one);
    println!("  all cores: {:>12.0} decisions/s", all);
    record(
        json!({"suite": "rust", "what": "memory store, token bucket, warm key, 1 thread", "value": one, "unit": "decisions/s",
        "ratio": one / 5e6, "baseline": "5 M/s", "baseline_value": 5e6, "target": 1.0}),
    );
    record(json!({"suite": "rust", "what": "memory store, all cores", "value": all, "unit": "decisions/s"}));
    let (many, per_key) = many_keys_bench();
    println!("  1 thread, {MANY_KEYS} keys round robin: {many:>12.0} decisions/s, {per_key:.0} resident bytes per idle key (key text included)");
    record(
        json!({"suite": "rust", "what": format!("memory store, {MANY_KEYS} keys round robin, 1 thread"), "value": many, "unit": "decisions/s"}),
    );
    record(
        json!({"suite": "rust", "what": "memory store, resident bytes per idle key (key text included)", "value": per_key.round(), "unit": "bytes"}),
    );
}

fn throughput(redis: &support::RedisServer, runtime: &tokio::runtime::Runtime) {
    // POLYLIMIT_BENCH=redis runs only the Redis throughput lines.
    if std::env::var("POLYLIMIT_BENCH").as_deref() != Ok("redis") {
        print_memory();
        print_http();
    }

    let mut config = LimiterConfig::new(policy()).with_store(redis.url());
    config.timeout = Duration::from_secs(5);
    let limiter = Limiter::new(config).unwrap();
    // Alternating rounds, medians: the load generators share two cores with Redis.
    let (mut ours_1, mut ours_64, mut fn_1, mut fn_64, mut minimal_64) = (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..ROUNDS {
        ours_1.push(runtime.block_on(redis_bench(&limiter, 1)));
        fn_1.push(our_function(redis.port, 1));
        ours_64.push(runtime.block_on(redis_bench(&limiter, 64)));
        fn_64.push(our_function(redis.port, 64));
        minimal_64.push(minimal_script(redis.port, 64));
    }
    let (ours_1, ours_64, fn_1, fn_64, minimal_64) = (
        median(ours_1),
        median(ours_64),
        median(fn_1),
        median(fn_64),
        median(minimal_64),
    );
    println!("redis store, token_bucket, one multiplexed connection (medians of {ROUNDS} alternating rounds):");
    println!(
        "  1 in flight : {ours_1:>9.0} decisions/s  redis-benchmark -c 1 of the same FCALL       {fn_1:>9.0}/s  ratio {:.2}",
        ours_1 / fn_1
    );
    println!(
        "  64 in flight: {ours_64:>9.0} decisions/s  redis-benchmark -c 1 -P 64 of the same FCALL {fn_64:>9.0}/s  ratio {:.2}",
        ours_64 / fn_64
    );
    println!(
        "  64 in flight: {ours_64:>9.0} decisions/s  redis-benchmark -P 64 of a minimal token-bucket script {minimal_64:>9.0}/s  ratio {:.2} (target >= 0.90)",
        ours_64 / minimal_64
    );
    record(
        json!({"suite": "rust", "what": "Redis, 1 in flight", "value": ours_1, "unit": "decisions/s",
        "ratio": ours_1 / fn_1, "baseline": "redis-benchmark -c 1 of the same FCALL", "baseline_value": fn_1}),
    );
    record(
        json!({"suite": "rust", "what": "Redis, 64 in flight, one connection", "value": ours_64, "unit": "decisions/s",
        "ratio": ours_64 / fn_64, "baseline": "redis-benchmark -P 64 of the same FCALL", "baseline_value": fn_64}),
    );
    record(
        json!({"suite": "rust", "what": "Redis, 64 in flight, one policy", "value": ours_64, "unit": "decisions/s",
        "ratio": ours_64 / minimal_64, "baseline": "redis-benchmark -P 64 of a minimal token-bucket script",
        "baseline_value": minimal_64, "target": 0.9}),
    );
}

/// Commands Redis has run since the last `CONFIG RESETSTAT` (INFO and
/// CONFIG aside; those a script runs included), and of them the FCALLs.
fn redis_commands(redis: &support::RedisServer) -> (u64, u64) {
    let stats = redis.command("INFO commandstats").unwrap_or_default();
    let calls = |l: &str| l.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok();
    let counted =
        |l: &&str| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:") && !l.starts_with("cmdstat_config");
    let all = stats.lines().filter(counted).filter_map(calls).sum();
    let fcall = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_fcall"))
        .filter_map(calls)
        .sum();
    (all, fcall)
}

/// One key, blocked (1 per hour, used up), hammered at 64 in flight: checks
/// per second and Redis commands per second, with `block_cache` `on` or off.
async fn blocked_key_bench(redis: &support::RedisServer, limiter: &Limiter, checks: u64) -> (f64, f64, f64) {
    let _ = limiter.check("blocked").await.unwrap();
    assert!(!limiter.check("blocked").await.unwrap().allowed);
    redis.command("CONFIG RESETSTAT");
    let started = Instant::now();
    let per_task = checks / 64;
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let d = limiter.check("blocked").await.unwrap();
                    assert!(!d.allowed && d.source == polylimit::Source::Store);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let (all, fcall) = redis_commands(redis);
    ((per_task * 64) as f64 / secs, all as f64 / secs, fcall as f64 / secs)
}

fn block_cache(redis: &support::RedisServer, runtime: &tokio::runtime::Runtime) {
    let limiter = |prefix: &str, block_cache: usize| {
        let policy = Policy::from_value(&json!({"rate": "1/h", "burst": 1}), "").unwrap();
        let mut config = LimiterConfig::new(policy).with_store(redis.url());
        config.timeout = Duration::from_secs(5);
        config.prefix = prefix.to_string();
        config.block_cache = block_cache;
        Limiter::new(config).unwrap()
    };
    let (off, on) = (limiter("bc-off", 0), limiter("bc-on", 10_000));
    let (mut off_rounds, mut on_rounds) = (vec![], vec![]);
    for _ in 0..ROUNDS {
        off_rounds.push(runtime.block_on(blocked_key_bench(redis, &off, REDIS_CHECKS)));
        on_rounds.push(runtime.block_on(blocked_key_bench(redis, &on, REDIS_CHECKS * 10)));
    }
    let medians = |rounds: &[(f64, f64, f64)]| {
        (
            median(rounds.iter().map(|r| r.0).collect()),
            median(rounds.iter().map(|r| r.1).collect()),
            median(rounds.iter().map(|r| r.2).collect()),
        )
    };
    println!("redis store, one blocked key, 64 in flight (medians of {ROUNDS} alternating rounds):");
    for (state, rounds) in [("off", &off_rounds), ("on", &on_rounds)] {
        let (rate, cmds, fcalls) = medians(rounds);
        println!("  block_cache {state:<3}: {rate:>11.0} decisions/s, {cmds:>9.0} Redis commands/s ({fcalls:.0} FCALL/s and the commands they run)");
        record(
            json!({"suite": "rust", "what": format!("Redis, one blocked key, 64 in flight, block_cache {state}"),
            "value": rate, "unit": "decisions/s",
            "detail": format!("{} decisions/s, {cmds:.0} Redis commands/s ({fcalls:.0} FCALL/s)", fmt_rate(rate))}),
        );
    }
}

/// `1.23 M` / `45.6 k`, as bench/report.py writes decisions per second.
fn fmt_rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2} M", value / 1e6)
    } else {
        format!("{:.1} k", value / 1e3)
    }
}

const CLUSTER_REQUESTS: u64 = 50_000;

/// Requests through `check_request`, 64 in flight.
async fn request_bench(limiter: &Limiter, request: &RequestInfo) -> f64 {
    limiter.check_request(request).await.unwrap();
    let per_task = CLUSTER_REQUESTS / 64;
    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (limiter, request) = (limiter.clone(), request.clone());
            tokio::spawn(async move {
                for _ in 0..per_task {
                    let outcome = limiter.check_request(&request).await.unwrap();
                    assert!(outcome.status.is_none(), "the bench policies never deny");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (per_task * 64) as f64 / started.elapsed().as_secs_f64()
}

/// Decisions per second with 64 in flight on a 6-node cluster (the harness of
/// tests/topology, every node on this machine), for a request whose two
/// policies share one slot (one atomic call) and one whose two keys live in
/// two slots (a peek of each, then a charge of each), beside the same on the
/// single server.
fn cluster(redis: &support::RedisServer, runtime: &tokio::runtime::Runtime) {
    let topology = support::Topology::cluster();
    let rules = |store: &str, second_key: &str| {
        json!({
            "store": store, "timeout": "5s",
            "policies": {"a": {"rate": "1000000000/s"}, "b": {"rate": "1000000000/s"}},
            "rules": [
                {"name": "a", "key": ["header:x-a"], "policy": "a"},
                {"name": "b", "key": [second_key], "policy": "b"},
            ],
        })
        .to_string()
    };
    // x-a and x-b carry different values: keys in different slots.
    let request = RequestInfo::from_value(&json!({
        "method": "GET", "path": "/", "peer": "203.0.113.7",
        "headers": [["x-a", "user-1"], ["x-b", "global"]],
    }))
    .unwrap();
    let (mut single, mut one_slot, mut two_slots) = (vec![], vec![], vec![]);
    let server = Limiter::from_rules(&rules(&redis.url(), "header:x-a")).unwrap();
    let same_slot = Limiter::from_rules(&rules(&topology.url, "header:x-a")).unwrap();
    let cross_slot = Limiter::from_rules(&rules(&topology.url, "header:x-b")).unwrap();
    for _ in 0..ROUNDS {
        single.push(runtime.block_on(request_bench(&server, &request)));
        one_slot.push(runtime.block_on(request_bench(&same_slot, &request)));
        two_slots.push(runtime.block_on(request_bench(&cross_slot, &request)));
    }
    let (single, one_slot, two_slots) = (median(single), median(one_slot), median(two_slots));
    println!("two policies per request, 64 in flight (medians of {ROUNDS} alternating rounds):");
    println!("  single server           : {single:>9.0} requests/s");
    println!(
        "  6-node cluster, one slot : {one_slot:>9.0} requests/s  ratio {:.2}",
        one_slot / single
    );
    println!(
        "  6-node cluster, two slots: {two_slots:>9.0} requests/s  ratio {:.2}",
        two_slots / single
    );
    record(
        json!({"suite": "rust", "what": "Redis Cluster (6 nodes), 2 policies in one slot, 64 in flight",
        "value": one_slot, "unit": "req/s", "ratio": one_slot / single,
        "baseline": "the same on a single server", "baseline_value": single}),
    );
    record(
        json!({"suite": "rust", "what": "Redis Cluster (6 nodes), 2 policies in two slots (peek, then charge), 64 in flight",
        "value": two_slots, "unit": "req/s", "ratio": two_slots / single,
        "baseline": "the same on a single server", "baseline_value": single}),
    );
}

const REGION_LIMIT: u64 = 1_000;
const REGION_IN_FLIGHT: u64 = 16;

/// `polylimit_region_borrows_total{region,result}` of `limiter`.
fn region_borrows(limiter: &Limiter, region: &str, result: &str) -> u64 {
    let line = format!("polylimit_region_borrows_total{{region=\"{region}\",result=\"{result}\"}} ");
    limiter
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(&line).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

/// Multi-region quotas: two regions (the shared server as `eu`, a second
/// redis-server as `us`, equal shares of a token bucket of 1000), eu asking
/// 3 × the limit and us 20 % of it, 16 in flight each, at once. Records the
/// admissions against the global limit (over-admission must be 0) and the
/// borrowing traffic, and the latency of a local and of a borrowed admission.
fn regions(redis: &support::RedisServer, runtime: &tokio::runtime::Runtime) {
    let us_redis = support::RedisServer::start();
    redis.command("FLUSHALL");
    let build = |region: &str| {
        Limiter::from_value(&json!({
            "policy": {"algorithm": "token_bucket", "rate": "1/h", "burst": REGION_LIMIT},
            "regions": {"eu": redis.url(), "us": us_redis.url()},
            "region": region,
            "timeout": "1s",
        }))
        .unwrap()
    };
    let (eu, us) = (build("eu"), build("us"));
    let demand = |limiter: &Limiter, checks: u64| {
        let limiter = limiter.clone();
        async move {
            let mut admitted = 0u64;
            let mut next = 0u64;
            let mut in_flight = futures_util::stream::FuturesUnordered::new();
            use futures_util::StreamExt;
            while next < checks || !in_flight.is_empty() {
                while next < checks && (in_flight.len() as u64) < REGION_IN_FLIGHT {
                    let l = limiter.clone();
                    in_flight.push(async move {
                        l.check_with(
                            "hot",
                            CheckOptions {
                                cost: 1,
                                now_ms: Some(1_000_000),
                            },
                        )
                        .await
                    });
                    next += 1;
                }
                if let Some(d) = in_flight.next().await {
                    admitted += d.unwrap().allowed as u64;
                }
            }
            admitted
        }
    };
    let (eu_checks, us_checks) = (3 * REGION_LIMIT, REGION_LIMIT / 5);
    let started = Instant::now();
    let (eu_admitted, us_admitted) =
        runtime.block_on(async { tokio::join!(demand(&eu, eu_checks), demand(&us, us_checks)) });
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = eu_admitted + us_admitted;
    let over = admitted.saturating_sub(REGION_LIMIT);
    let granted = region_borrows(&eu, "us", "granted") + region_borrows(&us, "eu", "granted");
    let refused = region_borrows(&eu, "us", "refused") + region_borrows(&us, "eu", "refused");
    let skipped = region_borrows(&eu, "us", "skipped") + region_borrows(&us, "eu", "skipped");
    let calls = granted + refused;
    let checks = eu_checks + us_checks;
    println!(
        "regions (2 redis-servers, equal shares of {REGION_LIMIT}), eu {eu_checks} + us {us_checks} checks, {REGION_IN_FLIGHT} in flight each:"
    );
    println!(
        "  admitted {admitted} of the global {REGION_LIMIT} (eu {eu_admitted}, us {us_admitted}; over-admission {over}); \
         borrow calls {calls} ({granted} granted, {refused} refused; {skipped} not sent, refused before) = {:.2} per check; {:.0} checks/s",
        calls as f64 / checks as f64,
        checks as f64 / elapsed
    );
    assert!(admitted <= REGION_LIMIT, "over-admission: {admitted} > {REGION_LIMIT}");
    record(
        json!({"suite": "rust", "what": format!("Regions (2 Redis, equal shares of {REGION_LIMIT}), eu {eu_checks} + us {us_checks} checks: admitted vs the global limit"),
        "value": admitted, "unit": "admitted",
        "detail": format!("{admitted} of {REGION_LIMIT} admitted, over-admission {over}; {calls} borrow calls for {checks} checks ({granted} granted, {refused} refused)")}),
    );
    // Latency: a local admission, a borrowed one (two round trips), a denial
    // once both shares are spent (the lender asked once, then not until its retry time).
    redis.command("FLUSHALL");
    us_redis.command("FLUSHALL");
    let eu = build("eu");
    let per_check = |key: &'static str, n: u64| {
        let eu = eu.clone();
        runtime.block_on(async move {
            let started = Instant::now();
            for _ in 0..n {
                eu.check_with(
                    key,
                    CheckOptions {
                        cost: 1,
                        now_ms: Some(1_000_000),
                    },
                )
                .await
                .unwrap();
            }
            started.elapsed().as_secs_f64() * 1e6 / n as f64
        })
    };
    let half = REGION_LIMIT / 2;
    // Warm-up: both connections open, the script loaded on both servers (one borrow).
    per_check("warm", half + 1);
    let local = per_check("lat", half);
    let borrowed = per_check("lat", half);
    let denied = per_check("lat", half);
    println!("  one check: {local:.0} µs admitted locally, {borrowed:.0} µs borrowed, {denied:.0} µs denied by both");
    record(
        json!({"suite": "rust", "what": "Regions, one check: admitted locally / borrowed / denied by both",
        "value": borrowed, "unit": "µs",
        "detail": format!("{local:.0} µs / {borrowed:.0} µs / {denied:.0} µs")}),
    );
}

/// Counts the heap allocations of this process (the HTTP lines report them per request).
struct Counting;

static ALLOCATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

// SAFETY: every call goes to the system allocator unchanged.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's promises, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { std::alloc::System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const HTTP_REQUESTS: u64 = 500_000;

/// Requests as a Go or Node client sends them, behind the example file's trusted proxy.
fn http_requests() -> Vec<(&'static str, RequestInfo)> {
    let headers = |extra: &[(&str, &str)]| {
        let mut h: Vec<(String, String)> = [
            ("Host", "127.0.0.1:8080"),
            ("User-Agent", "Go-http-client/1.1"),
            ("Accept-Encoding", "gzip"),
            ("X-Forwarded-For", "203.0.113.7"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        h.shrink_to_fit();
        h
    };
    vec![
        (
            "GET /api/items (1 rule)",
            RequestInfo {
                method: "GET".into(),
                path: "/api/items".into(),
                route: Some("/api/items".into()),
                peer: Some("127.0.0.1:50312".into()),
                headers: headers(&[]),
                ..RequestInfo::default()
            },
        ),
        (
            "POST /api/payments/42 as a user (2 rules)",
            RequestInfo {
                method: "POST".into(),
                path: "/api/payments/42".into(),
                route: Some("/api/payments/{id}".into()),
                peer: Some("127.0.0.1:50312".into()),
                headers: headers(&[("Content-Type", "application/json"), ("Content-Length", "2")]),
                user: Some("acme".into()),
                ..RequestInfo::default()
            },
        ),
    ]
}

/// ns and allocations per `check_request` of `request` (also through the
/// packed encodings when `packed`: what the Go middleware's call costs in
/// the core), on a limiter of the example rules file whose clock moves 1 s
/// per request, so every request is allowed and charged.
fn http_bench(request: &RequestInfo, packed: bool) -> (f64, f64) {
    let rules = include_str!("../../examples/polylimit.yaml").replace("${REDIS_URL:-memory}", "memory");
    let limiter = Limiter::from_rules(&rules).unwrap();
    let mut bytes = Vec::new();
    polylimit::wire::packed::write_request(request, &mut bytes);
    let mut now_ms = 1_700_000_000_000;
    let once = |now_ms: i64| {
        let outcome = if packed {
            let mut req = polylimit::wire::packed::read_request_keeping(&bytes, |h| limiter.reads_header(h)).unwrap();
            req.now_ms = Some(now_ms);
            let outcome = limiter.check_request(&req).now_or_never().unwrap().unwrap();
            let out = polylimit::wire::packed::outcome(&outcome, false);
            std::hint::black_box(&out);
            outcome
        } else {
            let req = RequestInfo {
                now_ms: Some(now_ms),
                ..request.clone()
            };
            limiter.check_request(&req).now_or_never().unwrap().unwrap()
        };
        assert!(outcome.status.is_none(), "the bench requests are allowed");
        std::hint::black_box(outcome);
    };
    for _ in 0..10_000 {
        now_ms += 1000;
        once(now_ms);
    }
    // The clone of the request (the unpacked line) is counted, and subtracted.
    let before = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
    let copies = std::hint::black_box(request.clone());
    let per_clone = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - before;
    drop(copies);
    let before = ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed);
    let started = (Instant::now(), thread_cpu_ns());
    for _ in 0..HTTP_REQUESTS {
        now_ms += 1000;
        once(now_ms);
    }
    // The thread's CPU time (other processes on a shared machine stretch the wall time).
    let ns = match (started.1, thread_cpu_ns()) {
        (Some(a), Some(b)) => (b - a) as f64,
        _ => started.0.elapsed().as_nanos() as f64,
    } / HTTP_REQUESTS as f64;
    let allocations = (ALLOCATIONS.load(std::sync::atomic::Ordering::Relaxed) - before) as f64 / HTTP_REQUESTS as f64;
    (ns, allocations - if packed { 0.0 } else { per_clone as f64 })
}

/// CPU time this thread has run, in ns (Linux: /proc/thread-self/schedstat).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn print_http() {
    println!("check_request, memory store, examples/polylimit.yaml (headers: both), 1 thread, median of {ROUNDS}:");
    for (what, request) in http_requests() {
        for packed in [false, true] {
            let rounds: Vec<(f64, f64)> = (0..ROUNDS).map(|_| http_bench(&request, packed)).collect();
            let ns = median(rounds.iter().map(|r| r.0).collect());
            let allocations = rounds[0].1;
            let form = if packed { ", packed in and out (the C ABI)" } else { "" };
            println!("  {what}{form}: {ns:>7.0} ns CPU per request, {allocations:.1} allocations");
            record(
                json!({"suite": "rust", "what": format!("check_request, memory store, example rules, {what}{form}"),
                "value": ns, "unit": "ns CPU per request", "bound": format!("{allocations:.1} allocations per request")}),
            );
        }
    }
}
