//! Property-based fuzzing (proptest).
//!
//! - Differential: random policies (every algorithm variant, extreme rates and
//!   bursts, penalties) and random step sequences (costs, several keys, clock
//!   jumps both ways for one policy, forward for several or a penalty (see
//!   [`memory_limiters`]), idle gaps) decide identically on the memory store
//!   and on the Lua script in a real Redis; without a penalty, a denied step
//!   changes nothing (a replay without the denied steps decides the rest alike).
//! - The rules-file parser: random text and mutations of valid files give a
//!   limiter or an error, never a panic.
//!
//! `make test` runs a bounded number of cases; `make fuzz` runs more
//! (`POLYLIMIT_FUZZ_CASES`, per property).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use polylimit::duration::MAX_DURATION_MS;
use polylimit::policy::{MAX_COST, MAX_LOG_ENTRIES};
use polylimit::{CheckOptions, CheckResult, Decision, Limiter, LimiterConfig, Policy};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{json, Value};

const MAX_NOW: i64 = 1 << 50;
const MAX_SCALED: u64 = 1 << 50;

fn cases(default: u32) -> u32 {
    std::env::var("POLYLIMIT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

// ---------------------------------------------------------------------------
// Differential: memory store against the Lua script on a real Redis.

const ALGORITHMS: [(&str, &str, &str); 9] = [
    ("token_bucket", "refill", "continuous"),
    ("token_bucket", "refill", "interval"),
    ("gcra", "", ""),
    ("leaky_bucket", "mode", "police"),
    ("leaky_bucket", "mode", "shape"),
    ("fixed_window", "", ""),
    ("sliding_window_log", "", ""),
    ("sliding_window_counter", "", ""),
    ("concurrency", "", ""),
];

const PERIODS: [u64; 10] = [
    1,
    3,
    10,
    250,
    1_000,
    60_000,
    3_600_000,
    86_400_000,
    7 * 86_400_000,
    MAX_DURATION_MS,
];

fn magnitude() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..=10,
        2 => 1u64..=1_000,
        1 => 1u64..=MAX_SCALED,
        1 => Just(MAX_SCALED),
    ]
}

fn duration_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..=100,
        3 => 1u64..=100_000,
        1 => 1u64..=MAX_DURATION_MS,
        1 => Just(MAX_DURATION_MS),
    ]
}

/// A valid policy: numbers are drawn freely, then clamped to the ranges
/// policy validation accepts (so the extremes are reached, not rejected).
fn policy() -> impl Strategy<Value = Value> {
    let penalty = (
        1u64..=4,
        duration_ms(),
        prop::collection::vec(duration_ms(), 1..=3),
        prop::option::of(duration_ms()),
    );
    (
        0..ALGORITHMS.len(),
        0..PERIODS.len(),
        magnitude(),
        prop::option::of(magnitude()),
        prop::option::of(prop_oneof![Just(0u64), 0u64..=1_000, 0u64..=MAX_SCALED]),
        prop::option::of(penalty),
    )
        .prop_map(|(algorithm, period, count, burst, max_delay, penalty)| {
            let (name, field, value) = ALGORITHMS[algorithm];
            let period = PERIODS[period];
            let window = name.contains("window");
            let most = MAX_SCALED / period;
            let mut count = count.min(MAX_SCALED);
            let mut p = json!({"algorithm": name});
            if name == "concurrency" {
                // A lease of `cost` slots is that many members in Redis: a
                // limit past 1000 still exercises the script's chunked ZADD.
                let limit = count.min(2_500);
                p["limit"] = json!(limit);
                p["lease"] = json!(format!("{}ms", period.min(MAX_SCALED / limit)));
            } else if window {
                count = count.min(most);
                if name == "sliding_window_log" {
                    count = count.min(MAX_LOG_ENTRIES);
                }
            } else {
                match burst {
                    Some(b) => p["burst"] = json!(b.min(most)),
                    None if count > most => p["burst"] = json!(most),
                    None => {}
                }
            }
            if name != "concurrency" {
                p["rate"] = json!(format!("{count}/{period}ms"));
            }
            if !field.is_empty() {
                p[field] = json!(value);
            }
            if let (Some(d), "shape") = (max_delay, value) {
                p["max_delay"] = json!(format!("{}ms", d.min(MAX_SCALED / count).min(MAX_DURATION_MS)));
            }
            if let Some((threshold, within, cooldowns, forget_after)) = penalty {
                let ms = |d: u64| format!("{d}ms");
                p["penalty"] = json!({
                    "threshold": threshold,
                    "within": ms(within),
                    "cooldowns": cooldowns.into_iter().map(ms).collect::<Vec<_>>(),
                });
                if let Some(f) = forget_after {
                    p["penalty"]["forget_after"] = json!(ms(f));
                }
            }
            p
        })
}

/// How a step moves the clock; amounts scale with the policy's period.
#[derive(Debug, Clone, Copy)]
enum Move {
    Stay,
    Forward(u64),
    /// `n` fractions (1/8) of the period.
    Fraction(u64),
    /// `n` whole periods of idle.
    Idle(u64),
    Back(u64),
    BackFraction(u64),
    FarBack(i64),
    FarForward(i64),
}

fn clock_move() -> impl Strategy<Value = Move> {
    prop_oneof![
        6 => Just(Move::Stay),
        6 => (0u64..=50).prop_map(Move::Forward),
        4 => (1u64..=12).prop_map(Move::Fraction),
        2 => (1u64..=5).prop_map(Move::Idle),
        2 => (1u64..=50).prop_map(Move::Back),
        1 => (1u64..=12).prop_map(Move::BackFraction),
        1 => prop_oneof![Just(0), 0..=MAX_NOW].prop_map(Move::FarBack),
        1 => prop_oneof![Just(MAX_NOW), 0..=MAX_NOW].prop_map(Move::FarForward),
    ]
}

impl Move {
    fn apply(self, now: i64, period: i64) -> i64 {
        let scaled = |n: u64, unit: i64| (n as i64).saturating_mul(unit);
        let next = match self {
            Move::Stay => now,
            Move::Forward(ms) => now.saturating_add(ms as i64),
            Move::Fraction(n) => now.saturating_add(scaled(n, period / 8 + 1)),
            Move::Idle(n) => now.saturating_add(scaled(n, period)),
            Move::Back(ms) => now - ms as i64,
            Move::BackFraction(n) => now.saturating_sub(scaled(n, period / 8 + 1)),
            Move::FarBack(to) => to.min(now),
            Move::FarForward(to) => to.max(now),
        };
        next.clamp(0, MAX_NOW)
    }
}

/// What a step costs, relative to the policy's limit.
#[derive(Debug, Clone, Copy)]
enum Cost {
    One,
    Few(u64),
    Limit,
    OverLimit,
    Any(u64),
}

fn cost() -> impl Strategy<Value = Cost> {
    prop_oneof![
        8 => Just(Cost::One),
        4 => (1u64..=5).prop_map(Cost::Few),
        1 => Just(Cost::Limit),
        1 => Just(Cost::OverLimit),
        1 => (1u64..=MAX_COST).prop_map(Cost::Any),
    ]
}

impl Cost {
    fn units(self, limit: u64) -> u64 {
        match self {
            Cost::One => 1,
            Cost::Few(n) | Cost::Any(n) => n,
            Cost::Limit => limit.min(MAX_COST),
            Cost::OverLimit => (limit + 1).min(MAX_COST),
        }
    }
}

fn long_key() -> String {
    format!("{}{}", "L".repeat(128), "x".repeat(72))
}

const KEYS: usize = 4;

fn key(index: usize) -> String {
    match index {
        0 => "a".into(),
        1 => "b:{c}%".into(),
        2 => "c".into(),
        _ => long_key(),
    }
}

#[derive(Debug, Clone)]
struct Step {
    key: usize,
    cost: Cost,
    clock: Move,
}

fn steps() -> impl Strategy<Value = (i64, Vec<Step>)> {
    let start = prop_oneof![0i64..=10_000, Just(1_700_000_000_000), MAX_NOW - 10_000..=MAX_NOW];
    let step = (0..KEYS, cost(), clock_move()).prop_map(|(key, cost, clock)| Step { key, cost, clock });
    (start, prop::collection::vec(step, 1..40))
}

fn decision_fields(d: &Decision) -> (bool, u64, u64, u64, Option<u64>, u64, &'static str) {
    (
        d.allowed,
        d.limit,
        d.remaining,
        d.reset_after_ms,
        d.retry_after_ms,
        d.delay_ms,
        d.source.as_str(),
    )
}

static CASE: AtomicUsize = AtomicUsize::new(0);

fn config(policies: &[Policy]) -> LimiterConfig {
    let mut config = LimiterConfig::new(policies[0].clone());
    config.policies = policies.to_vec();
    config
}

/// Memory limiters, one per key.
///
/// The memory store sweeps expired entries when it inserts others; Redis
/// expires keys on its own clock, which hardly moves during a case. So once
/// the clock moves back, a state the memory store swept (having seen it
/// expire) may still be in Redis: a difference of expiry, not of algorithms.
/// One limiter per key leaves a single-policy case one entry per store,
/// which is never swept; cases with several entries per key (several
/// policies, a penalty record) keep their clock monotonic instead.
fn memory_limiters(policies: &[Policy]) -> Vec<Limiter> {
    (0..KEYS)
        .map(|_| Limiter::new(config(policies)).expect("valid policies"))
        .collect()
}

type Fields = (bool, Vec<(bool, u64, u64, u64, Option<u64>, u64, &'static str)>);

fn result_fields(r: &CheckResult) -> Fields {
    (r.allowed, r.decisions.iter().map(decision_fields).collect())
}

fn play(
    runtime: &tokio::runtime::Runtime,
    redis_url: &str,
    policy_values: &[Value],
    start: i64,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let mut policies = Vec::with_capacity(policy_values.len());
    for (i, value) in policy_values.iter().enumerate() {
        let policy = Policy::from_value(value, "")
            .map_err(|e| TestCaseError::fail(format!("the generator made an invalid policy: {e}")))?;
        policies.push(policy.with_name(format!("p{i}")));
    }
    let limit = policies[0].limit();
    let period = policies[0].period_ms() as i64;
    let mut config = config(&policies).with_store(redis_url);
    config.prefix = format!("fuzz-{}", CASE.fetch_add(1, Ordering::Relaxed));
    config.timeout = Duration::from_secs(10);
    let redis = Limiter::new(config).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let memory = memory_limiters(&policies);

    let monotonic = policies.len() > 1 || policies.iter().any(|p| p.penalty().is_some());
    let mut now = start;
    let mut played = Vec::with_capacity(steps.len());
    for (i, step) in steps.iter().enumerate() {
        let next = step.clock.apply(now, period);
        now = if monotonic { next.max(now) } else { next };
        let options = CheckOptions {
            cost: step.cost.units(limit),
            now_ms: Some(now),
        };
        let key = key(step.key);
        let on_memory = runtime
            .block_on(memory[step.key].check_all(&key, options))
            .map_err(|e| TestCaseError::fail(format!("step {i}: memory: {e}")))?;
        let on_redis = runtime
            .block_on(redis.check_all(&key, options))
            .map_err(|e| TestCaseError::fail(format!("step {i}: redis: {e}")))?;
        prop_assert_eq!(
            result_fields(&on_memory),
            result_fields(&on_redis),
            "step {} (key {:?}, cost {}, now_ms {}): memory vs redis",
            i,
            key,
            options.cost,
            now
        );
        played.push((step.key, options, on_memory));
    }

    // A denied step changes nothing: without them, the rest decides alike.
    // (A penalty records denials by design.)
    if policies.iter().all(|p| p.penalty().is_none()) {
        let fresh = memory_limiters(&policies);
        for (i, (k, options, decision)) in played.iter().enumerate().filter(|(_, p)| p.2.allowed) {
            let again = runtime
                .block_on(fresh[*k].check_all(&key(*k), *options))
                .map_err(|e| TestCaseError::fail(format!("replay step {i}: {e}")))?;
            prop_assert_eq!(
                result_fields(&again),
                result_fields(decision),
                "step {} (now_ms {:?}): a replay without the denied steps decided otherwise",
                i,
                options.now_ms
            );
        }
    }
    Ok(())
}

#[test]
fn memory_and_redis_decide_alike() {
    let server = support::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = server.url();
    // Mostly one policy; several are decided (and charged) atomically together.
    let policies = prop_oneof![
        3 => prop::collection::vec(policy(), 1..=1),
        1 => prop::collection::vec(policy(), 2..=3),
    ];
    let result = runner(cases(400)).run(&(policies, steps()), |(policies, (start, steps))| {
        play(&runtime, &url, &policies, start, &steps)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------
// The rules-file parser: an error or a limiter, never a panic.

const VALID_JSON: &str = r#"{
  "store": "memory", "prefix": "app", "timeout": "50ms", "max_keys": 1000,
  "trusted_proxies": ["10.0.0.0/8", "::1/128"], "ipv6_subnet": 64, "headers": "both",
  "allowlist": ["127.0.0.1"], "denylist": ["203.0.113.0/24"],
  "policies": {
    "api": {"algorithm": "sliding_window_counter", "rate": "100/1m"},
    "burst": {"algorithm": "leaky_bucket", "mode": "shape", "rate": "5/s", "max_delay": "1s",
              "penalty": {"threshold": 3, "within": "10s", "cooldowns": ["1s", "1m"]}}
  },
  "rules": [
    {"name": "api", "match": {"method": ["GET", "POST"], "path": "/api/*"}, "key": ["ip", "route"], "policy": "api"},
    {"name": "burst", "match": {"path": "/burst"}, "key": ["header:x-user"], "policy": "burst", "shadow": true}
  ]
}"#;

fn valid_rules() -> [String; 3] {
    [
        include_str!("../../examples/polylimit.yaml").to_string(),
        // The end-to-end file names its store only through the environment.
        include_str!("../../tests/e2e/polylimit.yaml").replace("${REDIS_URL}", "memory"),
        VALID_JSON.to_string(),
    ]
}

/// One edit of a rules file's text.
#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, String),
    Delete(usize, usize),
    Replace(usize, usize, String),
    DuplicateLine(usize),
    SwapLines(usize, usize),
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("".to_string()),
        Just("-1".to_string()),
        Just("0".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("1e308".to_string()),
        Just(".nan".to_string()),
        Just("~".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("\n  - ".to_string()),
        Just(": ".to_string()),
        Just("&a *a".to_string()),
        Just("!!binary".to_string()),
        Just("${".to_string()),
        Just("${X:-".to_string()),
        Just("\"\\u0000\"".to_string()),
        Just("0/0s".to_string()),
        Just("4294967296/1ms".to_string()),
        Just("36500d".to_string()),
        Just("::ffff:0.0.0.0/200".to_string()),
        any::<String>(),
        "[ -~\\t\\n]{0,12}",
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), token()).prop_map(|(at, t)| Mutation::Insert(at, t)),
        (any::<usize>(), 0usize..16).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<usize>(), 0usize..8, token()).prop_map(|(at, n, t)| Mutation::Replace(at, n, t)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

/// The char boundary at or before `at % (len + 1)`.
fn boundary(text: &str, at: usize) -> usize {
    let mut i = at % (text.len() + 1);
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut text = text.to_string();
    for m in mutations {
        match m {
            Mutation::Insert(at, t) => {
                let at = boundary(&text, *at);
                text.insert_str(at, t);
            }
            Mutation::Delete(at, n) | Mutation::Replace(at, n, _) => {
                let from = boundary(&text, *at);
                let to = boundary(&text, from + n).max(from);
                let with = match m {
                    Mutation::Replace(_, _, t) => t.as_str(),
                    _ => "",
                };
                text.replace_range(from..to, with);
            }
            Mutation::DuplicateLine(at) => {
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let i = at % lines.len();
                    lines.insert(i, lines[i]);
                }
                text = lines.join("\n");
            }
            Mutation::SwapLines(a, b) => {
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let n = lines.len();
                    lines.swap(a % n, b % n);
                }
                text = lines.join("\n");
            }
        }
    }
    text
}

fn parse_rules(text: &str) {
    // An error or a limiter; a panic fails the property.
    if let Ok(limiter) = Limiter::from_rules(text) {
        let _ = limiter.metrics_text();
    }
}

#[test]
fn valid_rules_files_parse() {
    for text in valid_rules() {
        if let Err(e) = Limiter::from_rules(&text) {
            panic!("a seed of the rules fuzzer must be valid: {e}\n{text}");
        }
    }
}

#[test]
fn rules_parser_never_panics_on_mutated_files() {
    let seeds = valid_rules();
    let strategy = (0..seeds.len(), prop::collection::vec(mutation(), 1..6));
    let result = runner(cases(512)).run(&strategy, |(seed, mutations)| {
        parse_rules(&mutate(&seeds[seed], &mutations));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn rules_parser_never_panics_on_random_input() {
    let strategy = prop_oneof![
        any::<String>(),
        prop::collection::vec(any::<u8>(), 0..512).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        "[a-z_:{}\\[\\],\"' \\n0-9/.*$-]{0,200}",
    ];
    let result = runner(cases(512)).run(&strategy, |text| {
        parse_rules(&text);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
