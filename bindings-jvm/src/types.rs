//! The records crossing the boundary. Numbers are `i64`/`i32` (Java's long
//! and int) rather than unsigned types, which Kotlin shows as `ULong` and
//! Java cannot use comfortably; every value the core returns fits.

use serde_json::{json, Map, Value};

/// The answer to one check (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Decision {
    /// The request may proceed.
    pub allowed: bool,
    /// The policy's count: burst for buckets, limit per window for windows.
    pub limit: i64,
    /// Whole requests still available right after this decision.
    pub remaining: i64,
    /// Time until the key is back to its full, idle state.
    pub reset_after_ms: i64,
    /// When denied: time until the same request could be allowed; null when
    /// allowed or when the cost can never fit.
    pub retry_after_ms: Option<i64>,
    /// Shape mode: how long to hold the request before serving it.
    pub delay_ms: i64,
    /// Who decided: `store`, `penalty`, `local`, `fail_open`, `fail_closed`, …
    pub source: String,
}

fn long(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl From<polylimit::Decision> for Decision {
    fn from(d: polylimit::Decision) -> Self {
        Decision {
            allowed: d.allowed,
            limit: long(d.limit),
            remaining: long(d.remaining),
            reset_after_ms: long(d.reset_after_ms),
            retry_after_ms: d.retry_after_ms.map(long),
            delay_ms: long(d.delay_ms),
            source: d.source.as_str().to_string(),
        }
    }
}

/// One HTTP header.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Header {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// A request as the HTTP layer sees it (`checkRequest`): the fields the
/// core's rules read. Left out: the core's defaults (GET, `/`, cost 1, the
/// store's clock).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct HttpRequest {
    /// The method (default GET).
    #[uniffi(default = "GET")]
    pub method: String,
    /// The path, without the query (default `/`).
    #[uniffi(default = "/")]
    pub path: String,
    /// The matched route pattern (`/users/{id}`), when the framework knows it.
    #[uniffi(default = None)]
    pub route: Option<String>,
    /// The peer address (the socket's remote address).
    #[uniffi(default = None)]
    pub peer: Option<String>,
    /// The request's headers, in order, repeated names repeated.
    #[uniffi(default = [])]
    pub headers: Vec<Header>,
    /// The authenticated user (the `user` dimension).
    #[uniffi(default = None)]
    pub user: Option<String>,
    /// The API key (the `api_key` dimension).
    #[uniffi(default = None)]
    pub api_key: Option<String>,
    /// A key chosen by the caller (the `key` dimension).
    #[uniffi(default = None)]
    pub key: Option<String>,
    /// Units the request costs (default 1).
    #[uniffi(default = None)]
    pub cost: Option<i64>,
    /// Decide at this time (ms since the epoch) instead of the store's clock.
    #[uniffi(default = None)]
    pub now_ms: Option<i64>,
    /// Match routes case-insensitively (the framework's setting).
    #[uniffi(default = false)]
    pub case_insensitive: bool,
    /// `/a/` matches `/a` (the framework's setting).
    #[uniffi(default = false)]
    pub ignore_trailing_slash: bool,
}

impl HttpRequest {
    /// The JSON object the core reads (`RequestInfo::from_value`), which
    /// checks every field.
    pub(crate) fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("method".into(), json!(self.method));
        map.insert("path".into(), json!(self.path));
        let headers: Vec<Value> = self.headers.iter().map(|h| json!([h.name, h.value])).collect();
        map.insert("headers".into(), Value::Array(headers));
        for (name, v) in [
            ("route", &self.route),
            ("peer", &self.peer),
            ("user", &self.user),
            ("api_key", &self.api_key),
            ("key", &self.key),
        ] {
            if let Some(v) = v {
                map.insert(name.into(), json!(v));
            }
        }
        for (name, v) in [("cost", self.cost), ("now_ms", self.now_ms)] {
            if let Some(v) = v {
                map.insert(name.into(), json!(v));
            }
        }
        map.insert("case_insensitive".into(), json!(self.case_insensitive));
        map.insert("ignore_trailing_slash".into(), json!(self.ignore_trailing_slash));
        Value::Object(map)
    }
}

/// One policy's decision for a request.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct RuleDecision {
    /// The rule's label (its name, route or path pattern).
    pub rule: String,
    /// The policy's name.
    pub policy: String,
    /// The decision.
    pub decision: Decision,
    /// The rule only observes (`shadow: true`).
    pub shadow: bool,
}

/// What to answer a request (SPEC §6): `status` null lets it through; set
/// every header of `headers` either way; wait `delayMs` first; write `body`
/// (JSON) with a refusal.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Outcome {
    /// Null: let the request through. Otherwise 429, 503 or 403 (a gRPC
    /// call: its status code 8, 14 or 7).
    pub status: Option<i32>,
    /// Headers to set on the response, allowed or not.
    pub headers: Vec<Header>,
    /// The JSON body of a refusal (a gRPC call's status message).
    pub body: Option<String>,
    /// A gRPC call's trailing metadata (`retry-after` on a refusal); empty
    /// for an HTTP request.
    pub trailers: Vec<Header>,
    /// Shape mode: hold the request this long before serving it.
    pub delay_ms: i64,
    /// Every policy's decision.
    pub decisions: Vec<RuleDecision>,
    /// The token to settle an allowed request after its response
    /// (`Limiter.complete(token, status)`) when a rule counts only some
    /// responses or holds a concurrency slot; null otherwise.
    pub completion: Option<String>,
}

impl From<polylimit::Outcome> for Outcome {
    fn from(o: polylimit::Outcome) -> Self {
        Outcome {
            status: o.status.map(i32::from),
            headers: o
                .headers
                .into_iter()
                .map(|(name, value)| Header { name, value })
                .collect(),
            body: o.body,
            trailers: o
                .trailers
                .into_iter()
                .map(|(name, value)| Header { name, value })
                .collect(),
            delay_ms: long(o.delay_ms),
            decisions: o
                .decisions
                .into_iter()
                .map(|d| RuleDecision {
                    rule: d.rule.to_string(),
                    policy: d.policy.to_string(),
                    decision: d.decision.into(),
                    shadow: d.shadow,
                })
                .collect(),
            completion: o.completion,
        }
    }
}

/// A policy-wide limit in force (`setLimit`, `getLimit`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct PolicyLimit {
    /// The policy's name (every key of it).
    pub policy: String,
    /// The limit's rate, `"<count>/<period>"`.
    pub rate: String,
    /// Its bucket capacity (the limit per window for window algorithms).
    pub burst: i64,
    /// The `limit` of its decisions (as `burst`).
    pub limit: i64,
    /// When it ends, in ms since the epoch (the store's clock); null: never.
    pub expires_at_ms: Option<i64>,
}

impl From<polylimit::PolicyLimit> for PolicyLimit {
    fn from(l: polylimit::PolicyLimit) -> Self {
        PolicyLimit {
            policy: l.policy,
            rate: l.rate,
            burst: long(l.burst),
            limit: long(l.limit),
            expires_at_ms: l.expires_at_ms,
        }
    }
}

/// A key's override in force (`setOverride`, `getOverride`).
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct Override {
    /// The policy's name.
    pub policy: String,
    /// The key.
    pub key: String,
    /// The override's rate, `"<count>/<period>"`.
    pub rate: String,
    /// Its bucket capacity (the limit per window for window algorithms).
    pub burst: i64,
    /// The `limit` of its decisions (as `burst`).
    pub limit: i64,
    /// When it ends, in ms since the epoch (the store's clock); null: never.
    pub expires_at_ms: Option<i64>,
}

impl From<polylimit::Override> for Override {
    fn from(o: polylimit::Override) -> Self {
        Override {
            policy: o.policy,
            key: o.key,
            rate: o.rate,
            burst: long(o.burst),
            limit: long(o.limit),
            expires_at_ms: o.expires_at_ms,
        }
    }
}

/// Every metric family of a limiter at one moment (`metricsSnapshot()`):
/// the Prometheus text is rendered from the same snapshot, and
/// polylimit-otel bridges it into OpenTelemetry.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct MetricsSnapshot {
    /// When the limiter was built, in nanoseconds since the epoch: the start
    /// of every cumulative value (a Long: Java reads it; good until 2262).
    pub start_unix_nanos: i64,
    /// The families, in the order of the Prometheus text.
    pub families: Vec<MetricFamily>,
}

/// One metric: its name, help line, kind and points.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct MetricFamily {
    /// The name, as in the Prometheus text.
    pub name: String,
    /// What it counts.
    pub help: String,
    /// `counter` (cumulative), `gauge` or `histogram` (cumulative).
    pub kind: String,
    /// Its points.
    pub points: Vec<MetricPoint>,
}

/// One label of a metric point.
#[derive(Debug, Clone, PartialEq, Eq, uniffi::Record)]
pub struct MetricLabel {
    /// Its name (`policy`, `route`, `decision`, `source`, ...).
    pub name: String,
    /// Its value.
    pub value: String,
}

/// One point of a family: its labels, and a counter's or gauge's `value`,
/// or a histogram's `bounds`, `bucket_counts` (per bucket, not cumulative,
/// one more than `bounds`), `sum` and `count`.
#[derive(Debug, Clone, PartialEq, uniffi::Record)]
pub struct MetricPoint {
    /// Label names and values, in the order of the text.
    pub labels: Vec<MetricLabel>,
    /// A counter's or a gauge's value (0 for a histogram).
    pub value: i64,
    /// A histogram's bucket upper bounds (inclusive); empty otherwise.
    pub bounds: Vec<f64>,
    /// A histogram's observations per bucket; empty otherwise.
    pub bucket_counts: Vec<i64>,
    /// A histogram's sum of observations (0 otherwise).
    pub sum: f64,
    /// A histogram's number of observations (0 otherwise).
    pub count: i64,
}

impl From<polylimit::MetricsSnapshot> for MetricsSnapshot {
    fn from(s: polylimit::MetricsSnapshot) -> Self {
        let families = s
            .families
            .into_iter()
            .map(|f| MetricFamily {
                name: f.name,
                help: f.help,
                kind: f.kind.as_str().to_string(),
                points: f
                    .points
                    .into_iter()
                    .map(|p| {
                        let labels = p
                            .labels
                            .into_iter()
                            .map(|(name, value)| MetricLabel { name, value })
                            .collect();
                        match p.value {
                            polylimit::MetricValue::Int(value) => MetricPoint {
                                labels,
                                value,
                                bounds: Vec::new(),
                                bucket_counts: Vec::new(),
                                sum: 0.0,
                                count: 0,
                            },
                            polylimit::MetricValue::Histogram(h) => MetricPoint {
                                labels,
                                value: 0,
                                bounds: h.bounds,
                                bucket_counts: h.bucket_counts.into_iter().map(long).collect(),
                                sum: h.sum,
                                count: long(h.count),
                            },
                        }
                    })
                    .collect(),
            })
            .collect();
        MetricsSnapshot {
            start_unix_nanos: long(s.start_unix_nanos),
            families,
        }
    }
}
