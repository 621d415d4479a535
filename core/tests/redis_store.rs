//! The Redis store's contract: key layout and TTLs, the server's clock,
//! the function library and the script fallback (reloaded when lost), a key holding the wrong type, composite atomicity.

mod support;

use polylimit::{CheckOptions, Error, Limiter, LimiterConfig, Policy, Source};
use serde_json::json;
use support::ForDecisions;

fn policy(v: serde_json::Value) -> Policy {
    Policy::from_value(&v, "").unwrap()
}

fn pttl(redis: &support::RedisServer, key: &str) -> i64 {
    let reply = redis.command(&format!("PTTL {key}")).unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

#[tokio::test]
async fn keys_follow_the_layout_and_expire_when_idle() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"rate": "10/s", "burst": 10, "name": "api"})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    // Redis expires a key whose TTL runs out; what the store owns is the
    // TTL it sets, so the test pins it instead of sleeping until it ends:
    // exactly 1100 ms when set, less only the time since the check started.
    let started = std::time::Instant::now();
    let d = limiter.check("user:{42}").await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 9, 100));
    let key = "polylimit:token_bucket:api:p1000:{user:%7B42%7D}";
    let ttl = pttl(&redis, key);
    let elapsed = started.elapsed().as_millis() as i64;
    assert!(
        (1100 - elapsed - 1..=1100).contains(&ttl),
        "TTL {ttl} must be the time back to idle (100 ms) plus the 1 s margin ({elapsed} ms elapsed)"
    );
    assert!(ttl > 0, "an idle key vanishes: it carries an expiry, got PTTL {ttl}");
}

#[tokio::test]
async fn the_server_clock_decides_without_now_ms() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"algorithm": "fixed_window", "rate": "5/1h"})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    let result = limiter.check_all("k", CheckOptions::default()).await.unwrap();
    let reply = redis.command("TIME").unwrap();
    let server_secs: i64 = reply.lines().nth(2).unwrap().parse().unwrap();
    assert!(
        (result.now_ms / 1000 - server_secs).abs() <= 1,
        "now_ms {} is Redis TIME {server_secs}",
        result.now_ms
    );
    let d = result.decision();
    let window_end = result.now_ms - result.now_ms % 3_600_000 + 3_600_000;
    assert_eq!(d.reset_after_ms as i64, window_end - result.now_ms);
}

/// Redis's `TIME` in ms.
fn server_ms(redis: &support::RedisServer) -> i64 {
    let reply = redis.command("TIME").unwrap();
    let mut lines = reply.lines().skip(2).step_by(2);
    let secs: i64 = lines.next().unwrap().parse().unwrap();
    let micros: i64 = lines.next().unwrap().parse().unwrap();
    secs * 1000 + micros / 1000
}

// A function call (a shape's or the general check's) sends the store's
// estimate of the server's clock: TIME runs on a connection's first call and
// about once a second after, not per decision; the estimate stays on the
// server's clock.
#[tokio::test]
async fn decisions_send_the_server_clock_instead_of_asking_time() {
    let redis = support::RedisServer::start();
    let started = std::time::Instant::now();
    let algorithms = ["fixed_window", "token_bucket", "gcra", "sliding_window_counter"];
    for algorithm in algorithms {
        let policy = policy(json!({"algorithm": algorithm, "rate": "1000000/h"}));
        let limiter = Limiter::new(LimiterConfig::new(policy).with_store(redis.url()).for_decisions()).unwrap();
        for _ in 0..1000 {
            assert!(limiter.check("k").await.unwrap().allowed);
        }
        let before = server_ms(&redis);
        let now = limiter.check_all("k", CheckOptions::default()).await.unwrap().now_ms;
        let after = server_ms(&redis);
        // The error is half the sample's round trip plus the drift since: a
        // few ms on a loaded machine.
        assert!(
            (before - 50..=after + 50).contains(&now),
            "{algorithm}: now_ms {now} is Redis TIME ({before}..{after})"
        );
    }
    // One sample per limiter's connection, one more per second elapsed (the
    // test's own TIME commands aside).
    let samples = 3 * (1 + started.elapsed().as_secs() + 1);
    let time = redis.calls("time") - 3 * 2;
    assert!(
        time <= samples,
        "{time} TIME calls for 3003 decisions (at most {samples})"
    );
}

// Two limiters (two stores, each with its own estimate) on one Redis share
// a key's window: one count, and the same window end.
#[tokio::test]
async fn limiters_sharing_a_redis_agree_on_the_window() {
    let redis = support::RedisServer::start();
    let policy = policy(json!({"algorithm": "fixed_window", "rate": "10/h"}));
    let limiters: Vec<Limiter> = (0..2)
        .map(|_| {
            Limiter::new(
                LimiterConfig::new(policy.clone())
                    .with_store(redis.url())
                    .for_decisions(),
            )
            .unwrap()
        })
        .collect();
    let mut ends = vec![];
    for n in 0..12 {
        let result = limiters[n % 2].check_all("k", CheckOptions::default()).await.unwrap();
        let d = result.decision();
        assert_eq!(
            (d.allowed, d.remaining),
            (n < 10, 9u64.saturating_sub(n as u64)),
            "check {n}"
        );
        ends.push(result.now_ms + d.reset_after_ms as i64);
    }
    let window_end = ends[0];
    assert_eq!(window_end % 3_600_000, 0, "a window ends on the hour");
    assert!(
        ends.iter().all(|&e| e == window_end),
        "one window for both limiters: {ends:?}"
    );
}

#[tokio::test]
async fn decisions_are_a_function_reloaded_when_the_server_loses_it() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"rate": "1/h", "burst": 3})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    assert_eq!(limiter.check("k").await.unwrap().remaining, 2);
    let library = &polylimit::library().function;
    assert!(redis.command("FUNCTION LIST").unwrap().contains(library.as_str()));
    assert_eq!(
        (redis.calls("fcall"), redis.calls("evalsha")),
        (2, 0),
        "one FCALL before the load, one after"
    );
    assert_eq!(redis.command("FUNCTION FLUSH").unwrap(), "+OK\r\n");
    let d = limiter.check("k").await.unwrap();
    assert_eq!(
        (d.source, d.remaining),
        (Source::Store, 1),
        "the library is loaded again"
    );
    assert_eq!((redis.calls("fcall"), redis.calls("evalsha")), (4, 0));
}

/// The newest SLOWLOG entry names the function called (every command is
/// logged at `slowlog-log-slower-than 0`).
fn last_function(redis: &support::RedisServer) -> String {
    let log = redis.command("SLOWLOG GET 1").unwrap();
    let name = log
        .split("\r\n")
        .skip_while(|l| !l.eq_ignore_ascii_case("FCALL"))
        .nth(2);
    name.unwrap_or_else(|| panic!("no FCALL in {log:?}")).to_string()
}

#[tokio::test]
async fn the_common_shapes_each_take_a_function_of_their_own() {
    let redis = support::RedisServer::start();
    redis.command("CONFIG SET slowlog-log-slower-than 0").unwrap();
    let general = &polylimit::library().function;
    for (algorithm, function) in [
        ("fixed_window", format!("{general}_fixed_window")),
        ("token_bucket", format!("{general}_token_bucket")),
        ("gcra", format!("{general}_gcra")),
        ("sliding_window_counter", general.clone()),
    ] {
        let policy = policy(json!({"algorithm": algorithm, "rate": "10/h"}));
        let limiter = Limiter::new(LimiterConfig::new(policy).with_store(redis.url()).for_decisions()).unwrap();
        assert_eq!(limiter.check("k").await.unwrap().remaining, 9, "{algorithm}");
        assert_eq!(last_function(&redis), function, "{algorithm}");
        // A peek is not a common shape: the general check decides it.
        assert_eq!(limiter.peek("k").await.unwrap().remaining, 8, "{algorithm}");
        assert_eq!(&last_function(&redis), general, "{algorithm} peek");
    }
}

#[tokio::test]
async fn without_functions_decisions_are_a_script_reloaded_on_noscript() {
    let redis = support::RedisServer::start();
    // A user whose ACL refuses functions (as a Redis before 7 lacks them).
    let reply = redis
        .command("ACL SETUSER scripts on >pw ~* &* +@all -fcall -function")
        .unwrap();
    assert_eq!(reply, "+OK\r\n");
    let url = redis.url().replace("redis://", "redis://scripts:pw@");
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"rate": "1/h", "burst": 3})))
            .with_store(url)
            .for_decisions(),
    )
    .unwrap();
    assert_eq!(limiter.check("k").await.unwrap().remaining, 2);
    assert_eq!(redis.command("SCRIPT FLUSH").unwrap(), "+OK\r\n");
    let d = limiter.check("k").await.unwrap();
    assert_eq!(
        (d.source, d.remaining),
        (Source::Store, 1),
        "NOSCRIPT reloads the script"
    );
    assert_eq!(redis.calls("fcall"), 0, "refused once, never tried again");
    assert!(redis.calls("evalsha") >= 2);
}

#[tokio::test]
async fn a_key_of_the_wrong_type_is_reported_for_that_key_only() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"rate": "10/s"})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    redis
        .command("HSET polylimit:token_bucket:default:p1000:{hash} a 1")
        .unwrap();
    redis
        .command("SET polylimit:token_bucket:default:p1000:{junk} hello")
        .unwrap();
    for key in ["hash", "junk"] {
        match limiter.check(key).await {
            Err(Error::Store {
                key: store_key,
                message,
            }) => {
                assert!(store_key.contains(&format!("{{{key}}}")), "{store_key}");
                assert!(
                    message.contains("WRONGTYPE") || message.contains("POLYLIMIT_STATE"),
                    "{message}"
                );
            }
            other => panic!("{key}: expected a store error, got {other:?}"),
        }
    }
    // Other keys are unaffected, and the breaker stays closed.
    for _ in 0..10 {
        assert_eq!(limiter.check("fine").await.unwrap().source, Source::Store);
    }
    assert_eq!(limiter.breaker_state(), polylimit::BreakerState::Closed);
}

/// A fixed window's fast path reads its one-integer state without a check
/// of its own: a short foreign value still gets the error naming the key.
#[tokio::test]
async fn a_foreign_value_on_a_fixed_window_key_is_reported_for_that_key() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"algorithm": "fixed_window", "rate": "10/s"})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    let at = CheckOptions {
        cost: 1,
        now_ms: Some(1_000_000_000),
    };
    // The fast path is what decides here: a second admission is one INCRBY.
    limiter.check_with("fine", at).await.unwrap();
    limiter.check_with("fine", at).await.unwrap();
    assert_eq!(redis.calls("incrby"), 1);
    for (key, value) in [("short", "hello"), ("long", "hello1234"), ("tail", "123abcdef")] {
        redis
            .command(&format!("SET polylimit:fixed_window:default:p1000:{{{key}}} {value}"))
            .unwrap();
        match limiter.check_with(key, at).await {
            Err(Error::Store {
                key: store_key,
                message,
            }) => {
                assert!(store_key.contains(&format!("{{{key}}}")), "{store_key}");
                assert!(message.contains("POLYLIMIT_STATE"), "{message}");
            }
            other => panic!("{key}: expected a store error, got {other:?}"),
        }
        assert_eq!(
            redis
                .command(&format!("GET polylimit:fixed_window:default:p1000:{{{key}}}"))
                .unwrap(),
            format!("${}\r\n{value}\r\n", value.len()),
            "{key}: left as it was"
        );
    }
    assert_eq!(limiter.check("fine").await.unwrap().source, Source::Store);
    assert_eq!(limiter.breaker_state(), polylimit::BreakerState::Closed);
}

#[tokio::test]
async fn state_is_packed_and_the_text_form_of_earlier_versions_is_still_read() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"rate": "10/s"})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    let at = CheckOptions {
        cost: 1,
        now_ms: Some(1_000),
    };
    // Written by an earlier version: 5 tokens (scaled by the period) at t = 1000.
    redis
        .command("SET polylimit:token_bucket:default:p1000:{old} \"5000 1000 0\" PX 60000")
        .unwrap();
    let d = limiter.check_with("old", at).await.unwrap();
    assert!(d.allowed && d.remaining == 4 && d.source == Source::Store, "{d:?}");
    // Written back packed: a marker byte, three 64-bit cells and the key's expiry.
    assert_eq!(
        redis
            .command("STRLEN polylimit:token_bucket:default:p1000:{old}")
            .unwrap(),
        ":33\r\n"
    );
    let d = limiter.check_with("old", at).await.unwrap();
    assert!(d.allowed && d.remaining == 3, "{d:?}");
}

/// How far Redis's cached clock may lag when a command sets an expiry.
const SERVER_CLOCK_SLACK_MS: i64 = 10;

#[tokio::test]
async fn a_token_bucket_and_gcra_keep_their_expiry_while_it_covers_the_refill() {
    let redis = support::RedisServer::start();
    // The remaining after the clock went back differs: GCRA's TAT stays ahead.
    for (algorithm, remaining_back) in [("token_bucket", 8), ("gcra", 3)] {
        let limiter = Limiter::new(
            LimiterConfig::new(policy(json!({"algorithm": algorithm, "rate": "10/s", "name": "p"})))
                .with_store(redis.url())
                .for_decisions(),
        )
        .unwrap();
        let fingerprint = if algorithm == "gcra" { "p1000c10" } else { "p1000" };
        let key = format!("polylimit:{algorithm}:p:{fingerprint}:{{k}}");
        let check = |now_ms| {
            let limiter = &limiter;
            async move {
                let at = CheckOptions {
                    cost: 1,
                    now_ms: Some(now_ms),
                };
                limiter.check_with("k", at).await.unwrap()
            }
        };
        // PTTL is `ms` less at most the time since `started`, and the few ms
        // Redis's cached clock may lag when it sets an expiry on a loaded
        // host (seen: 4 ms less after 1 ms). A rewritten expiry is off by far more.
        let ttl_is = |ms: i64, started: std::time::Instant| {
            let ttl = pttl(&redis, &key);
            let elapsed = started.elapsed().as_millis() as i64;
            assert!(
                (ms - elapsed - SERVER_CLOCK_SLACK_MS..=ms).contains(&ttl),
                "{algorithm}: PTTL {ttl}, not {ms} ({elapsed} ms elapsed)"
            );
        };
        redis.command("CONFIG RESETSTAT").unwrap();
        let sets = || (redis.calls("set"), redis.calls("setrange"));
        // A new key: exactly the time back to full (100 ms) plus the 1 s margin.
        let started = std::time::Instant::now();
        assert_eq!(check(1_000).await.remaining, 9);
        ttl_is(1_100, started);
        // Full 200 ms on: past that expiry, so a SET PX again, with 1 s of
        // slack for the admissions that follow (full at 1200, + 1 s + 1 s).
        let started = std::time::Instant::now();
        assert_eq!(check(1_000).await.remaining, 8);
        ttl_is(2_200, started);
        assert_eq!(sets(), (2, 0));
        // Within the slack: the cells change in place, the expiry stays.
        // (Set by hand here, so a SET PX would show.)
        let started = std::time::Instant::now();
        redis.command(&format!("PEXPIRE {key} 777777")).unwrap();
        for remaining in (0..8).rev() {
            assert_eq!(check(1_000).await.remaining, remaining);
        }
        ttl_is(777_777, started);
        assert_eq!(sets(), (2, 8));
        // Full again at 2000: a later admission is past the expiry it stored (3200).
        let started = std::time::Instant::now();
        let d = check(2_500).await;
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 9, 100));
        ttl_is(2_600 + 2_000 - 2_500, started);
        // The clock gone back: the TTL is set again, exactly (back to full
        // at 2700, 700 ms from 2000, plus the margin).
        let started = std::time::Instant::now();
        let d = check(2_000).await;
        assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, remaining_back, 700));
        ttl_is(1_700, started);
        assert_eq!(sets(), (4, 8));
    }
}

#[tokio::test]
async fn a_fixed_window_is_one_integer_that_an_admission_bumps_in_place() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(
            json!({"algorithm": "fixed_window", "rate": "3/min", "name": "fw"}),
        ))
        .with_store(redis.url())
        .for_decisions(),
    )
    .unwrap();
    let key = "polylimit:fixed_window:fw:p60000:{k}";
    let at = |now_ms| CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    };
    // Windows of a minute: the key's expiry (real time) outlasts the test on a loaded host.
    let get = || redis.command(&format!("GET {key}")).unwrap();
    // created_ms * 10^6 + count: the first admission's ms, then the count.
    let d = limiter.check_with("k", at(1_500)).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 2, 58_500));
    assert_eq!(get(), "$10\r\n1500000001\r\n");
    // The same window: one INCRBY (it keeps the expiry), no SET.
    let d = limiter.check_with("k", at(1_700)).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.reset_after_ms), (true, 1, 58_300));
    assert_eq!(get(), "$10\r\n1500000002\r\n");
    assert_eq!((redis.calls("set"), redis.calls("incrby")), (1, 1));
    // The general check (a peek: the remaining after it) reads it; a denial writes nothing.
    assert_eq!(limiter.peek_with("k", at(1_800)).await.unwrap().remaining, 0);
    limiter.check_with("k", at(1_900)).await.unwrap();
    let d = limiter.check_with("k", at(1_950)).await.unwrap();
    assert_eq!((d.allowed, d.remaining, d.retry_after_ms), (false, 0, Some(58_050)));
    assert_eq!(get(), "$10\r\n1500000003\r\n");
    // The next window starts at its start (60 000 ms).
    limiter.check_with("k", at(60_100)).await.unwrap();
    assert_eq!(get(), "$11\r\n60000000001\r\n");
    // Counts of 10^6 and up keep the packed cells.
    let big = Limiter::new(
        LimiterConfig::new(policy(
            json!({"algorithm": "fixed_window", "rate": "2000000/min", "name": "big"}),
        ))
        .with_store(redis.url())
        .for_decisions(),
    )
    .unwrap();
    let d = big
        .check_with(
            "k",
            CheckOptions {
                cost: 1_500_000,
                now_ms: Some(1_500),
            },
        )
        .await
        .unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 500_000));
    assert_eq!(
        redis.command("STRLEN polylimit:fixed_window:big:p60000:{k}").unwrap(),
        ":25\r\n"
    );
    assert_eq!(big.check_with("k", at(1_600)).await.unwrap().remaining, 499_999);
}

#[tokio::test]
async fn composite_policies_charge_nothing_when_one_denies() {
    let redis = support::RedisServer::start();
    let mut config = LimiterConfig::new(policy(json!({"rate": "100/d", "name": "per_day"})));
    config.policies.push(policy(
        json!({"algorithm": "fixed_window", "rate": "2/1m", "name": "per_minute"}),
    ));
    config.store = redis.url();
    config.timeout = support::DECISIONS;
    let limiter = Limiter::new(config).unwrap();
    let at = |now_ms| CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    };
    for _ in 0..2 {
        assert!(limiter.check_all("k", at(60_000)).await.unwrap().allowed);
    }
    for _ in 0..5 {
        let r = limiter.check_all("k", at(60_000)).await.unwrap();
        assert!(!r.allowed);
        assert!(r.decisions[0].allowed && !r.decisions[1].allowed);
        assert_eq!(r.decisions[0].remaining, 97, "peeked, not charged");
        assert_eq!(r.decision().retry_after_ms, Some(60_000));
    }
    let r = limiter.check_all("k", at(120_000)).await.unwrap();
    assert!(r.allowed);
    assert_eq!(r.decisions[0].remaining, 97, "per_day charged 3 times in all");
}

#[tokio::test]
async fn reset_forgets_a_key() {
    let redis = support::RedisServer::start();
    let limiter = Limiter::new(
        LimiterConfig::new(policy(json!({"algorithm": "sliding_window_log", "rate": "1/h"})))
            .with_store(redis.url())
            .for_decisions(),
    )
    .unwrap();
    assert!(limiter.check("k").await.unwrap().allowed);
    assert!(!limiter.check("k").await.unwrap().allowed);
    limiter.reset("k").await.unwrap();
    assert!(limiter.check("k").await.unwrap().allowed);
}

#[tokio::test]
async fn long_keys_are_stored_hashed() {
    let redis = support::RedisServer::start();
    let config = LimiterConfig::new(policy(json!({
        "algorithm": "sliding_window_log", "rate": "1/h",
        "penalty": {"threshold": 1, "within": "1m", "cooldowns": ["1s"]}
    })))
    .with_store(redis.url())
    .for_decisions();
    let limiter = Limiter::new(config).unwrap();
    let at = CheckOptions {
        cost: 1,
        now_ms: Some(1_000),
    };
    let long = "k".repeat(100 * 1024);
    assert!(limiter.check_with(&long, at).await.unwrap().allowed);
    assert!(
        !limiter.check_with(&long, at).await.unwrap().allowed,
        "the long key is limited"
    );
    let reply = redis.command("KEYS *").unwrap();
    let keys: Vec<&str> = reply.lines().filter(|l| l.starts_with("polylimit:")).collect();
    assert_eq!(keys.len(), 3, "state, log and penalty record: {reply:.300}");
    for key in keys {
        assert!(key.len() < 120 && key.contains(":{%#"), "{key:.300}");
    }
}
