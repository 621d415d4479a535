//! Local-with-sync policies (issue 19): several limiters ("processes") on one
//! key of one real Redis admit from local credit, one store call per interval
//! per key (or when the credit runs out), and never admit more than the exact
//! policy allows (the bound in docs/features/sync.md: none for windows; for buckets,
//! what the exact bucket admits over the span plus one interval).

mod support;

use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy, Source};
use serde_json::{json, Value};

fn policy(v: Value) -> Policy {
    Policy::from_value(&v, "").unwrap()
}

/// A limiter on `redis`, with a timeout no loaded test machine reaches: a
/// store call that timed out would be decided by the fallback, unseen.
fn limiter(redis: &support::RedisServer, p: Value) -> Limiter {
    Limiter::new(config(redis, p)).unwrap()
}

fn config(redis: &support::RedisServer, p: Value) -> LimiterConfig {
    let mut config = LimiterConfig::new(policy(p)).with_store(redis.url());
    config.timeout = std::time::Duration::from_secs(5);
    config
}

/// Store calls so far (FCALL or EVALSHA).
fn store_calls(redis: &support::RedisServer) -> u64 {
    let stats = redis.command("INFO commandstats").unwrap();
    ["fcall", "evalsha"]
        .iter()
        .map(|c| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{c}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap())
        })
        .sum()
}

/// A check at `now`, decided by the store (or a share of it), never a fallback.
async fn check(l: &Limiter, key: &str, now: i64) -> polylimit::Decision {
    let d = check_any(l, key, now).await;
    assert_eq!(d.source, Source::Store, "{d:?}");
    d
}

async fn check_any(l: &Limiter, key: &str, now: i64) -> polylimit::Decision {
    l.check_with(
        key,
        CheckOptions {
            cost: 1,
            now_ms: Some(now),
        },
    )
    .await
    .unwrap()
}

/// Limiters whose library is loaded (the first call of each loads it), so
/// later calls count one per decision.
async fn warm(limiters: &[Limiter], now: i64) {
    for l in limiters {
        check(l, "warm-up", now).await;
    }
}

const T0: i64 = 1_700_000_000_000; // a whole 10 s (the hour begins at T0 - 800 s)

/// Runs `processes` limiters on one key for `ms` of simulated time, process
/// `j` checking once at ms `t` when `active(j, t)`; returns admissions per ms.
async fn run(
    redis: &support::RedisServer,
    p: Value,
    processes: usize,
    ms: usize,
    active: impl Fn(usize, usize) -> bool,
) -> Vec<u64> {
    let limiters: Vec<Limiter> = (0..processes).map(|_| limiter(redis, p.clone())).collect();
    let mut admitted = vec![0u64; ms];
    for (t, count) in admitted.iter_mut().enumerate() {
        for j in 0..processes {
            // Interleave the processes differently each step.
            let j = (j + t) % processes;
            if active(j, t) && check(&limiters[j], "shared", T0 + t as i64).await.allowed {
                *count += 1;
            }
        }
    }
    admitted
}

/// Full speed: every process checks every ms.
fn full_speed(_: usize, _: usize) -> bool {
    true
}

/// A quiet second (process 0 checks once at 800 ms and every 4 ms in the
/// last 24 ms, so it holds credit when the window ends), then a busy one
/// (everyone, every ms).
fn quiet_then_busy(j: usize, t: usize) -> bool {
    let (w, at) = (t / 1000, t % 1000);
    if w % 2 == 0 {
        j == 0 && (at == 800 || at >= 976 && at % 4 == 0)
    } else {
        true
    }
}

#[tokio::test]
async fn a_fixed_window_never_admits_more_than_its_limit_across_processes() {
    let redis = support::RedisServer::start();
    let p = json!({"algorithm": "fixed_window", "rate": "100/s", "sync": {"interval": "130ms", "share": 10}});
    for (name, pattern) in [
        ("full speed", full_speed as fn(usize, usize) -> bool),
        ("quiet then busy", quiet_then_busy),
    ] {
        let admitted = run(&redis, p.clone(), 5, 4000, pattern).await;
        for (w, window) in admitted.chunks(1000).enumerate() {
            let total: u64 = window.iter().sum();
            assert!(total <= 100, "{name}: window {w} admitted {total} > limit 100");
            // Busy, credit is used within a few ms: at most a share per
            // process is left unused when the window ends.
            if name == "full speed" || w % 2 == 1 {
                assert!(total >= 100 - 5 * 10, "{name}: window {w} admitted only {total}");
            }
        }
        redis.command("FLUSHALL").unwrap();
    }
}

#[tokio::test]
async fn a_sliding_window_counter_never_estimates_above_its_limit() {
    let redis = support::RedisServer::start();
    let p = json!({"algorithm": "sliding_window_counter", "rate": "100/s", "sync": {"interval": "130ms", "share": 10}});
    for pattern in [full_speed as fn(usize, usize) -> bool, quiet_then_busy] {
        let admitted = run(&redis, p.clone(), 4, 4000, pattern).await;
        assert_swc_bound(&admitted);
        redis.command("FLUSHALL").unwrap();
    }
}

fn assert_swc_bound(admitted: &[u64]) {
    let period = 1000usize;
    for now in 0..admitted.len() {
        let w = now / period;
        let cur: u64 = admitted[w * period..=now].iter().sum();
        let prev: u64 = if w > 0 {
            admitted[(w - 1) * period..w * period].iter().sum()
        } else {
            0
        };
        let elapsed = (now % period) as u64;
        let estimate_scaled = prev * (period as u64 - elapsed) + cur * period as u64;
        assert!(
            estimate_scaled <= 100 * period as u64,
            "at {now} ms: previous {prev}, current {cur}: the estimate exceeds 100"
        );
    }
    let total: u64 = admitted.iter().sum();
    assert!(total >= 100, "admitted only {total} in 4 windows");
}

/// A bucket's bound: over every span [a, b), admitted <= burst + rate * (b - a + interval).
fn assert_bucket_bound(admitted: &[u64], burst: u64, per_ms: f64, interval: i64, what: &str) {
    let mut prefix = vec![0u64; admitted.len() + 1];
    for (i, n) in admitted.iter().enumerate() {
        prefix[i + 1] = prefix[i] + n;
    }
    for a in 0..admitted.len() {
        for b in (a + 1..=admitted.len()).step_by(7).chain([admitted.len()]) {
            let got = prefix[b] - prefix[a];
            let bound = burst as f64 + per_ms * (b - a) as f64 + per_ms * interval as f64;
            assert!(
                got as f64 <= bound,
                "{what}: {got} admitted in [{a}, {b}) ms > bound {bound}"
            );
        }
    }
    let total = prefix[admitted.len()];
    let exact = burst as f64 + per_ms * admitted.len() as f64;
    assert!(total as f64 <= exact, "{what}: {total} admitted in all > exact {exact}");
}

#[tokio::test]
async fn buckets_admit_at_most_the_exact_bucket_plus_one_interval() {
    let redis = support::RedisServer::start();
    for algorithm in ["token_bucket", "gcra"] {
        let p = json!({"algorithm": algorithm, "rate": "100/s", "burst": 50, "name": algorithm,
                       "sync": {"interval": "100ms", "share": 25}});
        let admitted = run(&redis, p.clone(), 4, 2000, full_speed).await;
        assert_bucket_bound(&admitted, 50, 0.1, 100, algorithm);
        let total: u64 = admitted.iter().sum();
        assert!(total >= 200, "{algorithm}: admitted only {total} of the exact 250");
        redis.command("FLUSHALL").unwrap();
        let admitted = run(&redis, p, 4, 2000, quiet_then_busy).await;
        assert_bucket_bound(&admitted, 50, 0.1, 100, &format!("{algorithm}, quiet then busy"));
        redis.command("FLUSHALL").unwrap();
    }
}

#[tokio::test]
async fn one_store_call_per_interval_per_key_per_limiter() {
    let redis = support::RedisServer::start();
    let p = json!({"rate": "10000/s", "burst": 1000, "sync": {"interval": "100ms", "share": 100}});
    let limiters: Vec<Limiter> = (0..3).map(|_| limiter(&redis, p.clone())).collect();
    warm(&limiters, T0).await;
    let before = store_calls(&redis);
    let mut allowed = 0;
    for t in 0..1000 {
        for l in &limiters {
            // 10 checks per 20 ms: 50 per interval, less than the share.
            if t % 2 == 0 {
                allowed += check(l, "k", T0 + t).await.allowed as u64;
            }
        }
    }
    assert_eq!(allowed, 3 * 500);
    assert_eq!(
        store_calls(&redis) - before,
        3 * 10,
        "one call per 100 ms interval per limiter"
    );
}

#[tokio::test]
async fn an_exhausted_share_syncs_before_the_interval_ends() {
    let redis = support::RedisServer::start();
    let l = limiter(
        &redis,
        json!({"algorithm": "fixed_window", "rate": "100/10s", "sync": {"interval": "1s", "share": 10}}),
    );
    warm(std::slice::from_ref(&l), T0).await;
    let before = store_calls(&redis);
    let mut remaining = Vec::new();
    for _ in 0..25 {
        let d = check(&l, "k", T0).await;
        assert!(d.allowed);
        assert_eq!(d.source, Source::Store);
        remaining.push(d.remaining);
    }
    assert_eq!(
        store_calls(&redis) - before,
        3,
        "25 admissions from shares of 10: three syncs"
    );
    // What the store has left beyond the credit, plus the credit.
    assert_eq!(&remaining[..3], &[99, 98, 97]);
    assert_eq!(remaining[24], 75);
}

#[tokio::test]
async fn the_interval_end_drops_unused_credit() {
    let redis = support::RedisServer::start();
    let l = limiter(
        &redis,
        json!({"algorithm": "fixed_window", "rate": "100/10s", "sync": {"interval": "100ms", "share": 10}}),
    );
    warm(std::slice::from_ref(&l), T0).await;
    let before = store_calls(&redis);
    assert_eq!(check(&l, "k", T0).await.remaining, 99, "store 90 + credit 9");
    assert_eq!(check(&l, "k", T0 + 99).await.remaining, 98, "still the credit");
    assert_eq!(store_calls(&redis) - before, 1);
    // The interval ended: the 8 units left are dropped, a new share is taken.
    assert_eq!(check(&l, "k", T0 + 100).await.remaining, 89, "store 80 + credit 9");
    assert_eq!(store_calls(&redis) - before, 2);
    // A window's credit ends with its window, even inside the interval.
    let d = check(&l, "k", T0 + 10_000 - 1).await;
    assert_eq!(d.remaining, 79, "store 70 + credit 9");
    let d = check(&l, "k", T0 + 10_000).await;
    assert_eq!(d.remaining, 99, "a new window: store 90 + credit 9");
    assert_eq!(store_calls(&redis) - before, 4);
}

#[tokio::test]
async fn a_denial_is_remembered_until_the_next_sync() {
    let redis = support::RedisServer::start();
    let p = json!({"algorithm": "fixed_window", "rate": "10/10s", "sync": {"interval": "1s", "share": 4}});
    let (a, b) = (limiter(&redis, p.clone()), limiter(&redis, p));
    warm(&[a.clone(), b.clone()], T0).await;
    let before = store_calls(&redis);
    assert_eq!(check(&b, "k", T0).await.remaining, 9, "B takes 4");
    for _ in 0..6 {
        assert!(check(&a, "k", T0).await.allowed, "A takes 4, then the 2 left");
    }
    assert_eq!(
        store_calls(&redis) - before,
        4,
        "B's share, A's share, A's denied share, A's take of 2"
    );
    let d = check(&a, "k", T0 + 10).await;
    assert!(!d.allowed);
    assert_eq!(
        d.retry_after_ms,
        Some(1000),
        "A asks the store again at the next sync, an interval on"
    );
    for t in 11..500 {
        assert!(!check(&a, "k", T0 + t).await.allowed);
    }
    assert_eq!(
        store_calls(&redis) - before,
        5,
        "denials from memory until the interval ends"
    );
    // B still holds 3 of its share: admitted without the store.
    for _ in 0..3 {
        assert!(check(&b, "k", T0 + 20).await.allowed);
    }
    assert!(!check(&b, "k", T0 + 20).await.allowed);
    assert_eq!(store_calls(&redis) - before, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_checks_share_one_sync_and_lose_no_unit() {
    let redis = support::RedisServer::start();
    let l = limiter(
        &redis,
        json!({"algorithm": "fixed_window", "rate": "10000/1h", "sync": {"interval": "1h", "share": 10}}),
    );
    warm(std::slice::from_ref(&l), T0).await;
    let before = store_calls(&redis);
    let tasks: Vec<_> = (0..400)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move { check(&l, "k", T0 + 1).await.allowed })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap() as u64;
    }
    assert_eq!(allowed, 400);
    assert_eq!(
        store_calls(&redis) - before,
        40,
        "each share of 10 serves 10 checks, none charged twice"
    );
    let d = check(&l, "k", T0 + 2).await;
    assert_eq!(d.remaining, 10_000 - 410 + 9, "the store holds exactly 41 shares");
}

#[tokio::test]
async fn reset_forgets_the_credit() {
    let redis = support::RedisServer::start();
    let l = limiter(
        &redis,
        json!({"algorithm": "fixed_window", "rate": "10/1h", "sync": {"interval": "1h", "share": 5}}),
    );
    assert_eq!(check(&l, "k", T0).await.remaining, 9);
    l.reset("k").await.unwrap();
    assert_eq!(check(&l, "k", T0).await.remaining, 9, "a new share from a fresh key");
}

#[tokio::test]
async fn a_store_that_cannot_answer_falls_back_per_request() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p =
        |on: &str| json!({"algorithm": "fixed_window", "rate": "10/1h", "on_store_error": on, "sync": {"share": 5}});
    let url = format!("redis://127.0.0.1:{port}");
    let closed = Limiter::new(LimiterConfig::new(policy(p("fail_closed"))).with_store(&url)).unwrap();
    let d = check_any(&closed, "k", T0).await;
    assert_eq!((d.allowed, d.source), (false, Source::FailClosed));
    let local = Limiter::new(LimiterConfig::new(policy(p("local"))).with_store(&url)).unwrap();
    let d = check_any(&local, "k", T0).await;
    assert_eq!(
        (d.allowed, d.source, d.remaining),
        (true, Source::Local, 9),
        "the local fallback charges the request's cost, not a share"
    );
}

#[tokio::test]
async fn the_memory_store_decides_exactly() {
    let l = Limiter::new(LimiterConfig::new(policy(
        json!({"algorithm": "fixed_window", "rate": "3/1h", "sync": {"share": 2}}),
    )))
    .unwrap();
    let mut remaining = Vec::new();
    for _ in 0..3 {
        remaining.push(check(&l, "k", T0).await.remaining);
    }
    assert_eq!(remaining, vec![2, 1, 0]);
}

#[test]
fn sync_is_validated_and_spelled_out() {
    let err = |v: Value| Policy::from_value(&v, "").unwrap_err().to_string();
    let p = policy(json!({"rate": "100/s", "sync": {}}));
    assert_eq!((p.sync().unwrap().interval_ms(), p.sync().unwrap().share()), (100, 10));
    assert_eq!(p.to_value()["sync"], json!({"interval": "100ms", "share": 10}));
    assert_eq!(Policy::from_value(&p.to_value(), "").unwrap(), p, "to_value reads back");
    let p = policy(json!({"algorithm": "gcra", "rate": "5/s", "sync": {"interval": "1s", "share": 5}}));
    assert_eq!((p.sync().unwrap().interval_ms(), p.sync().unwrap().share()), (1000, 5));
    assert_eq!(policy(json!({"rate": "5/s", "sync": {}})).sync().unwrap().share(), 1);
    assert_eq!(
        err(json!({"algorithm": "leaky_bucket", "rate": "5/s", "sync": {}})),
        "sync: does not apply to leaky_bucket: only token_bucket, gcra, fixed_window and sliding_window_counter sync"
    );
    assert_eq!(
        err(json!({"rate": "5/s", "sync": {"interval": "0s"}})),
        "sync.interval: \"0s\" is not a duration like \"100ms\" or \"1s\", above zero"
    );
    assert_eq!(
        err(json!({"rate": "5/s", "sync": {"share": 6}})),
        "sync.share: 6 is not an integer from 1 to the policy's limit (5)"
    );
    assert_eq!(
        err(json!({"rate": "5/s", "sync": {"every": "1s"}})),
        "sync.every: is not a sync field (expected one of interval, share)"
    );
    assert_eq!(
        err(json!({"rate": "5/s", "sync": true})),
        "sync: true is not an object like { interval: 100ms, share: 10 }"
    );
    assert_eq!(
        err(json!({"rate": "5/s", "sync": {}, "penalty": {"threshold": 3, "within": "1m", "cooldowns": "1m"}})),
        "sync: does not combine with penalty"
    );
}

#[tokio::test]
async fn credits_are_bounded_by_max_keys_beyond_which_checks_are_exact() {
    let redis = support::RedisServer::start();
    let mut config = config(
        &redis,
        json!({"algorithm": "fixed_window", "rate": "10/1h", "sync": {"interval": "1h", "share": 5}}),
    );
    config.max_keys = 2;
    let l = Limiter::new(config).unwrap();
    assert_eq!(check(&l, "a", T0).await.remaining, 9, "a's share: 5 + store 5");
    assert_eq!(check(&l, "b", T0).await.remaining, 9);
    let before = store_calls(&redis);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(check(&l, "c", T0).await.remaining);
    }
    assert_eq!(got, vec![9, 8, 7], "no room for c's credit: exact decisions");
    assert_eq!(store_calls(&redis) - before, 3);
    // a and b still decide from their credit.
    assert_eq!(check(&l, "a", T0).await.remaining, 8);
    assert_eq!(store_calls(&redis) - before, 3);
    // The next hour: a's and b's credits ended, so c gets one.
    let next_hour = T0 + 2_800_000;
    assert_eq!(check(&l, "c", next_hour).await.remaining, 9);
    assert_eq!(check(&l, "c", next_hour).await.remaining, 8);
    assert_eq!(store_calls(&redis) - before, 4);
}
