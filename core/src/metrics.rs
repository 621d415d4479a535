//! The limiter's metrics: one registry of counters, read as a structured
//! snapshot ([`MetricFamily`] values), from which the Prometheus text is
//! rendered, so the text and every binding's OpenTelemetry bridge share one
//! list of names, labels and values. Labels are bounded: policy names, route
//! templates from the rules file, decisions and sources — never a raw key or
//! address.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::breaker::BreakerState;
use crate::decision::{Decision, Source};

const SOURCES: [Source; 8] = Source::ALL;

/// Upper bounds of the store latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// What a metric family measures, as Prometheus and OpenTelemetry name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// A monotonic count since the limiter was built (cumulative).
    Counter,
    /// A value now, which may go up or down.
    Gauge,
    /// A distribution: per-bucket counts, a sum and a count (cumulative).
    Histogram,
}

impl MetricKind {
    /// `counter`, `gauge` or `histogram`: the Prometheus `# TYPE` word.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// The value of one point of a family.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricValue {
    /// A counter's or a gauge's value: every one the core exports is a whole number.
    Int(i64),
    /// A histogram's buckets.
    Histogram(HistogramValue),
}

/// A histogram point, in OpenTelemetry's explicit-bucket form.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramValue {
    /// The buckets' upper bounds (inclusive), ascending.
    pub bounds: Vec<f64>,
    /// Observations per bucket, not cumulative: one more entry than
    /// `bounds`, the last one for values above every bound.
    pub bucket_counts: Vec<u64>,
    /// The sum of the observations.
    pub sum: f64,
    /// The number of observations (the sum of `bucket_counts`).
    pub count: u64,
}

/// One point of a family: its labels (in the order the text shows them) and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricPoint {
    /// Label names and values.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: MetricValue,
}

/// One metric: a name, a help line, a kind and its points.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricFamily {
    /// The metric's name (`polylimit_requests_total`).
    pub name: String,
    /// One line saying what it counts.
    pub help: String,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its points, possibly none.
    pub points: Vec<MetricPoint>,
}

impl MetricFamily {
    fn new(name: &str, kind: MetricKind, help: &str) -> MetricFamily {
        MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            kind,
            points: Vec::new(),
        }
    }

    /// Adds a whole-number point with `labels`.
    fn point(&mut self, labels: &[(&str, &str)], value: i64) {
        self.points.push(MetricPoint {
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            value: MetricValue::Int(value),
        });
    }

    /// The JSON form every binding reads: `{"name", "help", "kind",
    /// "points": [{"labels": {..}, "value": n}]}`, a histogram's points with
    /// `bounds`, `bucket_counts`, `sum` and `count` instead of `value`.
    pub fn to_value(&self) -> Value {
        let points: Vec<Value> = self
            .points
            .iter()
            .map(|p| {
                let labels: Map<String, Value> = p
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                match &p.value {
                    MetricValue::Int(n) => json!({ "labels": labels, "value": n }),
                    MetricValue::Histogram(h) => json!({
                        "labels": labels,
                        "bounds": h.bounds,
                        "bucket_counts": h.bucket_counts,
                        "sum": h.sum,
                        "count": h.count,
                    }),
                }
            })
            .collect();
        json!({ "name": self.name, "help": self.help, "kind": self.kind.as_str(), "points": points })
    }
}

/// A limiter's metrics at one moment: every family it exports, in the
/// order of its Prometheus text.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// When the limiter was built, in nanoseconds since the Unix epoch: the
    /// start of every cumulative counter and histogram.
    pub start_unix_nanos: u64,
    /// The families.
    pub families: Vec<MetricFamily>,
}

impl MetricsSnapshot {
    /// The JSON form every binding reads: `{"start_unix_nanos": n,
    /// "families": [...]}`, each family as [`MetricFamily::to_value`].
    pub fn to_value(&self) -> Value {
        let families: Vec<Value> = self.families.iter().map(MetricFamily::to_value).collect();
        json!({ "start_unix_nanos": self.start_unix_nanos, "families": families })
    }

    /// The Prometheus text exposition of these families.
    pub fn to_prometheus(&self) -> String {
        let mut out = String::new();
        for family in &self.families {
            let name = &family.name;
            let _ = writeln!(out, "# HELP {name} {}", family.help);
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for point in &family.points {
                match &point.value {
                    MetricValue::Int(n) => {
                        let _ = writeln!(out, "{name}{} {n}", labels(&point.labels, None));
                    }
                    MetricValue::Histogram(h) => {
                        let mut cumulative = 0;
                        for (bound, n) in h.bounds.iter().zip(&h.bucket_counts) {
                            cumulative += n;
                            let le = bound.to_string();
                            let _ = writeln!(out, "{name}_bucket{} {cumulative}", labels(&point.labels, Some(&le)));
                        }
                        let _ = writeln!(out, "{name}_bucket{} {}", labels(&point.labels, Some("+Inf")), h.count);
                        let _ = writeln!(out, "{name}_sum{} {}", labels(&point.labels, None), h.sum);
                        let _ = writeln!(out, "{name}_count{} {}", labels(&point.labels, None), h.count);
                    }
                }
            }
        }
        out
    }
}

/// `{a="x",b="y"}` (with `le` last for a bucket), or nothing without labels.
fn labels(pairs: &[(String, String)], le: Option<&str>) -> String {
    if pairs.is_empty() && le.is_none() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", label(v));
    }
    if let Some(le) = le {
        if !pairs.is_empty() {
            out.push(',');
        }
        let _ = write!(out, "le=\"{le}\"");
    }
    out.push('}');
    out
}

/// policy → route → (decision, source) → count: nested, so a request that
/// counts under labels already seen is looked up by `&str`, allocating nothing.
type RequestCounts = BTreeMap<String, BTreeMap<String, BTreeMap<(&'static str, &'static str), u64>>>;

/// One policy's checks outside the HTTP layer: [source][allowed] → count.
type PolicyCounts = [[AtomicU64; 2]; SOURCES.len()];

/// One policy's counters: its checks, and its blocked-key cache hits.
type PolicyRow = (Arc<PolicyCounts>, Arc<AtomicU64>);

/// Counters of one limiter's policies, on the limiter's registry
/// ([`Registry`], shared by every set of policies a reload gives it).
pub(crate) struct Metrics {
    /// Per policy, lock-free (checks outside the HTTP layer).
    per_policy: Vec<(String, Arc<PolicyCounts>)>,
    /// Per policy: checks the blocked-key cache answered.
    block_cache_hits: Vec<Arc<AtomicU64>>,
    registry: Arc<Registry>,
}

impl std::ops::Deref for Metrics {
    type Target = Registry;

    fn deref(&self) -> &Registry {
        &self.registry
    }
}

/// The counters of one limiter that outlive a reload.
#[derive(Default)]
pub(crate) struct Registry {
    /// Every policy's counters, by name: a reload that keeps a policy keeps them.
    by_name: Mutex<BTreeMap<String, PolicyRow>>,
    /// Reloads: [failed, succeeded].
    reloads: [AtomicU64; 2],
    /// Whether the limiter can reload (built from options or a rules file):
    /// then `polylimit_config_reloads_total` is rendered.
    reloadable: std::sync::atomic::AtomicBool,
    /// (policy, route, decision, source) → count, for the HTTP layer.
    requests: Mutex<RequestCounts>,
    /// policy → route → count.
    blocked: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
    store_errors: AtomicU64,
    /// Store calls per latency bucket, not cumulative: one per bound of
    /// [`LATENCY_BUCKETS`], then one for longer calls.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    latency_sum_ns: AtomicU64,
    /// When these counters started, in nanoseconds since the Unix epoch.
    started_unix_nanos: u64,
    /// policy → [set, removed]: policy-wide limits this process changed.
    limit_changes: Mutex<BTreeMap<String, [u64; 2]>>,
}

impl Registry {
    /// An empty registry, started now.
    pub fn new() -> Registry {
        Registry {
            started_unix_nanos: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            ..Default::default()
        }
    }

    /// Counts a reload of the limiter's configuration (`polylimit_config_reloads_total`).
    pub fn reload(&self, ok: bool) {
        self.reloads[ok as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a policy-wide limit this process set or removed
    /// (`polylimit_limit_changes_total`).
    pub fn limit_change(&self, policy: &str, removed: bool) {
        self.limit_changes.lock().entry(policy.to_string()).or_default()[removed as usize] += 1;
    }

    /// Marks the limiter as one that can reload.
    pub fn set_reloadable(&self) {
        self.reloadable.store(true, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn new<'a>(policies: impl IntoIterator<Item = &'a str>) -> Metrics {
        Metrics::on(Arc::new(Registry::new()), policies)
    }

    /// The counters of `policies` on `registry`: a policy's name already
    /// counted there keeps its counts.
    pub fn on<'a>(registry: Arc<Registry>, policies: impl IntoIterator<Item = &'a str>) -> Metrics {
        let mut by_name = registry.by_name.lock();
        let (per_policy, block_cache_hits) = policies
            .into_iter()
            .map(|p| {
                let (counts, hits) = by_name.entry(p.to_string()).or_default();
                ((p.to_string(), counts.clone()), hits.clone())
            })
            .unzip();
        drop(by_name);
        Metrics {
            per_policy,
            block_cache_hits,
            registry,
        }
    }

    /// The same registry's counters of `policies` (a reload's).
    pub fn for_policies<'a>(&self, policies: impl IntoIterator<Item = &'a str>) -> Metrics {
        Metrics::on(self.registry.clone(), policies)
    }

    /// Counts a decision of the policy at `index`.
    #[inline]
    pub fn decision(&self, index: usize, decision: &Decision) {
        if let Some((_, counts)) = self.per_policy.get(index) {
            // Source::index is the source's place in SOURCES.
            if let Some(by_verdict) = counts.get(decision.source.index()) {
                by_verdict[decision.allowed as usize].fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts a check the blocked-key cache answered for the policy at `index`.
    pub fn block_cache_hit(&self, index: usize) {
        if let Some(n) = self.block_cache_hits.get(index) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The blocked-key cache's families (a limiter that has one).
    pub fn block_cache_families(&self, keys: usize, max_keys: usize) -> [MetricFamily; 3] {
        let mut hits = MetricFamily::new(
            "polylimit_block_cache_hits_total",
            MetricKind::Counter,
            "Checks denied by the blocked-key cache, without a store call.",
        );
        for ((policy, _), n) in self.per_policy.iter().zip(&self.block_cache_hits) {
            hits.point(&[("policy", policy)], n.load(Ordering::Relaxed) as i64);
        }
        let mut held = MetricFamily::new(
            "polylimit_block_cache_keys",
            MetricKind::Gauge,
            "Denied (policy, key) pairs the blocked-key cache holds.",
        );
        held.point(&[], keys as i64);
        let mut bound = MetricFamily::new(
            "polylimit_block_cache_max_keys",
            MetricKind::Gauge,
            "The blocked-key cache's bound.",
        );
        bound.point(&[], max_keys as i64);
        [hits, held, bound]
    }

    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn store_latency(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|bound| secs <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ns
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Counts one HTTP request's decision of `policy` on `route` (a template).
    pub fn request(&self, policy: &str, route: &str, decision: &Decision, blocked: bool) {
        let verdict = if decision.allowed { "allowed" } else { "denied" };
        let mut requests = self.requests.lock();
        *labelled(labelled(&mut requests, policy), route)
            .entry((verdict, decision.source.as_str()))
            .or_default() += 1;
        drop(requests);
        if blocked {
            *labelled(labelled(&mut self.blocked.lock(), policy), route) += 1;
        }
    }

    /// Counts one HTTP request of `policy` on `route` refused for its cost
    /// (a 400 `invalid_cost`, nothing decided or charged): `decision="invalid_cost"`,
    /// `source="cost"` in `polylimit_requests_total`.
    pub fn invalid_cost(&self, policy: &str, route: &str) {
        let mut requests = self.requests.lock();
        *labelled(labelled(&mut requests, policy), route)
            .entry(("invalid_cost", "cost"))
            .or_default() += 1;
    }

    /// When these counters started, in nanoseconds since the Unix epoch.
    pub fn started_unix_nanos(&self) -> u64 {
        self.started_unix_nanos
    }

    pub fn store_errors(&self) -> u64 {
        self.store_errors.load(Ordering::Relaxed)
    }

    /// The families every limiter has (the breaker's only with a store that has one).
    pub fn families(&self, breaker: Option<BreakerState>) -> Vec<MetricFamily> {
        let mut requests = MetricFamily::new("polylimit_requests_total", MetricKind::Counter, "Rate limit decisions.");
        for (policy, counts) in &self.per_policy {
            for (source, by_verdict) in SOURCES.iter().zip(counts.iter()) {
                for (verdict, n) in ["denied", "allowed"].iter().zip(by_verdict) {
                    let n = n.load(Ordering::Relaxed);
                    if n > 0 {
                        let labels = [
                            ("policy", policy.as_str()),
                            ("route", ""),
                            ("decision", verdict),
                            ("source", source.as_str()),
                        ];
                        requests.point(&labels, n as i64);
                    }
                }
            }
        }
        let counted = self.requests.lock();
        let routes = counted
            .iter()
            .flat_map(|(p, routes)| routes.iter().map(move |(r, counts)| (p, r, counts)));
        for (policy, route, counts) in routes {
            for ((verdict, source), n) in counts {
                let labels = [
                    ("policy", policy.as_str()),
                    ("route", route.as_str()),
                    ("decision", verdict),
                    ("source", source),
                ];
                requests.point(&labels, *n as i64);
            }
        }
        drop(counted);
        let mut blocked = MetricFamily::new(
            "rate_limit_blocked_total",
            MetricKind::Counter,
            "Requests blocked by a rate limit.",
        );
        let counted = self.blocked.lock();
        let routes = counted
            .iter()
            .flat_map(|(p, routes)| routes.iter().map(move |(r, n)| (p, r, n)));
        for (policy, route, n) in routes {
            blocked.point(&[("policy", policy), ("route", route)], *n as i64);
        }
        drop(counted);
        let mut errors = MetricFamily::new(
            "polylimit_store_errors_total",
            MetricKind::Counter,
            "Store calls that failed or timed out.",
        );
        errors.point(&[], self.store_errors() as i64);
        let mut latency = MetricFamily::new(
            "polylimit_store_latency_seconds",
            MetricKind::Histogram,
            "Store call latency.",
        );
        let bucket_counts: Vec<u64> = self.latency_buckets.iter().map(|n| n.load(Ordering::Relaxed)).collect();
        latency.points.push(MetricPoint {
            labels: Vec::new(),
            value: MetricValue::Histogram(HistogramValue {
                bounds: LATENCY_BUCKETS.to_vec(),
                count: bucket_counts.iter().sum(),
                bucket_counts,
                sum: self.latency_sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
            }),
        });
        let mut families = vec![requests, blocked, errors, latency];
        let changes = self.limit_changes.lock();
        if !changes.is_empty() {
            let mut family = MetricFamily::new(
                "polylimit_limit_changes_total",
                MetricKind::Counter,
                "Policy-wide limits set or removed by this process.",
            );
            for (policy, counts) in changes.iter() {
                for (action, n) in ["set", "remove"].iter().zip(counts) {
                    family.point(&[("policy", policy), ("action", action)], *n as i64);
                }
            }
            families.push(family);
        }
        drop(changes);
        if self.reloadable.load(Ordering::Relaxed) {
            let mut reloads = MetricFamily::new(
                "polylimit_config_reloads_total",
                MetricKind::Counter,
                "Reloads of the limiter's configuration, by result.",
            );
            for (result, n) in ["error", "ok"].iter().zip(&self.reloads) {
                reloads.point(&[("result", result)], n.load(Ordering::Relaxed) as i64);
            }
            families.push(reloads);
        }
        if let Some(state) = breaker {
            let mut gauge = MetricFamily::new(
                "polylimit_breaker_state",
                MetricKind::Gauge,
                "Store circuit breaker: 0 closed, 1 open, 2 half-open.",
            );
            gauge.point(&[], state as i64);
            families.push(gauge);
        }
        families
    }
}

/// A family of whole-number points, for the modules above this one that count
/// things of their own (alerts, regional borrows): `points` are (labels, value).
pub(crate) fn family<'a>(
    name: &str,
    kind: MetricKind,
    help: &str,
    points: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, i64)>,
) -> MetricFamily {
    let mut family = MetricFamily::new(name, kind, help);
    for (labels, value) in points {
        family.point(&labels, value);
    }
    family
}

/// Escapes a label value per the Prometheus text format.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The entry of `label` in `map`, inserted (its one allocation) when new.
fn labelled<'m, V: Default>(map: &'m mut BTreeMap<String, V>, label: &str) -> &'m mut V {
    if !map.contains_key(label) {
        map.insert(label.to_string(), V::default());
    }
    map.get_mut(label).expect("inserted above")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_escapes_labels_and_sums_buckets() {
        let mut counter = MetricFamily::new("c_total", MetricKind::Counter, "C.");
        counter.point(&[("policy", "a\"b\\c\nd")], 3);
        let histogram = MetricFamily {
            points: vec![MetricPoint {
                labels: vec![("policy".into(), "p".into())],
                value: MetricValue::Histogram(HistogramValue {
                    bounds: vec![0.5, 1.0],
                    bucket_counts: vec![1, 2, 3],
                    sum: 7.5,
                    count: 6,
                }),
            }],
            ..MetricFamily::new("h_seconds", MetricKind::Histogram, "H.")
        };
        let text = MetricsSnapshot {
            start_unix_nanos: 0,
            families: vec![counter, histogram],
        }
        .to_prometheus();
        assert_eq!(
            text,
            "# HELP c_total C.\n# TYPE c_total counter\nc_total{policy=\"a\\\"b\\\\c\\nd\"} 3\n\
             # HELP h_seconds H.\n# TYPE h_seconds histogram\n\
             h_seconds_bucket{policy=\"p\",le=\"0.5\"} 1\nh_seconds_bucket{policy=\"p\",le=\"1\"} 3\n\
             h_seconds_bucket{policy=\"p\",le=\"+Inf\"} 6\nh_seconds_sum{policy=\"p\"} 7.5\nh_seconds_count{policy=\"p\"} 6\n"
        );
    }

    #[test]
    fn a_store_call_counts_in_one_bucket() {
        let metrics = Metrics::new(["p"]);
        metrics.store_latency(Duration::from_micros(50));
        metrics.store_latency(Duration::from_millis(3));
        metrics.store_latency(Duration::from_secs(2));
        let families = metrics.families(None);
        let MetricValue::Histogram(h) = &families[3].points[0].value else {
            panic!()
        };
        assert_eq!(h.bucket_counts, vec![1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(h.count, 3);
    }
}
