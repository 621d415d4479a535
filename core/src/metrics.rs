//! Prometheus text metrics. Labels are bounded: policy names, route templates
//! from the rules file, decisions and sources — never a raw key or address.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::breaker::BreakerState;
use crate::decision::{Decision, Source};

const SOURCES: [Source; 8] = Source::ALL;

/// Upper bounds of the store latency histogram, in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

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
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
}

impl Registry {
    /// Counts a reload of the limiter's configuration (`polylimit_config_reloads_total`).
    pub fn reload(&self, ok: bool) {
        self.reloads[ok as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Marks the limiter as one that can reload.
    pub fn set_reloadable(&self) {
        self.reloadable.store(true, Ordering::Relaxed);
    }
}

impl Metrics {
    pub fn new<'a>(policies: impl IntoIterator<Item = &'a str>) -> Metrics {
        Metrics::on(Arc::default(), policies)
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
    pub fn render_block_cache(&self, out: &mut String, keys: usize, max_keys: usize) {
        let _ = writeln!(out, "# HELP polylimit_block_cache_hits_total Checks denied by the blocked-key cache, without a store call.\n# TYPE polylimit_block_cache_hits_total counter");
        for ((policy, _), n) in self.per_policy.iter().zip(&self.block_cache_hits) {
            let _ = writeln!(
                out,
                "polylimit_block_cache_hits_total{{policy=\"{}\"}} {}",
                label(policy),
                n.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(out, "# HELP polylimit_block_cache_keys Denied (policy, key) pairs the blocked-key cache holds.\n# TYPE polylimit_block_cache_keys gauge");
        let _ = writeln!(out, "polylimit_block_cache_keys {keys}");
        let _ = writeln!(out, "# HELP polylimit_block_cache_max_keys The blocked-key cache's bound.\n# TYPE polylimit_block_cache_max_keys gauge");
        let _ = writeln!(out, "polylimit_block_cache_max_keys {max_keys}");
    }

    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn store_latency(&self, elapsed: Duration) {
        let secs = elapsed.as_secs_f64();
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            if secs <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
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

    pub fn store_errors(&self) -> u64 {
        self.store_errors.load(Ordering::Relaxed)
    }

    pub fn render(&self, breaker: Option<BreakerState>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP polylimit_requests_total Rate limit decisions.\n# TYPE polylimit_requests_total counter"
        );
        for (policy, counts) in &self.per_policy {
            for (source, by_verdict) in SOURCES.iter().zip(counts.iter()) {
                for (verdict, n) in ["denied", "allowed"].iter().zip(by_verdict) {
                    let n = n.load(Ordering::Relaxed);
                    if n > 0 {
                        let _ = writeln!(out, "polylimit_requests_total{{policy=\"{}\",route=\"\",decision=\"{verdict}\",source=\"{}\"}} {n}", label(policy), source.as_str());
                    }
                }
            }
        }
        let requests = self.requests.lock();
        let labels = requests
            .iter()
            .flat_map(|(p, routes)| routes.iter().map(move |(r, counts)| (p, r, counts)));
        for (policy, route, counts) in labels {
            for ((verdict, source), n) in counts {
                let _ = writeln!(
                    out,
                    "polylimit_requests_total{{policy=\"{}\",route=\"{}\",decision=\"{verdict}\",source=\"{source}\"}} {n}",
                    label(policy),
                    label(route)
                );
            }
        }
        drop(requests);
        let _ = writeln!(out, "# HELP rate_limit_blocked_total Requests blocked by a rate limit.\n# TYPE rate_limit_blocked_total counter");
        let blocked = self.blocked.lock();
        let labels = blocked
            .iter()
            .flat_map(|(p, routes)| routes.iter().map(move |(r, n)| ((p, r), n)));
        for ((policy, route), n) in labels {
            let _ = writeln!(
                out,
                "rate_limit_blocked_total{{policy=\"{}\",route=\"{}\"}} {n}",
                label(policy),
                label(route)
            );
        }
        drop(blocked);
        let _ = writeln!(out, "# HELP polylimit_store_errors_total Store calls that failed or timed out.\n# TYPE polylimit_store_errors_total counter");
        let _ = writeln!(out, "polylimit_store_errors_total {}", self.store_errors());
        let _ = writeln!(out, "# HELP polylimit_store_latency_seconds Store call latency.\n# TYPE polylimit_store_latency_seconds histogram");
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            let _ = writeln!(
                out,
                "polylimit_store_latency_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(out, "polylimit_store_latency_seconds_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "polylimit_store_latency_seconds_sum {}",
            self.latency_sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "polylimit_store_latency_seconds_count {count}");
        if self.reloadable.load(Ordering::Relaxed) {
            let _ = writeln!(out, "# HELP polylimit_config_reloads_total Reloads of the limiter's configuration, by result.\n# TYPE polylimit_config_reloads_total counter");
            for (result, n) in ["error", "ok"].iter().zip(&self.reloads) {
                let _ = writeln!(
                    out,
                    "polylimit_config_reloads_total{{result=\"{result}\"}} {}",
                    n.load(Ordering::Relaxed)
                );
            }
        }
        if let Some(state) = breaker {
            let _ = writeln!(out, "# HELP polylimit_breaker_state Store circuit breaker: 0 closed, 1 open, 2 half-open.\n# TYPE polylimit_breaker_state gauge");
            let _ = writeln!(out, "polylimit_breaker_state {}", state as u8);
        }
        out
    }
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
