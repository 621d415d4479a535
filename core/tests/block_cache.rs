//! The blocked-key cache (issue 19, `block_cache`), on a real Redis: once
//! the store denies a check with a retry time, the same check is denied
//! locally (no store call: counted with INFO commandstats, and answered
//! while the server is stopped) with the store's decision counted down
//! exactly, until the retry time, where the store decides again. Never a
//! smaller or larger cost, a concurrency policy, a denial a penalty records;
//! a running penalty block is cached; this process's reset drops the entry;
//! the number of entries is bounded.

mod support;

use polylimit::{CheckOptions, Decision, Limiter, LimiterConfig, Policy, Source};
use serde_json::json;
use support::RedisServer;

const NOW: i64 = 1_700_000_000_000;
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn at(now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    }
}

fn costing(cost: u64, now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost,
        now_ms: Some(now_ms),
    }
}

fn limiter(redis: &RedisServer, policy: serde_json::Value, prefix: &str, block_cache: usize) -> Limiter {
    let mut config = LimiterConfig::new(Policy::from_value(&policy, "policy").unwrap()).with_store(redis.url());
    config.prefix = prefix.to_string();
    config.block_cache = block_cache;
    config.timeout = TIMEOUT; // decisions, not latency: a loaded CI host must not fall back
    Limiter::new(config).unwrap()
}

/// A bucket of 2, one token per 100 ms.
fn bucket() -> serde_json::Value {
    json!({"algorithm": "token_bucket", "rate": "10/s", "burst": 2})
}

/// Commands the server has run (INFO itself aside).
fn store_calls(redis: &RedisServer) -> u64 {
    let stats = redis.command("INFO commandstats").expect("INFO answers");
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .map(|l| {
            let calls = l.split("calls=").nth(1).expect("calls=");
            calls.split(',').next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

fn hits(limiter: &Limiter) -> u64 {
    hits_of(limiter, "default")
}

fn hits_of(limiter: &Limiter, policy: &str) -> u64 {
    let text = limiter.metrics_text();
    let line = format!("polylimit_block_cache_hits_total{{policy=\"{policy}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no hits line in:\n{text}"))
        .parse()
        .unwrap()
}

fn gauge(limiter: &Limiter, name: &str) -> u64 {
    let text = limiter.metrics_text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .parse()
        .unwrap()
}

/// Drains the bucket of `key` at NOW: two admissions, then the denial that fills the cache.
async fn block(limiter: &Limiter, key: &str) -> Decision {
    for _ in 0..2 {
        assert!(limiter.check_with(key, at(NOW)).await.unwrap().allowed);
    }
    let denied = limiter.check_with(key, at(NOW)).await.unwrap();
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after_ms, Some(100));
    denied
}

#[tokio::test]
async fn a_denied_key_is_answered_locally_counted_down_exactly_until_its_retry() {
    let redis = RedisServer::start();
    let cached = limiter(&redis, bucket(), "exact", 10);
    // The same limiter without the cache, on the same keys: what the store says.
    let store = limiter(&redis, bucket(), "exact", 0);
    let first = block(&cached, "k").await;
    assert_eq!(hits(&cached), 0);
    let mut served = 0;
    for d in (1..100).step_by(7) {
        let truth = store.peek_with("k", at(NOW + d)).await.unwrap();
        let before = store_calls(&redis);
        let check = cached.check_with("k", at(NOW + d)).await.unwrap();
        let peek = cached.peek_with("k", at(NOW + d)).await.unwrap();
        assert_eq!(store_calls(&redis), before, "at +{d} ms the store was asked");
        served += 2;
        assert_eq!(check, truth, "at +{d} ms");
        assert_eq!(peek, truth, "a peek at +{d} ms");
        assert_eq!(check.retry_after_ms, Some(100 - d as u64));
        assert_eq!(check.reset_after_ms, first.reset_after_ms - d as u64);
        assert_eq!(check.source, Source::Store, "indistinguishable from the store's answer");
    }
    assert_eq!(hits(&cached), served);
    // At the retry instant the store decides again, and admits.
    let before = store_calls(&redis);
    let again = cached.check_with("k", at(NOW + 100)).await.unwrap();
    assert!(again.allowed, "{again:?}");
    assert!(
        store_calls(&redis) > before,
        "the check at the retry instant went to the store"
    );
    assert_eq!(hits(&cached), served);
}

#[tokio::test]
async fn the_cached_answer_needs_no_server() {
    let redis = RedisServer::start();
    let cached = limiter(&redis, bucket(), "paused", 10);
    block(&cached, "k").await;
    redis.pause();
    let started = std::time::Instant::now();
    let check = cached.check_with("k", at(NOW + 40)).await;
    let elapsed = started.elapsed();
    redis.resume();
    let check = check.unwrap();
    // Not the fallback (the local store would admit a fresh key): the store's denial, counted down.
    assert_eq!(
        (check.allowed, check.source, check.retry_after_ms),
        (false, Source::Store, Some(60))
    );
    // A call to the paused server would wait out the whole timeout.
    assert!(elapsed < TIMEOUT / 2, "{elapsed:?}");
    assert_eq!(hits(&cached), 1);
}

#[tokio::test]
async fn on_the_store_clock_the_cache_ends_no_later_than_the_store() {
    let redis = RedisServer::start();
    // One token per 2 s: the denial's retry is about 2 s, on Redis TIME.
    let cached = limiter(
        &redis,
        json!({"algorithm": "token_bucket", "rate": "1/2s", "burst": 1}),
        "clock",
        10,
    );
    assert!(cached.check("k").await.unwrap().allowed);
    let denied = cached.check("k").await.unwrap();
    let retry = denied.retry_after_ms.expect("a retry");
    let before = store_calls(&redis);
    let again = cached.check("k").await.unwrap();
    assert_eq!(store_calls(&redis), before);
    assert!(!again.allowed);
    // Counted down on this process's clock from before the call: never more than the store's.
    assert!(again.retry_after_ms.unwrap() <= retry, "{again:?} after {denied:?}");
    assert_eq!(hits(&cached), 1);
}

#[tokio::test]
async fn only_the_same_cost_is_served() {
    let redis = RedisServer::start();
    let cached = limiter(&redis, bucket(), "cost", 10);
    // Cost 2 on an empty-ish bucket: one token left, denied for 100 ms.
    assert!(cached.check_with("k", at(NOW)).await.unwrap().allowed);
    let denied = cached.check_with("k", costing(2, NOW)).await.unwrap();
    assert_eq!((denied.allowed, denied.retry_after_ms), (false, Some(100)));
    let before = store_calls(&redis);
    // A smaller cost fits now: the store is asked and admits.
    let small = cached.check_with("k", costing(1, NOW + 1)).await.unwrap();
    assert!(small.allowed, "{small:?}");
    assert!(store_calls(&redis) > before);
    // That admission dropped the entry: the cost-2 denial's retry is longer now.
    let before = store_calls(&redis);
    let again = cached.check_with("k", costing(2, NOW + 2)).await.unwrap();
    assert_eq!((again.allowed, again.retry_after_ms), (false, Some(198)));
    // A larger cost is told its own retry by the store.
    let big = cached.check_with("k", costing(3, NOW + 3)).await.unwrap();
    assert!(!big.allowed);
    assert!(store_calls(&redis) >= before + 2);
    assert_eq!(hits(&cached), 0);
}

#[tokio::test]
async fn a_reset_drops_the_entry() {
    let redis = RedisServer::start();
    let cached = limiter(&redis, bucket(), "reset", 10);
    block(&cached, "k").await;
    assert!(!cached.check_with("k", at(NOW + 1)).await.unwrap().allowed);
    assert_eq!(hits(&cached), 1);
    cached.reset("k").await.unwrap();
    let after = cached.check_with("k", at(NOW + 2)).await.unwrap();
    assert!(after.allowed, "{after:?}");
    assert_eq!(hits(&cached), 1);
    assert_eq!(gauge(&cached, "polylimit_block_cache_keys"), 0);
}

#[tokio::test]
async fn a_penalty_block_is_cached_but_a_denial_it_records_is_not() {
    let redis = RedisServer::start();
    let policy = json!({"algorithm": "fixed_window", "rate": "1/min",
                        "penalty": {"threshold": 2, "within": "1m", "cooldowns": ["10s"]}});
    let cached = limiter(&redis, policy.clone(), "penalty", 10);
    let store = limiter(&redis, policy, "penalty", 0);
    assert!(cached.check_with("k", at(NOW)).await.unwrap().allowed);
    // The first denial counts toward the threshold: the next check must reach the store.
    let first = cached.check_with("k", at(NOW + 1)).await.unwrap();
    assert_eq!((first.allowed, first.source), (false, Source::Store));
    let before = store_calls(&redis);
    let second = cached.check_with("k", at(NOW + 2)).await.unwrap();
    assert!(store_calls(&redis) > before);
    // The second denial starts a 10 s block: cached, with the rest of the block.
    assert_eq!((second.source, second.retry_after_ms), (Source::Penalty, Some(10_000)));
    let truth = store.peek_with("k", at(NOW + 5_002)).await.unwrap();
    let before = store_calls(&redis);
    let during = cached.check_with("k", at(NOW + 5_002)).await.unwrap();
    assert_eq!(store_calls(&redis), before);
    assert_eq!(during, truth);
    assert_eq!((during.source, during.retry_after_ms), (Source::Penalty, Some(5_000)));
    assert_eq!(hits(&cached), 1);
}

#[tokio::test]
async fn a_concurrency_denial_is_not_cached() {
    let redis = RedisServer::start();
    let cached = limiter(
        &redis,
        json!({"algorithm": "concurrency", "limit": 1, "lease": "10s"}),
        "concurrency",
        10,
    );
    let held = cached.check_all("k", at(NOW)).await.unwrap();
    assert!(held.allowed);
    assert!(!cached.check_all("k", at(NOW + 1)).await.unwrap().allowed);
    let before = store_calls(&redis);
    assert!(!cached.check_all("k", at(NOW + 2)).await.unwrap().allowed);
    assert!(store_calls(&redis) > before);
    assert_eq!(hits(&cached), 0);
    assert_eq!(gauge(&cached, "polylimit_block_cache_keys"), 0);
}

#[tokio::test]
async fn an_adaptive_policys_denial_is_not_cached() {
    // The store counts every attempt toward the key's rate (issue 20).
    let redis = RedisServer::start();
    let policy = json!({"algorithm": "fixed_window", "rate": "1/h", "adaptive": {}});
    let cached = limiter(&redis, policy, "adaptive", 10);
    assert!(cached.check_all("k", at(NOW)).await.unwrap().allowed);
    assert!(!cached.check_all("k", at(NOW + 1)).await.unwrap().allowed);
    let before = store_calls(&redis);
    assert!(!cached.check_all("k", at(NOW + 2)).await.unwrap().allowed);
    assert!(store_calls(&redis) > before);
    assert_eq!(hits(&cached), 0);
}

#[tokio::test]
async fn the_number_of_entries_is_bounded() {
    let redis = RedisServer::start();
    let cached = limiter(&redis, bucket(), "bound", 3);
    assert_eq!(gauge(&cached, "polylimit_block_cache_max_keys"), 3);
    for n in 0..8 {
        block(&cached, &format!("k{n}")).await;
        assert!(gauge(&cached, "polylimit_block_cache_keys") <= 3);
    }
    assert_eq!(gauge(&cached, "polylimit_block_cache_keys"), 3);
    // The newest is held.
    let before = store_calls(&redis);
    assert!(!cached.check_with("k7", at(NOW + 1)).await.unwrap().allowed);
    assert_eq!(store_calls(&redis), before);
}

#[tokio::test]
async fn several_policies_are_served_together() {
    let redis = RedisServer::start();
    let policies = json!({
        "policies": {
            "per_second": {"algorithm": "token_bucket", "rate": "10/s", "burst": 5},
            "per_minute": {"algorithm": "fixed_window", "rate": "2/min"}
        },
        "store": redis.url(), "prefix": "multi", "block_cache": 10
    });
    let cached = Limiter::from_value(&policies).unwrap();
    let mut plain = policies.clone();
    plain["block_cache"] = json!(false);
    let store = Limiter::from_value(&plain).unwrap();
    for _ in 0..2 {
        assert!(cached.check_all("k", at(NOW)).await.unwrap().allowed);
    }
    let denied = cached.check_all("k", at(NOW)).await.unwrap();
    assert!(!denied.allowed);
    // A denied check charges nothing: the store's answer without the cache.
    let truth = store.check_all("k", at(NOW + 30_000)).await.unwrap();
    assert!(!truth.allowed);
    let before = store_calls(&redis);
    let served = cached.check_all("k", at(NOW + 30_000)).await.unwrap();
    assert_eq!(store_calls(&redis), before);
    assert!(!served.allowed);
    // The denying policy's decision is the store's, counted down; the
    // admitting one's is as the store gave it 30 s ago (its reset counted down).
    let (no, yes) = if served.decisions[0].allowed { (1, 0) } else { (0, 1) };
    assert_eq!(served.decisions[no], truth.decisions[no]);
    assert!(served.decisions[no].retry_after_ms.unwrap() <= 60_000);
    assert!(served.decisions[yes].allowed);
    assert_eq!(served.decisions[yes].remaining, denied.decisions[yes].remaining);
    assert_eq!(served.decisions[yes].reset_after_ms, 0);
    assert_eq!((hits_of(&cached, "per_minute"), hits_of(&cached, "per_second")), (1, 0));
}

fn login(now_ms: i64) -> polylimit::RequestInfo {
    polylimit::RequestInfo {
        method: "POST".into(),
        path: "/login".into(),
        peer: Some("203.0.113.7".into()),
        now_ms: Some(now_ms),
        ..polylimit::RequestInfo::default()
    }
}

#[tokio::test]
async fn a_refund_after_the_response_drops_the_entry() {
    let redis = RedisServer::start();
    // One login per 10 s, and only failed ones count.
    let limiter = Limiter::from_value(&json!({
        "policy": {"algorithm": "fixed_window", "rate": "1/10s"}, "count": "failed",
        "store": redis.url(), "prefix": "refund", "block_cache": 10,
    }))
    .unwrap();
    let first = limiter.check_request(&login(NOW)).await.unwrap();
    assert_eq!(first.status, None);
    assert_eq!(limiter.check_request(&login(NOW + 1)).await.unwrap().status, Some(429));
    assert_eq!(limiter.check_request(&login(NOW + 2)).await.unwrap().status, Some(429));
    assert_eq!(hits(&limiter), 1);
    // The first login succeeded: given back, so the next one fits.
    assert_eq!(
        limiter.complete(&first.completion.unwrap(), Some(200)).await.unwrap(),
        1
    );
    let next = limiter.check_request(&login(NOW + 3)).await.unwrap();
    assert_eq!(next.status, None, "{next:?}");
    assert_eq!(hits(&limiter), 1);
}

#[tokio::test]
async fn an_override_drops_the_entry() {
    let redis = RedisServer::start();
    let limiter = Limiter::from_value(&json!({
        "policy": {"algorithm": "token_bucket", "rate": "10/s", "burst": 2},
        "store": redis.url(), "prefix": "override", "block_cache": 10, "overrides": true,
    }))
    .unwrap();
    block(&limiter, "k").await;
    assert!(!limiter.check_with("k", at(NOW + 1)).await.unwrap().allowed);
    assert_eq!(hits(&limiter), 1);
    let spec = polylimit::OverrideSpec {
        burst: Some(50),
        now_ms: Some(NOW + 2),
        ..polylimit::OverrideSpec::new("100/s")
    };
    limiter.set_override("k", &spec).await.unwrap();
    // The override starts full: the store admits.
    let after = limiter.check_with("k", at(NOW + 2)).await.unwrap();
    assert!(after.allowed, "{after:?}");
    assert_eq!(hits(&limiter), 1);
}
