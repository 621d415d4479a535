//! The structured metrics snapshot (issue 38, OpenTelemetry): the Prometheus
//! text is rendered from it, so both carry the same names, labels and
//! values; its JSON form is what every binding's OpenTelemetry bridge reads.

mod support;

use std::collections::BTreeSet;

use polylimit::{CheckOptions, Limiter, MetricKind, MetricValue, RequestInfo};
use serde_json::Value;
use support::RedisServer;

const NOW: i64 = 1_700_000_000_000;

/// Every family a limiter with a block cache and an adaptive policy exports
/// (the breaker's and the block cache's only with a store that has them:
/// the memory store has neither).
const FAMILIES: [&str; 14] = [
    "polylimit_requests_total",
    "rate_limit_blocked_total",
    "polylimit_store_errors_total",
    "polylimit_store_latency_seconds",
    "polylimit_breaker_state",
    "polylimit_block_cache_hits_total",
    "polylimit_block_cache_keys",
    "polylimit_block_cache_max_keys",
    "polylimit_anomalies_total",
    "polylimit_anomaly_recoveries_total",
    "polylimit_anomalous_keys",
    "polylimit_anomaly_alerts_suppressed_total",
    "polylimit_anomaly_callback_errors_total",
    // A limiter built from rules or options can reload them.
    "polylimit_config_reloads_total",
];

fn rules(store: &str, prefix: &str) -> String {
    format!(
        "store: {store}\nprefix: {prefix}\nblock_cache: true\nanomaly_log: false\npolicies:\n  api: {{ rate: 2/min }}\n  \
         watch: {{ rate: 1000/s, adaptive: {{ window: 1s, horizon: 4s, factor: 3, floor: 4/s }} }}\n\
         rules:\n  - {{ match: {{ path: /api/* }}, key: [ip], policy: api }}\n"
    )
}

fn request() -> RequestInfo {
    RequestInfo {
        method: "GET".into(),
        path: "/api/x".into(),
        route: Some("/api/{id}".into()),
        peer: Some("203.0.113.7".into()),
        now_ms: Some(NOW),
        ..Default::default()
    }
}

async fn exercise(limiter: &Limiter) {
    for _ in 0..3 {
        limiter.check_request(&request()).await.unwrap();
    }
    let options = CheckOptions {
        cost: 1,
        now_ms: Some(NOW),
    };
    limiter.check_with("user:1", options).await.unwrap();
    // The block cache answers the repeat of a denial with a retry time.
    for _ in 0..3 {
        limiter
            .check_with(
                "user:2",
                CheckOptions {
                    cost: 1,
                    now_ms: Some(NOW),
                },
            )
            .await
            .unwrap();
    }
}

fn names(limiter: &Limiter) -> BTreeSet<String> {
    limiter
        .metrics_snapshot()
        .families
        .into_iter()
        .map(|f| f.name)
        .collect()
}

/// The text is the snapshot's rendering, and every family shows in both.
async fn text_is_the_snapshot(store: &str, prefix: &str, remote: bool) {
    let limiter = Limiter::from_rules(&rules(store, prefix)).unwrap();
    exercise(&limiter).await;
    let snapshot = limiter.metrics_snapshot();
    assert_eq!(snapshot.to_prometheus(), limiter.metrics_text(), "{store}");
    let expected: BTreeSet<String> = FAMILIES
        .iter()
        .filter(|n| remote || !(n.contains("breaker") || n.contains("block_cache")))
        .map(|n| n.to_string())
        .collect();
    assert_eq!(names(&limiter), expected, "{store}");
    let text = limiter.metrics_text();
    for name in &expected {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{store}: {name} not in\n{text}"
        );
    }

    let requests = &snapshot.families[0];
    assert_eq!(requests.kind, MetricKind::Counter);
    let routed: Vec<_> = requests
        .points
        .iter()
        .filter(|p| p.labels.iter().any(|(k, v)| k == "route" && v == "/api/*"))
        .map(|p| (p.labels.clone(), p.value.clone()))
        .collect();
    let labels = |decision: &str| {
        ["policy", "route", "decision", "source"]
            .iter()
            .zip(["api", "/api/*", decision, "store"])
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        routed,
        vec![
            (labels("allowed"), MetricValue::Int(2)),
            (labels("denied"), MetricValue::Int(1))
        ],
        "{store}"
    );
    let latency = snapshot
        .families
        .iter()
        .find(|f| f.name == "polylimit_store_latency_seconds")
        .unwrap();
    assert_eq!(latency.kind, MetricKind::Histogram);
    let MetricValue::Histogram(h) = &latency.points[0].value else {
        panic!("{store}: the latency is a histogram")
    };
    assert_eq!(h.bucket_counts.len(), h.bounds.len() + 1);
    assert_eq!(h.bucket_counts.iter().sum::<u64>(), h.count);
    // The memory store makes no store calls to time.
    assert_eq!(h.count > 0, remote, "{store}: {h:?}");
    assert!(text.contains(&format!(
        "polylimit_store_latency_seconds_bucket{{le=\"+Inf\"}} {}\n",
        h.count
    )));
    assert!(text.contains(&format!("polylimit_store_latency_seconds_count {}\n", h.count)));
    let cumulative: Vec<u64> = text
        .lines()
        .filter(|l| l.starts_with("polylimit_store_latency_seconds_bucket"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        cumulative.windows(2).all(|w| w[0] <= w[1]),
        "{store}: buckets are cumulative: {cumulative:?}"
    );
    assert_eq!(*cumulative.last().unwrap(), h.count);
}

#[tokio::test]
async fn the_text_is_rendered_from_the_snapshot_on_memory() {
    text_is_the_snapshot("memory", "snap", false).await;
}

#[tokio::test]
async fn the_text_is_rendered_from_the_snapshot_on_redis() {
    let redis = RedisServer::start();
    text_is_the_snapshot(&redis.url(), "snap", true).await;
}

/// The JSON form the bindings read: families with name, help, kind and
/// points; whole numbers as JSON integers; histogram points with bounds,
/// per-bucket counts, sum and count; labels as an object.
#[tokio::test]
async fn the_json_form_names_every_field() {
    let limiter = Limiter::from_rules(&rules("memory", "json")).unwrap();
    exercise(&limiter).await;
    let value = limiter.metrics_snapshot().to_value();
    assert!(
        value["start_unix_nanos"].as_u64().unwrap() > 1_600_000_000_000_000_000,
        "{value}"
    );
    let families = value["families"].as_array().unwrap();
    assert_eq!(families.len(), limiter.metrics_snapshot().families.len());
    for family in families {
        let kind = family["kind"].as_str().unwrap();
        assert!(["counter", "gauge", "histogram"].contains(&kind), "{family}");
        assert!(family["name"].is_string() && family["help"].is_string(), "{family}");
        for point in family["points"].as_array().unwrap() {
            assert!(point["labels"].is_object(), "{point}");
            if kind == "histogram" {
                let bounds = point["bounds"].as_array().unwrap();
                let counts = point["bucket_counts"].as_array().unwrap();
                assert_eq!(counts.len(), bounds.len() + 1);
                assert!(point["sum"].is_number() && point["count"].is_u64(), "{point}");
            } else {
                assert!(point["value"].is_i64(), "{point}");
            }
        }
    }
    let requests = &families[0];
    assert_eq!(requests["name"], "polylimit_requests_total");
    let first = &requests["points"][0];
    assert_eq!(first["labels"]["policy"], Value::from("api"));
}
