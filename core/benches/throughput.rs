//! `make bench`: decisions per second of the memory store (one thread, all
//! cores) and of Redis (1 and 64 in flight on one multiplexed connection),
//! next to `redis-benchmark` running EVALSHA of the same script on the same
//! server in the same run, and the cost inside Redis of a sliding-window-log
//! denial at 10k live entries. `POLYLIMIT_BENCH=memory` runs only the
//! memory-store lines, `POLYLIMIT_BENCH=log` only the sliding-window-log ones.

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy};
use serde_json::json;

const MEMORY_CHECKS: u64 = 5_000_000;
const REDIS_CHECKS: u64 = 200_000;

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

/// redis-benchmark running EVALSHA of the same script with the same arguments.
fn redis_benchmark(port: u16, pipeline: u32) -> f64 {
    let sha = polylimit::script_sha();
    let key = "polylimit:token_bucket:default:{bench}";
    let output = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-n",
            &REDIS_CHECKS.to_string(),
            "-c",
            "1",
            "-P",
            &pipeline.to_string(),
            "--csv",
        ])
        .args([
            "EVALSHA",
            &sha,
            "1",
            key,
            "",
            "1",
            "1",
            "1000000000",
            "1000",
            "1000000000",
            "0",
            // flags, penalty threshold, within, forget_after, cooldowns: none.
            "0",
            "0",
            "0",
            "0",
            "",
        ])
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
        .find(|l| l.starts_with("cmdstat_evalsha:"))
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
    let redis = support::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // POLYLIMIT_BENCH=log runs only the sliding-window-log lines.
    if std::env::var("POLYLIMIT_BENCH").as_deref() != Ok("log") {
        throughput(&redis, &runtime);
    }
    println!("redis store, sliding_window_log denial at {LOG_ENTRIES} live entries (limit {LOG_ENTRIES}):");
    for (key, cost) in [("log-1", 1), ("log-half", LOG_ENTRIES / 2), ("log-all", LOG_ENTRIES)] {
        let (inside, caller) = runtime.block_on(log_denial_bench(&redis, key, cost));
        println!("  cost {cost:>5}: {inside:>9.1} µs per call inside Redis, {caller:>9.1} µs per check");
    }
}

fn print_memory() {
    let (one, all) = memory_bench();
    println!("memory store, token_bucket, warm key:");
    println!("  1 thread : {:>12.0} decisions/s (target >= 5,000,000)", one);
    println!("  all cores: {:>12.0} decisions/s", all);
}

fn throughput(redis: &support::RedisServer, runtime: &tokio::runtime::Runtime) {
    print_memory();

    let mut config = LimiterConfig::new(policy()).with_store(redis.url());
    config.timeout = Duration::from_secs(5);
    let limiter = Limiter::new(config).unwrap();
    let ours_1 = runtime.block_on(redis_bench(&limiter, 1));
    let ours_64 = runtime.block_on(redis_bench(&limiter, 64));
    let theirs_1 = redis_benchmark(redis.port, 1);
    let theirs_64 = redis_benchmark(redis.port, 64);
    println!("redis store, token_bucket, one multiplexed connection, same script as redis-benchmark EVALSHA:");
    println!(
        "  1 in flight : {:>9.0} decisions/s  redis-benchmark -c 1       {:>9.0}/s  ratio {:.2}",
        ours_1,
        theirs_1,
        ours_1 / theirs_1
    );
    println!(
        "  64 in flight: {:>9.0} decisions/s  redis-benchmark -c 1 -P 64 {:>9.0}/s  ratio {:.2} (target >= 0.80)",
        ours_64,
        theirs_64,
        ours_64 / theirs_64
    );
}
