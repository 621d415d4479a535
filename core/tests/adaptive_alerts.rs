//! Alerts of adaptive policies: the storm limit, the metrics, a panicking
//! callback, and keys that never alert, on memory and a real Redis.

mod support;

use std::sync::{Arc, Mutex};

use polylimit::adaptive::AnomalyEvent;
use polylimit::{CheckOptions, Limiter, LimiterConfig, Policy};
use serde_json::json;

fn limiter(store: &str, prefix: &str, events: Arc<Mutex<Vec<AnomalyEvent>>>) -> Limiter {
    let policy = Policy::from_value(
        &json!({"name": "api", "rate": "1000/s", "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "4/s", "alert_keys": "raw"}}),
        "policy",
    )
    .unwrap();
    let mut config = LimiterConfig::new(policy).with_store(store);
    config.timeout = support::DECISIONS;
    config.prefix = prefix.into();
    let limiter = Limiter::new(config).unwrap();
    limiter.set_anomaly_log(false);
    // The sink as it is, on the deciding task: the events are there when a
    // check returns (`on_anomaly` delivers on a thread, tested below).
    limiter.set_anomaly_sink(Some(Arc::new(move |e: &AnomalyEvent| {
        events.lock().unwrap().push(e.clone())
    })));
    limiter
}

async fn check(l: &Limiter, key: &str, now_ms: i64) -> polylimit::Decision {
    l.check_with(
        key,
        CheckOptions {
            cost: 1,
            now_ms: Some(now_ms),
        },
    )
    .await
    .unwrap()
}

/// 30 keys turn anomalous within one second: 20 alerts are delivered, 10
/// suppressed and counted; the next alert of the policy reports them.
async fn storm(store: &str, prefix: &str) {
    let events: Arc<Mutex<Vec<AnomalyEvent>>> = Arc::default();
    let l = limiter(store, prefix, events.clone());
    let keys: Vec<String> = (0..31).map(|i| format!("k{i}")).collect();
    for t in (0..4000).step_by(500) {
        for k in &keys {
            assert!(check(&l, k, t).await.allowed);
        }
    }
    for k in &keys[..30] {
        for _ in 0..3 {
            check(&l, k, 4000).await;
        }
    }
    let metrics = l.metrics_text();
    assert_eq!(events.lock().unwrap().len(), 20, "{store}");
    assert!(
        metrics.contains("polylimit_anomalies_total{policy=\"api\"} 30\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("polylimit_anomalous_keys{policy=\"api\"} 30\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("polylimit_anomaly_alerts_suppressed_total{policy=\"api\"} 10\n"),
        "{metrics}"
    );
    // The 31st key, a second later: delivered, saying 10 were dropped before it.
    for _ in 0..3 {
        check(&l, &keys[30], 4100).await;
    }
    for _ in 0..3 {
        check(&l, &keys[30], 5000).await;
    }
    let events = events.lock().unwrap();
    let last = events.last().unwrap();
    assert_eq!((last.key.as_str(), last.suppressed), ("k30", 10), "{store}: {events:?}");
    // A key that stayed at its rate never alerted.
    assert!(events.iter().all(|e| e.policy == "api"));
}

#[tokio::test]
async fn the_storm_limit_on_memory_and_redis() {
    storm("memory", "alerts-m").await;
    let redis = support::RedisServer::start();
    storm(&redis.url(), "alerts-r").await;
}

#[tokio::test]
async fn a_panicking_callback_is_counted() {
    let policy = Policy::from_value(
        &json!({"rate": "1000/s", "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "4/s"}}),
        "policy",
    )
    .unwrap();
    let l = Limiter::new(LimiterConfig::new(policy)).unwrap();
    l.set_anomaly_log(false);
    l.on_anomaly(Some(Arc::new(|_: &AnomalyEvent| panic!("alerting is down"))));
    for t in (0..4000).step_by(500) {
        check(&l, "k", t).await;
    }
    let sources: Vec<&str> = {
        let mut v = Vec::new();
        for _ in 0..6 {
            v.push(check(&l, "k", 4000).await.source.as_str());
        }
        v
    };
    assert_eq!(sources, ["store", "store", "store", "store", "adaptive", "adaptive"]);
    // Counted on the alert thread, once it ran the callback.
    l.settled().await;
    assert!(
        l.metrics_text().contains("polylimit_anomaly_callback_errors_total 1\n"),
        "{}",
        l.metrics_text()
    );
}

/// `on_anomaly`'s callback runs on the alert thread, never on the task that
/// decided (issue 32 item 9: Rust's ran on the deciding task), in order.
#[test]
fn the_rust_callback_runs_off_the_request_path() {
    let policy = Policy::from_value(
        &json!({"rate": "1000/s", "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "4/s"}}),
        "policy",
    )
    .unwrap();
    let l = Limiter::new(LimiterConfig::new(policy)).unwrap();
    l.set_anomaly_log(false);
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    l.on_anomaly(Some(Arc::new(move |e: &AnomalyEvent| {
        let thread = std::thread::current();
        let _ = tx
            .lock()
            .unwrap()
            .send((e.kind, thread.id(), thread.name().map(str::to_string)));
    })));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for t in (0..4000).step_by(500) {
            check(&l, "k", t).await;
        }
        for _ in 0..6 {
            check(&l, "k", 4000).await;
        }
        for _ in 0..2 {
            check(&l, "k", 9000).await;
        }
    });
    let timeout = std::time::Duration::from_secs(5);
    let (kind, thread, name) = rx.recv_timeout(timeout).expect("the anomaly alert");
    assert_eq!(kind, polylimit::adaptive::AnomalyKind::Anomalous);
    assert_ne!(thread, std::thread::current().id(), "not on the deciding thread");
    assert_eq!(name.as_deref(), Some("polylimit-alerts"));
    let (kind, recovered_on, _) = rx.recv_timeout(timeout).expect("the recovery alert");
    assert_eq!(
        (kind, recovered_on),
        (polylimit::adaptive::AnomalyKind::Recovered, thread)
    );
}

/// The log line of an alert when stderr cannot take it (run as a child
/// process by `an_unwritable_stderr_never_fails_a_check`).
#[tokio::test]
#[ignore = "run by an_unwritable_stderr_never_fails_a_check as a child process"]
async fn alert_with_unwritable_stderr_child() {
    if std::env::var_os("POLYLIMIT_UNWRITABLE_STDERR").is_none() {
        return;
    }
    let policy = Policy::from_value(
        &json!({"rate": "1000/s", "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "4/s"}}),
        "policy",
    )
    .unwrap();
    let l = Limiter::new(LimiterConfig::new(policy)).unwrap();
    for t in (0..4000).step_by(500) {
        check(&l, "k", t).await;
    }
    let mut sources = Vec::new();
    for _ in 0..6 {
        sources.push(check(&l, "k", 4000).await.source.as_str().to_string());
    }
    assert_eq!(sources, ["store", "store", "store", "store", "adaptive", "adaptive"]);
    assert!(l
        .metrics_text()
        .contains("polylimit_anomalies_total{policy=\"default\"} 1\n"));
    println!("ALERTED WITHOUT A STDERR");
}

/// The alert's JSON log line goes to a stderr that fails every write (a pipe
/// nobody reads: EPIPE, as a closed or full non-blocking pipe fails): the
/// check that raised the alert still returns its decision.
#[test]
fn an_unwritable_stderr_never_fails_a_check() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "alert_with_unwritable_stderr_child",
            "--ignored",
            "--nocapture",
        ])
        .env("POLYLIMIT_UNWRITABLE_STDERR", "1")
        .stderr(writer)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}: {stdout}", out.status);
    assert!(stdout.contains("ALERTED WITHOUT A STDERR"), "{stdout}");
}

/// One alert from a limiter built with the options in
/// `POLYLIMIT_ANOMALY_LOG_OPTIONS` (run as a child process by
/// `anomaly_log_turns_the_stderr_line_off`).
#[tokio::test]
#[ignore = "run by anomaly_log_turns_the_stderr_line_off as a child process"]
async fn alert_log_child() {
    let Some(options) = std::env::var_os("POLYLIMIT_ANOMALY_LOG_OPTIONS") else {
        return;
    };
    let mut options: serde_json::Value = serde_json::from_str(options.to_str().unwrap()).unwrap();
    options["policy"] =
        json!({"rate": "1000/s", "adaptive": {"window": "1s", "horizon": "4s", "factor": 3, "floor": "4/s"}});
    let l = Limiter::from_value(&options).unwrap();
    for t in (0..4000).step_by(500) {
        check(&l, "k", t).await;
    }
    for _ in 0..6 {
        check(&l, "k", 4000).await;
    }
    assert!(l
        .metrics_text()
        .contains("polylimit_anomalies_total{policy=\"default\"} 1\n"));
}

/// `anomaly_log` off (`false` or `"off"`): the alert writes nothing to
/// stderr; by default (or `"stderr"`) it writes its one JSON line.
#[test]
fn anomaly_log_turns_the_stderr_line_off() {
    let stderr_of = |options: &str| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "alert_log_child",
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("POLYLIMIT_ANOMALY_LOG_OPTIONS", options)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{options}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter(|l| l.contains("\"event\":\"polylimit.anomalous\""))
            .count()
    };
    assert_eq!(stderr_of("{}"), 1);
    assert_eq!(stderr_of(r#"{"anomaly_log": "stderr"}"#), 1);
    assert_eq!(stderr_of(r#"{"anomaly_log": false}"#), 0);
    assert_eq!(stderr_of(r#"{"anomaly_log": "off"}"#), 0);
}
