//! One budget per check (issue 32 item 6, SPEC §5): a check never waits
//! longer than `timeout`, whatever it asks: a regional borrow's lenders and
//! a cluster's slot groups share the one budget. A cross-slot check cut by
//! it leaves no charge on the groups it had charged. Real redis-servers,
//! paused with SIGSTOP; the wall clock is what these tests measure.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy, RefundProbe};
use serde_json::json;
use support::RedisServer;

const NOW: i64 = 1_700_000_000_000;
const TIMEOUT_MS: u64 = 1000;
/// What a check may take beyond `timeout` (scheduling, the local call) and
/// still have spent one budget: anything short of a second timeout, which is
/// what a wait per lender or per slot group cost. Wide, so that a loaded CI
/// host (5x slower) passes and the defect still fails.
const MARGIN_MS: u64 = TIMEOUT_MS - 1;

fn at(now_ms: i64) -> CheckOptions {
    CheckOptions {
        cost: 1,
        now_ms: Some(now_ms),
    }
}

fn decision_calls(server: &RedisServer) -> u64 {
    server.calls("fcall") + server.calls("evalsha") + server.calls("eval")
}

/// Three regions, the two lenders paused: the local denial's borrow asks
/// the first lender until the budget is spent and never the second. Before
/// the fix each lender had its own `timeout` (two of them here).
#[tokio::test]
async fn a_borrow_from_paused_lenders_waits_one_timeout_in_all() {
    let (ap, eu, us) = (RedisServer::start(), RedisServer::start(), RedisServer::start());
    let limiter = Limiter::from_value(&json!({
        "policy": { "algorithm": "fixed_window", "rate": "3/min" },
        "regions": { "ap": ap.url(), "eu": eu.url(), "us": us.url() },
        "region": "ap",
        "timeout": format!("{TIMEOUT_MS}ms"),
        "connect_timeout": "1s",
    }))
    .unwrap();
    // Connections to every region: the local share, then one borrow from each lender.
    for n in 0..3 {
        let d = limiter.check_with("warm", at(NOW)).await.unwrap();
        assert!(d.allowed, "warm-up check {n}");
    }
    assert!(
        limiter.check_with("k", at(NOW)).await.unwrap().allowed,
        "ap's own share"
    );
    let us_calls = decision_calls(&us);

    eu.pause();
    us.pause();
    let started = Instant::now();
    let d = limiter.check_with("k", at(NOW)).await.unwrap();
    let waited = started.elapsed();
    eu.resume();
    us.resume();

    assert!(!d.allowed, "ap's share is spent and no lender answers: {d:?}");
    assert!(
        waited < Duration::from_millis(TIMEOUT_MS + MARGIN_MS),
        "the check waited {waited:?}, more than its {TIMEOUT_MS} ms timeout"
    );
    // The budget was spent on eu: us was never asked, so it holds no charge.
    assert_eq!(decision_calls(&us), us_calls, "no call reached us");
}

/// The cluster node of a key's slot: its port and pid.
fn owner_of(topology: &support::Topology, key: &str) -> (u16, u32) {
    let port = |n: &serde_json::Value| n["port"].as_u64().unwrap() as u16;
    let any = port(&topology.nodes[0]);
    let slot: u32 = support::redis_cli(any, &["CLUSTER", "KEYSLOT", key])
        .trim()
        .parse()
        .unwrap();
    let nodes = support::redis_cli(any, &["CLUSTER", "NODES"]);
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if !fields.get(2).is_some_and(|f| f.contains("master")) {
            continue;
        }
        let owns = fields[8..].iter().any(|range| {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            matches!((lo.parse::<u32>(), hi.parse::<u32>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
        });
        if owns {
            let node_port: u16 = fields[1].split(['@', ':']).nth(1).unwrap().parse().unwrap();
            let pid = topology
                .nodes
                .iter()
                .find(|n| port(n) == node_port)
                .and_then(|n| n["pid"].as_u64())
                .unwrap() as u32;
            return (node_port, pid);
        }
    }
    panic!("no primary owns slot {slot}");
}

/// SIGSTOP, returning once the kernel reports the process stopped.
fn stop(pid: u32) {
    support::signal(pid, "-STOP");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("{pid} did not stop");
}

/// A cross-slot check whose first group ("a") was charged and whose second
/// ("b") hangs: the check returns within its timeout, decided by the
/// fallback, and "a" gets its charge back (before the fix it kept it).
#[tokio::test]
async fn a_cross_slot_check_cut_by_its_deadline_gives_back_what_it_charged() {
    let cluster = support::Topology::cluster();
    let (a_port, _) = owner_of(&cluster, "a");
    let (b_port, b_pid) = owner_of(&cluster, "b");
    assert_ne!(a_port, b_port, "a and b live on different primaries");
    // Policy 0 on "a", policy 1 on "b": different slots, "a" decided first.
    let wide = Policy::parse(r#"{"name": "wide", "algorithm": "token_bucket", "rate": "2/h"}"#).unwrap();
    let narrow = Policy::parse(r#"{"name": "narrow", "algorithm": "fixed_window", "rate": "5/h"}"#).unwrap();
    let mut config = LimiterConfig::new(wide).with_store(cluster.url.clone());
    config.policies.push(narrow);
    config.prefix = "budget".into();
    config.timeout = Duration::from_millis(TIMEOUT_MS);
    config.connect_timeout = Duration::from_secs(1);
    let probe = RefundProbe::new(config).unwrap();
    assert!(probe.check(&[(0, "warm")], at(NOW)).await.unwrap().allowed);

    probe.between_slot_passes(Some(Arc::new(move || stop(b_pid))));
    let started = Instant::now();
    let result = probe.check(&[(0, "a"), (1, "b")], at(NOW)).await.unwrap();
    let waited = started.elapsed();
    probe.between_slot_passes(None);
    support::signal(b_pid, "-CONT");

    assert!(
        waited < Duration::from_millis(TIMEOUT_MS + MARGIN_MS),
        "the check waited {waited:?}, more than its {TIMEOUT_MS} ms timeout"
    );
    assert!(
        result.decisions.iter().all(|d| d.source == polylimit::Source::Local),
        "decided by the fallback: {result:?}"
    );
    // "a" was charged in the charge pass; the refund runs in the background.
    // A peek's `remaining` is after its own cost: 1 on a full bucket of 2.
    probe.settled().await;
    let a = probe.peek(&[(0, "a")], at(NOW)).await.unwrap();
    assert_eq!(a.decisions[0].source, polylimit::Source::Store);
    assert_eq!(
        a.decisions[0].remaining, 1,
        "a's charge by the cut check was given back"
    );
}

/// Two checks of one synced key while the store is paused: one sync is in
/// flight per key, so the second waits behind the first's call, then has
/// no budget left for a call of its own and is decided by the fallback at
/// once. Before the budget it made its own call: two `timeout`s in all.
#[tokio::test]
async fn a_check_waiting_behind_a_sync_shares_its_budget() {
    let redis = RedisServer::start();
    let limiter = Arc::new(
        Limiter::from_value(&json!({
            "policy": { "algorithm": "fixed_window", "rate": "100/s",
                        "sync": { "interval": "1s", "share": 10 } },
            "store": redis.url(),
            "timeout": format!("{TIMEOUT_MS}ms"),
            "connect_timeout": "1s",
        }))
        .unwrap(),
    );
    // A live connection, and a credit that ends before the paused checks.
    assert!(limiter.check_with("warm", at(NOW)).await.unwrap().allowed);

    redis.pause();
    let started = Instant::now();
    let (first, second) = tokio::join!(
        limiter.check_with("k", at(NOW + 10)),
        limiter.check_with("k", at(NOW + 10)),
    );
    let waited = started.elapsed();
    redis.resume();

    for d in [first.unwrap(), second.unwrap()] {
        assert_eq!(d.source.as_str(), "local", "the store cannot answer: {d:?}");
    }
    assert!(
        waited < Duration::from_millis(TIMEOUT_MS + MARGIN_MS),
        "the two checks waited {waited:?}, more than one {TIMEOUT_MS} ms timeout"
    );
}
