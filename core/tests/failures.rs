//! Failure handling against a real redis-server: SIGKILL under load and
//! restart, SIGSTOP (the hang), a refused port. Checks never raise; each
//! policy's `on_store_error` answers; decisions return to the store.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use polylimit::breaker::ManualClock;
use polylimit::{BreakerState, Limiter, LimiterConfig, Policy, Source};
use serde_json::json;
use tokio::sync::Mutex;

fn limiter(url: &str, on_store_error: &str, cooldown_ms: u64) -> Limiter {
    let policy = Policy::from_value(&json!({"rate": "1000/s", "on_store_error": on_store_error}), "").unwrap();
    let mut config = LimiterConfig::new(policy).with_store(url);
    config.breaker.cooldown = Duration::from_millis(cooldown_ms);
    Limiter::new(config).unwrap()
}

/// Puts `limiter`'s store breaker on a clock the test moves: a cooldown ends
/// when the test says so, never by sleeping.
fn manual_clock(limiter: &Limiter) -> ManualClock {
    let clock = ManualClock::new();
    limiter.set_breaker_clock(Arc::new(clock.clone()));
    clock
}

#[derive(Default)]
struct Log {
    by_source: BTreeMap<&'static str, usize>,
    slowest: Duration,
    errors: usize,
    first_store: Option<Instant>,
}

/// 50 callers checking in a loop until `stop`; records sources and latency.
async fn load(limiter: &Limiter, log: Arc<Mutex<Log>>, until: Instant) {
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let limiter = limiter.clone();
            let log = log.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    let started = Instant::now();
                    let result = limiter.check(&format!("caller-{i}")).await;
                    let elapsed = started.elapsed();
                    let mut log = log.lock().await;
                    log.slowest = log.slowest.max(elapsed);
                    match result {
                        Ok(d) => {
                            *log.by_source.entry(d.source.as_str()).or_default() += 1;
                            if d.source == Source::Store && log.first_store.is_none() {
                                log.first_store = Some(Instant::now());
                            }
                        }
                        Err(_) => log.errors += 1,
                    }
                    drop(log);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

// The breaker runs on a manual clock: its 500 ms cooldown ends once in the
// middle of the outage (a probe round that fails) and once right after the
// restart, when the test moves the clock, not while the load runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_then_restart() {
    let mut redis = support::RedisServer::start();
    let cooldown = Duration::from_millis(500);
    // A store timeout far above any check's time on a loaded CI machine, so
    // a slow answer while Redis is up is not a fallback; a killed server
    // refuses at once, and the outage bound below stays under this timeout.
    let timeout = Duration::from_secs(2);
    let limiter = limiter_with(&redis.url(), "local", json!({"cooldown": "500ms", "timeout": "2s"}));
    let clock = manual_clock(&limiter);

    let before = Arc::new(Mutex::new(Log::default()));
    load(&limiter, before.clone(), Instant::now() + Duration::from_millis(500)).await;
    let before = before.lock().await;
    assert_eq!(before.errors, 0);
    assert_eq!(before.by_source.keys().copied().collect::<Vec<_>>(), ["store"]);

    redis.kill();
    let outage = Arc::new(Mutex::new(Log::default()));
    let outage_len = Duration::from_secs(
        std::env::var("OUTAGE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2),
    );
    load(&limiter, outage.clone(), Instant::now() + outage_len / 2).await;
    assert_eq!(limiter.breaker_state(), BreakerState::Open, "the outage opened it");
    clock.advance(cooldown);
    assert_eq!(limiter.breaker_state(), BreakerState::HalfOpen);
    load(&limiter, outage.clone(), Instant::now() + outage_len / 2).await;
    let outage = outage.lock().await;
    assert_eq!(outage.errors, 0, "no check raises while Redis is down");
    assert_eq!(
        outage.by_source.keys().copied().collect::<Vec<_>>(),
        ["local"],
        "{:?}",
        outage.by_source
    );
    assert_eq!(
        limiter.breaker_state(),
        BreakerState::Open,
        "the probes after the cooldown failed and reopened it"
    );
    assert!(
        outage.slowest < timeout / 2,
        "slowest check during the outage: {:?} (a refused store must not wait out the {timeout:?} timeout)",
        outage.slowest
    );

    redis.restart();
    let restarted = Instant::now();
    clock.advance(cooldown);
    let after = Arc::new(Mutex::new(Log::default()));
    load(&limiter, after.clone(), Instant::now() + Duration::from_secs(3)).await;
    let after = after.lock().await;
    assert_eq!(after.errors, 0);
    let back = after
        .first_store
        .expect("decisions return to the store within 3 s of a restart")
        - restarted;
    assert_eq!(limiter.breaker_state(), BreakerState::Closed);
    println!(
        "outage of {outage_len:?} under 50 callers: checks by source {:?}, slowest {:?}; \
         restart → first store decision in {back:?}; after: {:?}",
        outage.by_source, outage.slowest, after.by_source
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_every_check_returns_within_the_timeout() {
    let redis = support::RedisServer::start();
    // A 1 s timeout: the bounds below are fractions of it, so a loaded CI
    // host (5x slower) passes and a wait on the store still fails.
    let timeout = Duration::from_secs(1);
    let limiter = limiter_with(&redis.url(), "fail_open", json!({"cooldown": "300ms", "timeout": "1s"}));
    let clock = manual_clock(&limiter);
    assert_eq!(limiter.check("warm").await.unwrap().source, Source::Store);

    redis.pause();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let d = limiter.check(&format!("k{i}")).await.unwrap();
                (d, started.elapsed())
            })
        })
        .collect();
    for t in tasks {
        let (d, elapsed) = t.await.unwrap();
        assert_eq!(d.source, Source::FailOpen);
        assert!(d.allowed);
        assert!(
            // The timeout, plus room for a loaded machine; a hang lasts until SIGCONT.
            elapsed < 2 * timeout,
            "a hung store answered after {elapsed:?}"
        );
    }
    assert_eq!(limiter.breaker_state(), BreakerState::Open);
    let started = Instant::now();
    assert_eq!(limiter.check("open").await.unwrap().source, Source::FailOpen);
    assert!(
        started.elapsed() < timeout / 2,
        "an open breaker does not wait on the store"
    );

    redis.resume();
    assert_eq!(
        limiter.check("again").await.unwrap().source,
        Source::FailOpen,
        "open until its cooldown ends, Redis back or not"
    );
    // The breaker's clock ends the cooldown; a probe that still finds Redis
    // catching up reopens it, and the next cooldown is ended the same way.
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        clock.advance(Duration::from_millis(300));
        let d = limiter.check("again").await.unwrap();
        if d.source == Source::Store {
            break;
        }
        assert!(Instant::now() < deadline, "still {:?} 3 s after SIGCONT", d.source);
    }
}

#[tokio::test]
async fn a_refused_port_from_the_start_fails_closed() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let limiter = limiter(&format!("redis://127.0.0.1:{port}"), "fail_closed", 30_000);
    for i in 0..10 {
        let d = limiter.check("k").await.unwrap();
        assert_eq!((d.allowed, d.source), (false, Source::FailClosed), "check {i}");
        assert!(d.retry_after_ms.is_some_and(|ms| ms >= 1000), "{d:?}");
    }
    assert_eq!(limiter.breaker_state(), BreakerState::Open, "5 failures opened it");
    let metrics = limiter.metrics_text();
    assert!(metrics.contains("polylimit_store_errors_total 5\n"), "{metrics}");
    assert!(metrics.contains("polylimit_breaker_state 1\n"), "{metrics}");
}

#[tokio::test]
async fn fallbacks_follow_each_policy() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let local = limiter(&url, "local", 30_000);
    let d = local.check("k").await.unwrap();
    assert_eq!((d.allowed, d.source, d.remaining), (true, Source::Local, 999));
    let open = limiter(&url, "fail_open", 30_000);
    let d = open.check("k").await.unwrap();
    assert_eq!((d.allowed, d.source), (true, Source::FailOpen));
}

/// A limiter from the options every binding passes.
fn limiter_with(url: &str, on_store_error: &str, options: serde_json::Value) -> Limiter {
    let mut options = options;
    options["policy"] = json!({"rate": "1000/s", "on_store_error": on_store_error});
    options["store"] = json!(url);
    Limiter::from_value(&options).unwrap()
}

// The breaker runs on a manual clock: the test ends each 50 ms cooldown by
// moving it, because cooldowns ending is what it tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_probes_do_not_wedge_the_breaker() {
    let redis = support::RedisServer::start();
    let limiter = limiter_with(
        &redis.url(),
        "local",
        json!({"cooldown": "50ms", "timeout": "100ms", "connect_timeout": "200ms"}),
    );
    let clock = manual_clock(&limiter);
    assert_eq!(limiter.check("warm").await.unwrap().source, Source::Store);

    redis.pause();
    let failing: Vec<_> = (0..5)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check(&format!("k{i}")).await.unwrap().source })
        })
        .collect();
    for t in failing {
        assert_eq!(t.await.unwrap(), Source::Local);
    }
    assert_eq!(limiter.breaker_state(), BreakerState::Open);

    // Half-open: three probes start, and their callers give up (a client
    // disconnected, a deadline passed): the futures are dropped.
    clock.advance(Duration::from_millis(50));
    assert_eq!(limiter.breaker_state(), BreakerState::HalfOpen);
    let probes = async { tokio::join!(limiter.check("p1"), limiter.check("p2"), limiter.check("p3")) };
    assert!(tokio::time::timeout(Duration::from_millis(20), probes).await.is_err());
    assert_eq!(
        limiter.breaker_state(),
        BreakerState::Open,
        "a cancelled probe is a failure: the breaker reopens"
    );

    redis.resume();
    assert_eq!(
        limiter.check("healthy").await.unwrap().source,
        Source::Local,
        "no probe before the new cooldown ends"
    );
    clock.advance(Duration::from_millis(50));
    let d = limiter.check("healthy").await.unwrap();
    assert_eq!(
        d.source,
        Source::Store,
        "the next call after the cooldown probes the store"
    );
}

// Behind a stuck proxy (or a half-open TCP connection) the socket stays open
// and silent. A timeout must drop it so the next call opens a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_replaced() {
    let redis = support::RedisServer::start();
    let proxy = support::Proxy::start(redis.port).await;
    let limiter = limiter_with(
        &proxy.url(),
        "local",
        json!({"failure_threshold": 1, "cooldown": "50ms", "timeout": "100ms", "connect_timeout": "500ms"}),
    );
    let clock = manual_clock(&limiter);
    assert_eq!(limiter.check("warm").await.unwrap().source, Source::Store);

    proxy.black_hole();
    let started = Instant::now();
    let d = limiter.check("k").await.unwrap();
    assert_eq!(d.source, Source::Local);
    assert!(
        // The 100 ms timeout, with room for a loaded machine: without it the
        // call waits on the silent socket for good.
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(limiter.breaker_state(), BreakerState::Open);

    // New connections through the proxy forward: the probe after the
    // cooldown must use one, not the silent socket. The test ends the 50 ms
    // cooldown on the breaker's clock: the probe that only its end lets
    // through is what is tested.
    clock.advance(Duration::from_millis(50));
    let d = limiter.check("k").await.unwrap();
    assert_eq!(d.source, Source::Store, "the probe reused the dead connection");
}

#[tokio::test]
async fn connect_timeout_is_an_option() {
    let bad = Limiter::from_value(&json!({"policy": {"rate": "1/s"}, "connect_timeout": "soon"}));
    let message = bad.err().expect("a bad connect_timeout is refused").to_string();
    assert!(
        message.contains("connect_timeout") && message.contains("soon"),
        "{message}"
    );
    let config = LimiterConfig::from_value(&json!({"policy": {"rate": "1/s"}, "connect_timeout": "250ms"})).unwrap();
    assert_eq!(config.connect_timeout, Duration::from_millis(250));
    assert_eq!(
        LimiterConfig::from_value(&json!({"policy": {"rate": "1/s"}}))
            .unwrap()
            .connect_timeout,
        Duration::from_secs(1)
    );
}

/// A store that answers with an error about itself, not about the key:
/// the check falls back, counts a breaker failure, and raises nothing.
async fn assert_store_failure(limiter: &Limiter, what: &str) {
    for i in 0..5 {
        let d = limiter
            .check(&format!("k{i}"))
            .await
            .unwrap_or_else(|e| panic!("{what}: a check raised {e}"));
        assert_eq!(d.source, Source::Local, "{what}");
    }
    assert_eq!(
        limiter.breaker_state(),
        BreakerState::Open,
        "{what}: five failures open the breaker"
    );
    let metrics = limiter.metrics_text();
    assert!(
        metrics.contains("polylimit_store_errors_total 5\n"),
        "{what}: {metrics}"
    );
}

#[tokio::test]
async fn out_of_memory_is_a_store_failure() {
    let redis = support::RedisServer::start();
    let limiter = limiter(&redis.url(), "local", 30_000);
    assert_eq!(limiter.check("warm").await.unwrap().source, Source::Store);
    assert_eq!(
        redis.command("CONFIG SET maxmemory-policy noeviction").as_deref(),
        Some("+OK\r\n")
    );
    assert_eq!(redis.command("CONFIG SET maxmemory 1").as_deref(), Some("+OK\r\n"));
    assert_store_failure(&limiter, "OOM").await;
}

#[tokio::test]
async fn a_read_only_replica_is_a_store_failure() {
    let primary = support::RedisServer::start();
    let replica = support::RedisServer::start();
    let reply = replica.command(&format!("REPLICAOF 127.0.0.1 {}", primary.port));
    assert_eq!(reply.as_deref(), Some("+OK\r\n"));
    let limiter = limiter(&replica.url(), "local", 30_000);
    assert_store_failure(&limiter, "READONLY").await;
}

// A server that accepts TCP but never answers the handshake: every caller
// waiting on the one connect attempt shares its failure after
// `connect_timeout` (here far shorter than `timeout`), instead of each trying
// again in turn or waiting out its own `timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_waiting_on_a_failed_connect_share_its_failure() {
    let silent = support::Silent::start().await;
    let limiter = limiter_with(
        &silent.url(),
        "fail_open",
        json!({"timeout": "5s", "connect_timeout": "200ms", "failure_threshold": 100}),
    );
    let started = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check(&format!("k{i}")).await.unwrap().source })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), Source::FailOpen);
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(5),
        "20 callers on one failing connect took {elapsed:?}"
    );
    assert_eq!(silent.accepted(), 1, "one connect attempt for 20 callers");
}

// The same silent server with a connect slower than `timeout`: a check waits
// for the connect only its own `timeout`, then its policy answers, while the
// one attempt goes on in the background (no attempt per check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_waits_for_a_connect_no_longer_than_its_timeout() {
    let silent = support::Silent::start().await;
    let connect_timeout = Duration::from_secs(10);
    let limiter = limiter_with(
        &silent.url(),
        "local",
        json!({"timeout": "50ms", "connect_timeout": "10s", "failure_threshold": 100}),
    );
    let started = Instant::now();
    for i in 0..3 {
        let d = limiter.check("k").await.unwrap();
        assert_eq!(d.source, Source::Local, "check {i}");
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < connect_timeout / 2,
        "3 checks during a {connect_timeout:?} connect took {elapsed:?}"
    );
    assert_eq!(silent.accepted(), 1, "one connect attempt in flight, not one per check");
    let metrics = limiter.metrics_text();
    assert!(
        metrics.contains("polylimit_store_errors_total 3\n"),
        "each check that gave up is a store failure: {metrics}"
    );
}

// A connect slower than `timeout` but within `connect_timeout` (a TLS
// handshake across regions): the checks meanwhile fall back without
// cancelling it, and once it succeeds the store decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_connect_serves_the_checks_after_it() {
    let redis = support::RedisServer::start();
    let proxy = support::Proxy::start_delayed(redis.port, Duration::from_millis(1750)).await;
    // The call budget is generous so that a busy machine does not time out the
    // first call on the new connection (which would drop it and reconnect):
    // that call also loads the function library. The connect ends between
    // two checks' deadlines (500 ms apart), not on one.
    let limiter = limiter_with(
        &proxy.url(),
        "local",
        json!({"timeout": "500ms", "connect_timeout": "5s", "failure_threshold": 100}),
    );
    let started = Instant::now();
    let mut fell_back = 0;
    loop {
        let check = Instant::now();
        let d = limiter.check("k").await.unwrap();
        assert!(
            // Its 500 ms timeout, with room for a loaded machine; short of the 1.75 s connect.
            check.elapsed() < Duration::from_millis(1500),
            "a check waited {:?}",
            check.elapsed()
        );
        if d.source == Source::Store {
            break;
        }
        assert_eq!(d.source, Source::Local);
        fell_back += 1;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no store decision {:?} after the start of a 1.75 s connect",
            started.elapsed()
        );
    }
    assert!(
        fell_back >= 2,
        "only {fell_back} checks fell back during a 1.75 s connect"
    );
    assert_eq!(
        proxy.connections(),
        1,
        "the checks that gave up neither cancelled nor restarted the connect"
    );
}
