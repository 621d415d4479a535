//! Multi-region quotas (issue 19): two real redis-servers as regions `eu`
//! and `us`, a limiter in each. The local share is spent first, then the
//! region borrows from the other; together they admit exactly the global
//! limit, never more. A region whose peer is killed or hangs keeps admitting
//! its own share, without an error and without waiting beyond the timeout.

mod support;

use std::time::{Duration, Instant};

use polylimit::{CheckOptions, Limiter, RequestInfo, Source};
use serde_json::{json, Value};
use support::RedisServer;

const NOW: i64 = 1_700_000_000_000;
/// The store (and connect) timeout: the time bounds below are fractions and
/// multiples of it, so a loaded CI host (5x slower) passes and a wait on a
/// hung lender still fails.
const TIMEOUT: Duration = Duration::from_secs(1);

fn at(now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    }
}

fn limiter(policy: Value, regions: Value, region: &str) -> Limiter {
    Limiter::from_value(&json!({
        "policy": policy,
        "regions": regions,
        "region": region,
        "timeout": format!("{}ms", TIMEOUT.as_millis()),
        "connect_timeout": format!("{}ms", TIMEOUT.as_millis()),
        "failure_threshold": 3,
        "cooldown": "30s",
    }))
    .expect("a valid regions config")
}

fn borrows(limiter: &Limiter, region: &str, result: &str) -> u64 {
    let line = format!("polylimit_region_borrows_total{{region=\"{region}\",result=\"{result}\"}} ");
    limiter
        .metrics_text()
        .lines()
        .find_map(|l| l.strip_prefix(&line).map(|n| n.parse().unwrap()))
        .unwrap_or_else(|| panic!("no {line} in the metrics"))
}

#[tokio::test]
async fn local_share_first_then_borrowed_up_to_the_global_limit() {
    let (eu_redis, us_redis) = (RedisServer::start(), RedisServer::start());
    let regions = json!({ "eu": eu_redis.url(), "us": us_redis.url() });
    let policy = json!({ "algorithm": "fixed_window", "rate": "10/min" });
    let eu = limiter(policy.clone(), regions.clone(), "eu");
    let us = limiter(policy, regions, "us");

    let mut admitted = 0;
    for n in 0..5 {
        let d = eu.check_with("k", at(NOW)).await.unwrap();
        assert!(d.allowed, "eu's own share, check {n}: {d:?}");
        assert_eq!(d.limit, 10, "the headers describe the global limit");
        admitted += 1;
    }
    assert_eq!(
        borrows(&eu, "us", "granted"),
        0,
        "eu's own share is spent before it borrows"
    );
    for n in 0..20 {
        let d = eu.check_with("k", at(NOW)).await.unwrap();
        assert_eq!(d.source, Source::Store);
        if d.allowed {
            admitted += 1;
        } else {
            assert!(n >= 5, "us lends its share of 5: denied at {n}");
        }
    }
    assert_eq!(admitted, 10, "eu admitted the global limit: its share and all of us's");
    assert_eq!(borrows(&eu, "us", "granted"), 5);
    // us refused once, with the time its share refills: eu does not ask again before it.
    assert_eq!(borrows(&eu, "us", "refused"), 1);
    assert_eq!(borrows(&eu, "us", "skipped"), 14);
    // us has nothing left: its share was lent, and eu has none to lend.
    let d = us.check_with("k", at(NOW)).await.unwrap();
    assert!(!d.allowed, "{d:?}");
    assert_eq!(borrows(&us, "eu", "refused"), 1);
    // A reset forgets the key in both regions (and us's remembered refusal).
    eu.reset("k").await.unwrap();
    let mut again = 0;
    for _ in 0..12 {
        again += eu.check_with("k", at(NOW)).await.unwrap().allowed as u64;
    }
    assert_eq!(again, 10, "both shares are whole again after the reset");
    // The next window: both shares again, and us lends again.
    let d = us.check_with("k", at(NOW + 60_000)).await.unwrap();
    assert!(d.allowed);
    for _ in 0..5 {
        assert!(eu.check_with("k", at(NOW + 60_000)).await.unwrap().allowed);
    }
    assert!(
        eu.check_with("k", at(NOW + 60_000)).await.unwrap().allowed,
        "borrowed again"
    );
    assert_eq!(
        borrows(&eu, "us", "granted"),
        11,
        "5 before the reset, 5 after, 1 in the next window"
    );
}

/// Both regions hit one key concurrently, eu far beyond its share and us
/// under its own: the admissions across both are exactly the global limit
/// (demand exceeds it), never more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_regions_admit_the_global_limit_exactly() {
    let (eu_redis, us_redis) = (RedisServer::start(), RedisServer::start());
    let regions =
        json!({ "eu": { "store": eu_redis.url(), "share": 0.6 }, "us": { "store": us_redis.url(), "share": 0.4 } });
    for policy in [
        json!({ "algorithm": "token_bucket", "rate": "1/h", "burst": 37 }),
        json!({ "algorithm": "gcra", "rate": "1/h", "burst": 37 }),
        json!({ "algorithm": "sliding_window_log", "rate": "37/h" }),
    ] {
        let eu = limiter(policy.clone(), regions.clone(), "eu");
        let us = limiter(policy.clone(), regions.clone(), "us");
        let mut tasks = Vec::new();
        // us asks for 5 (under its share of 15), eu for 105: eu must borrow us's spare 10.
        for n in 0..8 {
            let (l, checks) = if n == 0 { (us.clone(), 5) } else { (eu.clone(), 15) };
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..checks {
                    if l.check_with("hot", at(NOW + n as i64)).await.unwrap().allowed {
                        admitted += 1;
                    }
                }
                admitted
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        let borrowed = borrows(&eu, "us", "granted") + borrows(&us, "eu", "granted");
        println!("{policy}: 110 checks, admitted {admitted} of the global 37, {borrowed} borrowed");
        assert_eq!(admitted, 37, "{policy}: admitted across both regions");
        assert!(borrowed >= 10, "{policy}: eu borrowed us's spare share: {borrowed}");
        eu_redis.command("FLUSHALL");
        us_redis.command("FLUSHALL");
    }
}

/// The other region killed, then hung (SIGSTOP): the local region admits
/// its own share, returns no error, and waits at most the timeout.
#[tokio::test]
async fn the_other_region_down_leaves_the_local_share() {
    let (eu_redis, mut us_redis) = (RedisServer::start(), RedisServer::start());
    let regions = json!({ "eu": eu_redis.url(), "us": us_redis.url() });
    let policy = json!({ "algorithm": "gcra", "rate": "1/h", "burst": 8 });
    let eu = limiter(policy.clone(), regions.clone(), "eu");

    us_redis.pause();
    let mut admitted = 0;
    for _ in 0..4 {
        let started = Instant::now();
        let d = eu.check_with("k", at(NOW)).await.unwrap();
        assert!(started.elapsed() < TIMEOUT / 2, "the local share needs no lender");
        admitted += d.allowed as u64;
    }
    for _ in 0..6 {
        let started = Instant::now();
        let d = eu.check_with("k", at(NOW)).await.unwrap();
        assert!(
            started.elapsed() < 2 * TIMEOUT,
            "a hung lender costs at most the timeout: {:?}",
            started.elapsed()
        );
        assert!(!d.allowed && d.source == Source::Store, "{d:?}");
    }
    assert_eq!(admitted, 4, "eu's share of 8");
    // The first 3 timed out; then the lender's breaker is open and nothing waits.
    assert_eq!(borrows(&eu, "us", "unavailable"), 6);
    let started = Instant::now();
    assert!(!eu.check_with("k", at(NOW)).await.unwrap().allowed);
    assert!(started.elapsed() < TIMEOUT / 2, "breaker open: {:?}", started.elapsed());
    us_redis.resume();

    // Killed: refused connections, same outcome, on a fresh key and a fresh limiter.
    us_redis.kill();
    let eu = limiter(policy, regions, "eu");
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += eu.check_with("other", at(NOW)).await.unwrap().allowed as u64;
    }
    assert_eq!(admitted, 4);
    assert_eq!(borrows(&eu, "us", "granted"), 0);
    assert_eq!(borrows(&eu, "us", "unavailable"), 6);
}

/// A key in a penalty block is denied without asking another region.
#[tokio::test]
async fn a_penalty_denial_does_not_borrow() {
    let (eu_redis, us_redis) = (RedisServer::start(), RedisServer::start());
    let regions = json!({ "eu": eu_redis.url(), "us": us_redis.url() });
    let policy = json!({
        "algorithm": "fixed_window", "rate": "4/min",
        "penalty": { "threshold": 3, "within": "1m", "cooldowns": ["10m"] }
    });
    let eu = limiter(policy, regions, "eu");
    let mut sources = Vec::new();
    for _ in 0..8 {
        let d = eu.check_with("k", at(NOW)).await.unwrap();
        sources.push((d.allowed, d.source));
    }
    // 2 of eu's own, 2 borrowed (eu's share denied them: 2 denials toward
    // the penalty), then the third denial blocks the key: no more borrowing.
    assert_eq!(sources.iter().filter(|(a, _)| *a).count(), 4, "{sources:?}");
    assert_eq!(borrows(&eu, "us", "granted"), 2);
    assert_eq!(borrows(&eu, "us", "refused"), 0);
    assert!(
        sources[4..].iter().all(|s| *s == (false, Source::Penalty)),
        "{sources:?}"
    );
    // us has quota again; a blocked key still does not borrow it.
    us_redis.command("FLUSHALL");
    let d = eu.check_with("k", at(NOW + 1)).await.unwrap();
    assert_eq!((d.allowed, d.source), (false, Source::Penalty));
    assert_eq!(borrows(&eu, "us", "granted") + borrows(&eu, "us", "refused"), 2);
}

#[test]
fn config_errors_name_the_field_and_value() {
    let policy = json!({ "algorithm": "gcra", "rate": "10/s", "burst": 10 });
    let two = json!({ "eu": "redis://127.0.0.1:1", "us": "redis://127.0.0.1:2" });
    let error = |options: Value| Limiter::from_value(&options).err().expect("an error").to_string();
    let cases = [
        (
            json!({ "policy": policy, "regions": { "eu": "redis://127.0.0.1:1" }, "region": "eu" }),
            "regions",
        ),
        (json!({ "policy": policy, "regions": two, "region": "ap" }), "region"),
        (json!({ "policy": policy, "regions": two }), "region"),
        (json!({ "policy": policy, "region": "eu" }), "region"),
        (
            json!({ "policy": policy, "regions": { "eu": { "store": "redis://127.0.0.1:1", "share": 0.7 }, "us": { "store": "redis://127.0.0.1:2", "share": 0.7 } }, "region": "eu" }),
            "regions",
        ),
        (
            json!({ "policy": policy, "regions": { "eu": { "store": "redis://127.0.0.1:1", "share": 1.5 }, "us": "redis://127.0.0.1:2" }, "region": "eu" }),
            "regions.eu.share",
        ),
        (
            json!({ "policy": policy, "regions": { "eu": "memory", "us": "redis://127.0.0.1:2" }, "region": "eu" }),
            "regions.eu.store",
        ),
        (
            json!({ "policy": policy, "regions": two, "region": "eu", "store": "redis://127.0.0.1:9" }),
            "store",
        ),
        (
            json!({ "policy": policy, "regions": two, "region": "eu", "overrides": true }),
            "overrides",
        ),
        (
            json!({ "policy": { "algorithm": "concurrency", "limit": 4 }, "regions": two, "region": "eu" }),
            "policies[0]",
        ),
        (
            json!({ "policy": { "algorithm": "fixed_window", "rate": "1/s" }, "regions": two, "region": "eu" }),
            "regions.",
        ),
    ];
    for (options, field) in cases {
        let message = error(options.clone());
        assert!(message.contains(field), "{options}: {message}");
        println!("{message}");
    }
    // Valid: the same store given as `store` too, and a rules file with the region from the environment.
    Limiter::from_value(&json!({ "policy": policy, "regions": two, "region": "us", "store": "redis://127.0.0.1:2" }))
        .unwrap();
}

/// `count: failed`: a borrowed admission whose response counts not is given
/// back to its lender, a local one to the local store; the failures alone
/// spend the global limit.
#[tokio::test]
async fn a_refund_reaches_the_region_that_lent() {
    let (eu_redis, us_redis) = (RedisServer::start(), RedisServer::start());
    let eu = Limiter::from_value(&json!({
        "policy": { "algorithm": "fixed_window", "rate": "4/min" },
        "count": "failed",
        "regions": { "eu": eu_redis.url(), "us": us_redis.url() },
        "region": "eu",
    }))
    .unwrap();
    let request = |n: i64| RequestInfo {
        method: "POST".into(),
        path: "/login".into(),
        peer: Some("203.0.113.7".into()),
        now_ms: Some(NOW + n),
        ..RequestInfo::default()
    };
    // Two failures spend eu's share of 2.
    for n in 0..2 {
        let o = eu.check_request(&request(n)).await.unwrap();
        assert_eq!(o.status, None);
        assert_eq!(eu.complete(&o.completion.unwrap(), Some(401)).await.unwrap(), 0);
    }
    // Successes are borrowed from us, and each is given back to us.
    for n in 2..12 {
        let o = eu.check_request(&request(n)).await.unwrap();
        assert_eq!(o.status, None, "success {n}: us's share was given back each time");
        assert_eq!(eu.complete(&o.completion.unwrap(), Some(200)).await.unwrap(), 1);
    }
    assert_eq!(borrows(&eu, "us", "granted"), 10);
    // Two more failures take us's share; then the global 4 are spent.
    for n in 12..14 {
        let o = eu.check_request(&request(n)).await.unwrap();
        assert_eq!(o.status, None);
        assert_eq!(eu.complete(&o.completion.unwrap(), Some(500)).await.unwrap(), 0);
    }
    assert_eq!(eu.check_request(&request(14)).await.unwrap().status, Some(429));
}
