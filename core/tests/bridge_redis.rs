//! The completion bridge on a real Redis: the commands of checks submitted
//! together leave in few writes (Redis counts its reads), where a `spawn`
//! per check let the connection's writer run after each one.

mod support;

use std::time::Duration;

use polylimit::bridge::{Bridge, Wake};
use polylimit::wire::packed::{read_record, Reply};
use polylimit::{Limiter, LimiterConfig, Policy};
use serde_json::json;
use support::ForDecisions;

const CHECKS: u64 = 200;

/// Redis's `total_reads_processed` (each INFO asking for it is one read too).
fn reads(redis: &support::RedisServer) -> u64 {
    let info = redis.command("INFO stats").unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_submitted_together_leave_in_few_writes() {
    let redis = support::RedisServer::start();
    let policy = Policy::from_value(&json!({"rate": "100/s", "burst": 1000}), "").unwrap();
    let limiter = Limiter::new(LimiterConfig::new(policy).with_store(redis.url()).for_decisions()).unwrap();
    limiter.check("warm-up").await.unwrap();

    let bridge = Bridge::new(&tokio::runtime::Handle::current(), Wake::None);
    let before = reads(&redis);
    for i in 0..CHECKS {
        let limiter = limiter.clone();
        bridge.submit(
            i,
            async move { limiter.check(&format!("k{i}")).await.map(Reply::Decision) },
        );
    }
    let taker = bridge.clone();
    let taken = tokio::task::spawn_blocking(move || {
        let (mut n, mut buf) = (0, Vec::new());
        while n < CHECKS {
            let got = taker.take_wait(&mut buf, Duration::from_secs(10));
            assert!(got > 0, "no record within 10 s");
            let mut rest = &buf[..];
            while !rest.is_empty() {
                let (_, result) = read_record(&mut rest).unwrap();
                assert!(matches!(result, Ok(Reply::Decision(d)) if d.allowed));
            }
            n += got as u64;
        }
        n
    })
    .await
    .unwrap();
    assert_eq!(taken, CHECKS);
    let bridged = reads(&redis) - before - 1;

    let before = reads(&redis);
    // Spawned from a thread of the host's, as a binding would.
    let (handle, each) = (tokio::runtime::Handle::current(), limiter.clone());
    let spawned = std::thread::spawn(move || {
        (0..CHECKS)
            .map(|i| {
                let limiter = each.clone();
                handle.spawn(async move { limiter.check(&format!("s{i}")).await })
            })
            .collect::<Vec<_>>()
    })
    .join()
    .unwrap();
    for s in spawned {
        assert!(s.await.unwrap().unwrap().allowed);
    }
    let one_spawn_each = reads(&redis) - before - 1;
    eprintln!("Redis reads for {CHECKS} checks: {bridged} through the bridge, {one_spawn_each} with a spawn each");
    assert!(
        bridged * 4 <= CHECKS,
        "{bridged} reads for {CHECKS} checks through the bridge ({one_spawn_each} with a spawn each)"
    );
}
