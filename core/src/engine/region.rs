//! Multi-region quotas (issue 19): one policy over several stores, one Redis
//! per region, each holding its region's share of the global limit.
//!
//! A check goes to the local region's store (the limiter's store) first.
//! When it denies for quota (every decision came from the store, none from a
//! penalty block), the same check runs on each other region's store in turn
//! (in the regions' name order), charging the lender's share; the first that
//! allows admits the request. Each admitted unit is charged in exactly one
//! region's share and the shares' limits sum to at most the global limit
//! (they are apportioned in whole units, never rounded up), so the regions
//! together admit at most the global limit: no over-admission. A lender that
//! cannot answer (down, timed out, its breaker open) lends nothing: its own
//! breaker and the limiter's `timeout` bound the wait, and the local decision
//! stands, so one region's outage never blocks another.

use std::sync::atomic::{AtomicU64, Ordering};

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::decision::{CheckResult, Source};
use crate::engine::{CheckOptions, Engine, LimiterConfig, Target};
use crate::error::{Error, Result};
use crate::policy::{check_name, Algorithm, Policy};

/// One region: its name, its store and its share of every policy's limit.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionSpec {
    /// The region's name (`eu`).
    pub name: String,
    /// Its store: a `redis…://` URL.
    pub store: String,
    /// Its share of the global limit, above 0; the shares sum to 1.
    pub share: f64,
}

/// The `regions` and `region` options.
#[derive(Debug, Clone, PartialEq)]
pub struct RegionConfig {
    /// This process's region.
    pub local: String,
    /// Every region, in name order (the order lenders are asked in).
    pub regions: Vec<RegionSpec>,
}

impl RegionConfig {
    /// Parses `regions: { eu: "redis://…", us: { store: "redis://…", share: 0.4 } }`
    /// and `region: eu`. Errors name the field and the value.
    pub fn from_values(regions: &Value, region: Option<&Value>) -> Result<RegionConfig> {
        let map = regions
            .as_object()
            .ok_or_else(|| Error::config("regions", regions, "is not a map of region name to store"))?;
        if map.len() < 2 {
            return Err(Error::config(
                "regions",
                regions,
                "names fewer than two regions (one region is just a store)",
            ));
        }
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        let mut specs = Vec::with_capacity(names.len());
        let mut given = 0;
        for name in names {
            check_name("regions", name)?;
            let at = |f: &str| format!("regions.{name}.{f}");
            let (store, share) = match &map[name] {
                Value::String(s) => (s.clone(), None),
                Value::Object(o) => {
                    if let Some(k) = o.keys().find(|k| !["store", "share"].contains(&k.as_str())) {
                        return Err(Error::config(
                            at(k),
                            "",
                            "is not a region field (expected store, share)",
                        ));
                    }
                    let store = match o.get("store") {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => return Err(Error::config(at("store"), other, "is not a string")),
                        None => return Err(Error::config(at("store"), "", "is required")),
                    };
                    let share =
                        match o.get("share") {
                            None | Some(Value::Null) => None,
                            Some(v) => Some(v.as_f64().filter(|s| *s > 0.0 && *s <= 1.0).ok_or_else(|| {
                                Error::config(at("share"), v, "is not a number above 0 and at most 1")
                            })?),
                        };
                    (store, share)
                }
                other => {
                    return Err(Error::config(
                        format!("regions.{name}"),
                        other,
                        "is not a store URL or { store, share }",
                    ))
                }
            };
            if !store.starts_with("redis") {
                return Err(Error::config(
                    at("store"),
                    format!("{store:?}"),
                    "is not a Redis store (redis://…, rediss://…, redis+cluster://…, redis+sentinel://…)",
                ));
            }
            if let Some(other) = specs.iter().find(|s: &&RegionSpec| s.store == store) {
                return Err(Error::config(
                    at("store"),
                    format!("{store:?}"),
                    format!("is region {}'s store too: each region has its own", other.name),
                ));
            }
            given += share.is_some() as usize;
            specs.push(RegionSpec {
                name: name.clone(),
                store,
                share: share.unwrap_or(0.0),
            });
        }
        let n = specs.len();
        if given == 0 {
            for s in &mut specs {
                s.share = 1.0 / n as f64;
            }
        } else if given < n {
            let missing = specs
                .iter()
                .find(|s| s.share == 0.0)
                .map(|s| s.name.clone())
                .unwrap_or_default();
            return Err(Error::config(
                format!("regions.{missing}.share"),
                "",
                "is missing: give every region a share, or none (equal shares)",
            ));
        } else {
            let sum: f64 = specs.iter().map(|s| s.share).sum();
            if (sum - 1.0).abs() > 1e-6 {
                return Err(Error::config(
                    "regions",
                    format!("shares summing to {sum}"),
                    "do not sum to 1",
                ));
            }
        }
        let local = match region {
            None | Some(Value::Null) => {
                return Err(Error::config(
                    "region",
                    "",
                    "is required with regions: the name of this process's region",
                ))
            }
            Some(Value::String(s)) => s.clone(),
            Some(other) => return Err(Error::config("region", other, "is not a region name")),
        };
        if !specs.iter().any(|s| s.name == local) {
            let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
            return Err(Error::config(
                "region",
                format!("{local:?}"),
                format!("is not one of the regions ({})", names.join(", ")),
            ));
        }
        Ok(RegionConfig { local, regions: specs })
    }

    /// The local region.
    pub fn local_spec(&self) -> &RegionSpec {
        self.regions
            .iter()
            .find(|s| s.name == self.local)
            .unwrap_or(&self.regions[0])
    }

    /// The options as a rules document writes them (for `effective_config`).
    pub fn to_value(&self) -> Value {
        let map: Map<String, Value> = self
            .regions
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    serde_json::json!({ "store": s.store, "share": s.share }),
                )
            })
            .collect();
        Value::Object(map)
    }

    /// `total` split into whole units by share: floors, then the units left
    /// to the largest remainders (earlier regions first on a tie). The parts
    /// sum to exactly `total`, never more.
    fn apportion(&self, total: u64) -> Vec<u64> {
        let exact: Vec<f64> = self.regions.iter().map(|s| total as f64 * s.share).collect();
        let mut parts: Vec<u64> = exact.iter().map(|x| (x + 1e-9).floor() as u64).collect();
        let sum: u64 = parts.iter().sum();
        if sum > total {
            // Only from rounding of shares summing to a hair above 1.
            let mut over = sum - total;
            for p in parts.iter_mut().rev() {
                let take = over.min(*p);
                *p -= take;
                over -= take;
            }
            return parts;
        }
        let mut order: Vec<usize> = (0..parts.len()).collect();
        order.sort_by(|&a, &b| {
            let (fa, fb) = (exact[a] - parts[a] as f64, exact[b] - parts[b] as f64);
            fb.partial_cmp(&fa).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b))
        });
        for &i in order.iter().take((total - sum) as usize) {
            parts[i] += 1;
        }
        parts
    }

    /// Every region's version of `policy`: the same algorithm, its share of
    /// the limit (burst, or count per window) and of the rate.
    fn split(&self, policy: &Policy, field: &str) -> Result<Vec<Policy>> {
        if policy.algorithm() == Algorithm::Concurrency {
            return Err(Error::config(
                field,
                format!("{:?}", policy.name()),
                "is a concurrency policy, which regions cannot split (leases are released where they were taken)",
            ));
        }
        // Windows: the count per window is split in whole units. Buckets:
        // the burst is, and the rate is stretched (the period divided by the
        // share, rounded up), so the regions' rates sum to at most the rate.
        let window = policy.algorithm().is_window();
        let bursts = self.apportion(policy.burst());
        let counts = if window {
            self.apportion(policy.count())
        } else {
            vec![policy.count(); self.regions.len()]
        };
        self.regions
            .iter()
            .zip(counts.iter().zip(&bursts))
            .map(|(spec, (&count, &burst))| {
                if count == 0 || burst == 0 {
                    return Err(Error::config(
                        format!("regions.{}.share", spec.name),
                        spec.share,
                        format!(
                            "leaves region {} no quota of policy {:?} (limit {}): raise the share or the limit",
                            spec.name,
                            policy.name(),
                            policy.burst()
                        ),
                    ));
                }
                let period = if window {
                    policy.period_ms()
                } else {
                    (policy.period_ms() as f64 / spec.share - 1e-6).ceil() as u64
                };
                let mut value = policy.to_value();
                value["rate"] = Value::String(format!("{count}/{period}ms"));
                if value.get("burst").is_some() {
                    value["burst"] = burst.into();
                }
                Policy::from_value(&value, field).map(|p| p.with_name(policy.name()))
            })
            .collect()
    }
}

/// Outcomes of a borrow, the `result` label of `polylimit_region_borrows_total`:
/// `skipped` is a borrow not sent, the lender having refused the same check
/// with a retry time not yet reached.
const RESULTS: [&str; 4] = ["granted", "refused", "unavailable", "skipped"];

/// Most checks a lender's refusals are remembered for.
const REFUSALS_KEPT: usize = 10_000;

/// Another region's store, to borrow from.
struct Lender {
    name: String,
    engine: Engine,
    /// Borrows by [`RESULTS`].
    counts: [AtomicU64; 4],
    /// Checks (targets and cost) the lender refused → its clock's ms until
    /// which it cannot allow them (its decision's retry time): asking again
    /// sooner would be refused too. Skipping such a borrow can only deny
    /// what the lender might have allowed (its key reset meanwhile), never
    /// admit more.
    refused: Mutex<HashMap<String, i64>>,
}

/// The identity of a check: its targets and cost.
fn check_id(targets: &[Target<'_>], cost: u64) -> String {
    let mut id = cost.to_string();
    for (i, key, shadow) in targets {
        id.push('\0');
        id.push_str(&i.to_string());
        id.push(if *shadow { 's' } else { 'e' });
        id.push_str(key);
    }
    id
}

/// Most borrowed admissions remembered for a refund.
const LOANS_KEPT: usize = 100_000;

/// Borrowed admissions, for a refund (`count: failed`) to reach the lender.
#[derive(Default)]
struct Loans {
    /// (policy index, key, decision time, cost) → the lenders that admitted it.
    by_check: HashMap<(usize, String, i64, i64), Vec<usize>>,
    /// Loans decided before this time may have been forgotten (the map was
    /// full): their refunds, and local ones then too, keep the charge.
    forgotten_before: i64,
}

/// The regions of a limiter: the other regions' stores.
pub(crate) struct Regions {
    lenders: Vec<Lender>,
    loans: Mutex<Loans>,
}

impl Regions {
    /// For a limiter with regions: the lenders (one engine per other region,
    /// each on its share, without penalties, a failure lending nothing) and
    /// the local region's share of each policy. Sets the limiter's store to
    /// the local region's, refusing another.
    /// The lenders send their alerts to `alerts`, the limiter's own.
    pub(crate) fn build(
        config: &mut LimiterConfig,
        alerts: &std::sync::Arc<crate::anomaly::Alerts>,
    ) -> Result<Option<(Regions, Vec<Policy>)>> {
        let Some(rc) = config.regions.clone() else {
            return Ok(None);
        };
        let local = rc.local_spec().clone();
        if config.store != "memory" && config.store != local.store {
            return Err(Error::config(
                "store",
                format!("{:?}", config.store),
                format!(
                    "conflicts with regions.{}.store {:?}: with regions, the local region's store is the limiter's",
                    local.name, local.store
                ),
            ));
        }
        if config.overrides {
            return Err(Error::config(
                "overrides",
                "true",
                "cannot be combined with regions (an override's limit is not split across them)",
            ));
        }
        config.store = local.store.clone();
        let mut per_region: Vec<Vec<Policy>> = vec![Vec::new(); rc.regions.len()];
        for (i, policy) in config.policies.iter().enumerate() {
            for (r, scaled) in rc.split(policy, &format!("policies[{i}]"))?.into_iter().enumerate() {
                per_region[r].push(scaled);
            }
        }
        let mut local_policies = Vec::new();
        let mut lenders = Vec::new();
        for (spec, policies) in rc.regions.iter().zip(per_region) {
            if spec.name == local.name {
                local_policies = policies;
                continue;
            }
            let policies = policies
                .into_iter()
                .map(|p| {
                    let mut v = p.to_value();
                    if let Some(o) = v.as_object_mut() {
                        // The lender's denial is no offence of the key; its failure lends nothing.
                        o.remove("penalty");
                        o.insert("on_store_error".into(), "fail_closed".into());
                    }
                    Policy::from_value(&v, "policies")
                })
                .collect::<Result<Vec<_>>>()?;
            let mut lender = LimiterConfig::new(policies[0].clone()).with_store(spec.store.clone());
            lender.policies = policies;
            lender.prefix = config.prefix.clone();
            lender.max_keys = 1024;
            lender.timeout = config.timeout;
            lender.connect_timeout = config.connect_timeout;
            lender.breaker = config.breaker;
            lender.tls_ca = config.tls_ca.clone();
            lender.anomaly_log = config.anomaly_log;
            let engine = Engine::with_alerts(lender, alerts.clone()).map_err(|e| match e {
                Error::Config { field, value, message } if field == "store" => Error::Config {
                    field: format!("regions.{}.store", spec.name),
                    value,
                    message,
                },
                other => other,
            })?;
            lenders.push(Lender {
                name: spec.name.clone(),
                engine,
                counts: Default::default(),
                refused: Mutex::new(HashMap::new()),
            });
        }
        Ok(Some((
            Regions {
                lenders,
                loans: Mutex::default(),
            },
            local_policies,
        )))
    }

    /// After the local region decided `local` for a charged check: when it
    /// denied for quota, borrows from the other regions in turn. A borrowed
    /// admission returns the lender's decisions (its share's remaining and
    /// reset) with the global policies' `limit`; otherwise `local` stands.
    pub(crate) async fn borrow(
        &self,
        targets: &[Target<'_>],
        options: CheckOptions,
        local: CheckResult,
        limit: impl Fn(usize) -> u64,
    ) -> Result<CheckResult> {
        if local.allowed || local.decisions.iter().any(|d| d.source != Source::Store) {
            return Ok(local);
        }
        let id = check_id(targets, options.cost);
        for (n, lender) in self.lenders.iter().enumerate() {
            if lender
                .refused
                .lock()
                .get(&id)
                .is_some_and(|&until| local.now_ms < until)
            {
                lender.counts[3].fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let answer = lender.engine.decide_local(targets, options, true).await;
            let result = match answer {
                Ok(r) if r.decisions.iter().all(|d| d.source == Source::Store) => r,
                // Failed, timed out, breaker open, or the key holds foreign data there.
                _ => {
                    lender.counts[2].fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            };
            if !result.allowed {
                lender.counts[1].fetch_add(1, Ordering::Relaxed);
                let retry = result.decisions.iter().filter(|d| !d.allowed).map(|d| d.retry_after_ms);
                // The latest retry of the denying policies (none: the cost never fits, ask again).
                if let Some(Some(retry)) = retry.max() {
                    let mut refused = lender.refused.lock();
                    if refused.len() >= REFUSALS_KEPT {
                        refused.retain(|_, until| *until > result.now_ms);
                        if refused.len() >= REFUSALS_KEPT {
                            refused.clear();
                        }
                    }
                    refused.insert(id.clone(), result.now_ms + retry as i64);
                }
                continue;
            }
            lender.refused.lock().remove(&id);
            self.lent(n, targets, result.now_ms, options.cost as i64);
            lender.counts[0].fetch_add(1, Ordering::Relaxed);
            let mut result = result;
            for (d, &(i, _, _)) in result.decisions.iter_mut().zip(targets) {
                d.limit = limit(i);
            }
            return Ok(result);
        }
        Ok(local)
    }

    /// Remembers that lender `n` admitted `targets` at `now` for `cost`.
    fn lent(&self, n: usize, targets: &[Target<'_>], now: i64, cost: i64) {
        let mut loans = self.loans.lock();
        if loans.by_check.len() >= LOANS_KEPT {
            let newest = loans.by_check.keys().map(|k| k.2).max().unwrap_or(now);
            loans.forgotten_before = loans.forgotten_before.max(newest + 1);
            loans.by_check.clear();
        }
        for &(i, key, _) in targets {
            loans
                .by_check
                .entry((i, key.to_string(), now, cost))
                .or_default()
                .push(n);
        }
    }

    /// Gives back admissions (`Engine::refund_guarded`): a borrowed one to
    /// its lender, a local one to the local store; one whose loan may have
    /// been forgotten to neither (the charge stays: an under-admission,
    /// never an over-admission). Returns how many were given back.
    pub(crate) async fn refund(&self, local: &Engine, targets: &[(usize, &str)], now: i64, cost: i64) -> usize {
        let mut own = Vec::new();
        let mut lent: Vec<Vec<(usize, &str)>> = vec![Vec::new(); self.lenders.len()];
        {
            let mut loans = self.loans.lock();
            for &(i, key) in targets {
                let id = (i, key.to_string(), now, cost);
                let lender = loans.by_check.get_mut(&id).and_then(|lenders| lenders.pop());
                if loans.by_check.get(&id).is_some_and(Vec::is_empty) {
                    loans.by_check.remove(&id);
                }
                match lender {
                    Some(n) => lent[n].push((i, key)),
                    None if now >= loans.forgotten_before => own.push((i, key)),
                    None => {}
                }
            }
        }
        let mut given = 0;
        if !own.is_empty() {
            given += local.refund_store(&own, now, cost).await;
        }
        for (lender, targets) in self.lenders.iter().zip(&lent) {
            if !targets.is_empty() {
                given += lender.engine.refund_store(targets, now, cost).await;
            }
        }
        given
    }

    /// Forgets `(policy index, key)` targets in every other region's store
    /// that answers (a region down keeps its state: `reset` never fails for
    /// another region's outage), and the refusals remembered for them.
    pub(crate) async fn forget(&self, targets: &[(usize, &str)]) {
        for lender in &self.lenders {
            let _ = lender.engine.forget_local(targets).await;
            // Refusals of checks on these keys: the ids hold the keys.
            lender.refused.lock().retain(|id, _| {
                !targets
                    .iter()
                    .any(|&(i, key)| id.contains(&format!("\0{i}e{key}")) || id.contains(&format!("\0{i}s{key}")))
            });
        }
    }

    /// `polylimit_region_borrows_total{region,result}`.
    pub(crate) fn family(&self) -> crate::metrics::MetricFamily {
        let names: Vec<String> = self
            .lenders
            .iter()
            .map(|lender| lender.name.replace(['\\', '"', '\n'], "_"))
            .collect();
        let points = self.lenders.iter().zip(&names).flat_map(|(lender, name)| {
            RESULTS.iter().zip(&lender.counts).map(move |(result, n)| {
                (
                    vec![("region", name.as_str()), ("result", *result)],
                    n.load(Ordering::Relaxed) as i64,
                )
            })
        });
        crate::metrics::family(
            "polylimit_region_borrows_total",
            crate::metrics::MetricKind::Counter,
            "Checks the local region denied for quota, sent to another region: granted, refused, unavailable.",
            points,
        )
    }

    /// Closes the lenders' engines.
    pub(crate) fn close(&self) {
        for lender in &self.lenders {
            lender.engine.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;
    use serde_json::json;

    use super::RegionConfig;
    use crate::algorithm::adaptive::{AdaptiveReport, Transition};
    use crate::engine::{Engine, LimiterConfig};
    use crate::policy::Policy;

    /// A lender's alerts go to its borrower's sinks (issue 32 item 9): its
    /// callback, and not the stderr line `anomaly_log: false` turned off.
    /// Before, a lender had a default configuration of its own.
    #[test]
    fn a_lenders_alerts_reach_its_borrowers_sinks() {
        let policy = Policy::from_value(&json!({"rate": "100/s", "adaptive": {}}), "policy").unwrap();
        let mut config = LimiterConfig::new(policy);
        // Connected lazily: no server is needed to build the lenders.
        let regions = json!({ "eu": "redis://127.0.0.1:1", "us": "redis://127.0.0.1:2" });
        config.regions = Some(RegionConfig::from_values(&regions, Some(&json!("eu"))).unwrap());
        config.anomaly_log = false;
        let engine = Engine::new(config).unwrap();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink = seen.clone();
        engine
            .alerts()
            .set_sink(Some(Arc::new(move |e: &crate::adaptive::AnomalyEvent| {
                sink.lock().push(e.policy.clone())
            })));
        let lenders = &engine.inner.regions.as_ref().expect("regions").lenders;
        assert_eq!(lenders.len(), 1);
        let lender = &lenders[0].engine;
        let report = AdaptiveReport {
            anomalous: true,
            transition: Transition::Anomalous,
            window_requests: 500,
            baseline_milli: 10_000,
            denied: false,
        };
        let policy = lender.policy_at(0);
        lender
            .alerts()
            .transition(policy.name(), policy.adaptive().unwrap(), "k", &report, 1_000);
        assert_eq!(
            *seen.lock(),
            ["default"],
            "the borrower's callback got the lender's alert"
        );
        assert!(
            std::ptr::eq(lender.alerts(), engine.alerts()),
            "one log setting, one set of metrics"
        );
    }
}
