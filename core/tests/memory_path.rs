//! The one-policy memory-store check (the hot path, decided without a future
//! or an allocation) decides, counts and refuses exactly as the general path
//! that decides several policies at once.

use futures_util::FutureExt;
use polylimit::{CheckOptions, Error, Limiter, LimiterConfig, Policy};
use serde_json::{json, Value};

fn policy(spec: &Value, name: &str) -> Policy {
    let mut spec = spec.clone();
    spec["name"] = json!(name);
    Policy::from_value(&spec, "").unwrap()
}

/// Every algorithm, in both modes where it has them, with a small limit so
/// the sequence below reaches denials, refills and expiries.
fn specs() -> Vec<Value> {
    let mut specs = Vec::new();
    for algorithm in [
        "token_bucket",
        "gcra",
        "leaky_bucket",
        "fixed_window",
        "sliding_window_counter",
        "sliding_window_log",
    ] {
        specs.push(json!({"algorithm": algorithm, "rate": "5/s"}));
    }
    specs.push(json!({"algorithm": "leaky_bucket", "rate": "5/s", "mode": "shape"}));
    specs.push(json!({"algorithm": "token_bucket", "rate": "5/s", "burst": 8, "refill": "interval"}));
    specs
}

#[test]
fn one_policy_decides_as_the_general_path() {
    for spec in specs() {
        let one = Limiter::new(LimiterConfig::new(policy(&spec, "p"))).unwrap();
        // A second policy that never denies puts the first on the general,
        // several-checks path of the memory store.
        let mut config = LimiterConfig::new(policy(&spec, "p"));
        config.policies.push(policy(&json!({"rate": "1000000000/s"}), "never"));
        let general = Limiter::new(config).unwrap();
        let mut now = 1_000_000_i64;
        for step in 0..200_u64 {
            let options = CheckOptions {
                cost: 1 + step % 3,
                now_ms: Some(now),
            };
            let key = ["a", "b", "{c}", "%d"][(step % 4) as usize];
            let fast = one.check_with(key, options).now_or_never().unwrap();
            let slow = general
                .check_all(key, options)
                .now_or_never()
                .unwrap()
                .map(|r| r.decisions[0]);
            assert_eq!(fast.ok(), slow.ok(), "{spec} step {step}");
            // Steps that land on refill, window and expiry boundaries, and past them.
            now += [0, 200, 1, 1_000, 37, 199, 1_500][(step % 7) as usize];
        }
    }
}

#[test]
fn one_policy_checks_are_counted_and_refused_like_the_others() {
    let limiter = Limiter::new(LimiterConfig::new(policy(&json!({"rate": "2/h"}), "api"))).unwrap();
    let check = |cost: u64, now_ms: Option<i64>| {
        limiter
            .check_with("k", CheckOptions { cost, now_ms })
            .now_or_never()
            .unwrap()
    };
    for expected in [true, true, false] {
        assert_eq!(check(1, Some(5_000)).unwrap().allowed, expected);
    }
    let metrics = limiter.metrics_text();
    for line in [
        "polylimit_requests_total{policy=\"api\",route=\"\",decision=\"allowed\",source=\"store\"} 2\n",
        "polylimit_requests_total{policy=\"api\",route=\"\",decision=\"denied\",source=\"store\"} 1\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    assert!(matches!(check(0, None), Err(Error::Config { .. })));
    assert!(matches!(check(1, Some(-1)), Err(Error::Config { .. })));
    limiter.close();
    assert!(matches!(check(1, None), Err(Error::Closed)));
}
