//! `cargo bench -p polylimit --bench inside_redis`: redis-server CPU per
//! decision (`INFO commandstats` usec_per_call) of polylimit's shape
//! functions, beside the peers' scripts run the same way on the same server
//! (redis-benchmark, 4 connections, 16 pipelined; the lowest of 8 runs, as
//! other processes share the cores). Every decision is an allowed one (the
//! write path). Ours is measured with the clock sent (what the limiter
//! sends) and with `now_ms` empty (a `TIME` inside the function), and
//! beside the floor of its state format ([`BOUNDS`]).

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;

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

/// What bounds a shape function from below: an FCALL that only answers
/// five values, and one that also does the GET and SET PX of a key's packed
/// cells (common.lua's state format), with no decision.
const BOUNDS: &str = "#!lua name=bounds
local function reply_only(keys, argv) return {1, 2, 3, 4, 5} end
local function get_set(keys, argv)
  redis.call('GET', keys[1])
  redis.call('SET', keys[1], struct.pack('<Blll', 1, 1, 2, 3), 'PX', '61000')
  return {1, 2, 3, 4, 5}
end
redis.register_function('reply_only', reply_only)
redis.register_function('get_set', get_set)";

/// The lowest usec_per_call of `command` over [`RUNS`] runs.
fn usec_per_call(redis: &support::RedisServer, stat: &str, command: &[&str]) -> f64 {
    let reply = support::redis_cli(redis.port, command);
    assert!(!reply.contains("ERR"), "{command:?} answered {reply}");
    (0..RUNS)
        .map(|_| {
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

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let redis = support::RedisServer::start();
    let library = polylimit::library();
    support::redis_cli(redis.port, &["FUNCTION", "LOAD", "REPLACE", &library.code]);
    support::redis_cli(redis.port, &["FUNCTION", "LOAD", "REPLACE", BOUNDS]);
    let sha = |script: &str| {
        support::redis_cli(redis.port, &["SCRIPT", "LOAD", script])
            .trim()
            .to_string()
    };
    let (rlf, redis_rate) = (sha(RLF), sha(REDIS_RATE));
    // The clock as the limiter sends it (its estimate of the server's).
    let now = format!("{}", std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_millis());
    let fcall = |function: &str, now: &str, key: &str| {
        let args = ["1", key, now, "1", "1000000000", "60000", "1000000000"];
        let command: Vec<&str> = ["FCALL", function].into_iter().chain(args).collect();
        usec_per_call(&redis, "fcall", &command)
    };
    let ours = |shape: &str, now: &str, key: &str| fcall(&format!("{}_{shape}", library.function), now, key);
    println!("redis-server µs per decision (INFO commandstats, lowest of {RUNS} runs, -c 4 -P 16):");
    for shape in ["fixed_window", "token_bucket", "gcra"] {
        let sent = ours(shape, &now, &format!("{shape}:sent"));
        let time = ours(shape, "", &format!("{shape}:time"));
        let (peer, value) = match shape {
            "gcra" => (
                "redis_rate v10",
                usec_per_call(
                    &redis,
                    "evalsha",
                    &["EVALSHA", &redis_rate, "1", "rr", "1000000000", "1000000000", "60", "1"],
                ),
            ),
            _ => (
                "rate-limiter-flexible 11.4",
                usec_per_call(&redis, "evalsha", &["EVALSHA", &rlf, "1", "rlf", "1", "60"]),
            ),
        };
        println!(
            "  {shape:<13} now sent {sent:>5.2}  TIME inside {time:>5.2}  {peer} {value:>5.2}  ratio {:.2} (target <= 1.00)",
            sent / value
        );
    }
    println!(
        "  bounds: an FCALL answering 5 values {:.2}; with the GET and SET PX of packed cells {:.2}",
        fcall("reply_only", &now, "bound"),
        fcall("get_set", &now, "bound")
    );
}
