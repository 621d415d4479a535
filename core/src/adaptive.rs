//! Adaptive limits per key: the `adaptive` field of a policy (parsed here),
//! and the alerts a limiter sends when a key becomes anomalous or recovers.
//! The arithmetic lives in `algorithm/adaptive.rs` and `lua/adaptive.lua`.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::background::{Background, Running};
use crate::duration::parse_duration_ms;
use crate::error::{Error, Result};

/// `adaptive: { window, horizon, factor, floor, min_rate, alert_keys }` on a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adaptive {
    /// The short window the rate is measured over (default 2 min).
    pub window_ms: u64,
    /// The baseline's horizon in windows (`horizon / window`, default 10 min / 2 min = 5).
    pub horizon_windows: u64,
    /// Anomalous above `factor` x baseline, in hundredths (default 20 = 2000).
    pub factor_centi: u64,
    /// Requests per window below which a key is never anomalous (default `1/s`).
    pub floor_per_window: u64,
    /// Requests per window a mitigated key keeps at least (default `1/s`).
    pub min_per_window: u64,
    /// How alerts show the key.
    pub alert_keys: AlertKeys,
}

/// How alerts show a key (`alert_keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKeys {
    /// The default: a rule's key dimensions as they are (`user=acme|route=/pay`),
    /// except `ip` and `key` values, hashed (`ip=sha256:<16 hex>`); any other
    /// key (a caller's own, which may be an address) hashed whole.
    Dimensions,
    /// `sha256:<16 hex>` of the whole key.
    Hash,
    /// The key as it is, addresses included.
    Raw,
}

impl AlertKeys {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKeys::Dimensions => "dimensions",
            AlertKeys::Hash => "hash",
            AlertKeys::Raw => "raw",
        }
    }
}

const FIELDS: [&str; 6] = ["window", "horizon", "factor", "floor", "min_rate", "alert_keys"];
const MAX_WINDOW_MS: u64 = 86_400_000;

/// Parses a policy's `adaptive` object (`path` names it in errors).
pub(crate) fn parse(value: &Value, path: &str) -> Result<Adaptive> {
    let empty = Map::new();
    let obj: &Map<String, Value> = match value {
        Value::Bool(true) => &empty,
        Value::Object(obj) => obj,
        _ => {
            return Err(Error::config(
                path,
                value,
                "is not an object (or true for the defaults)",
            ))
        }
    };
    for key in obj.keys() {
        if !FIELDS.contains(&key.as_str()) {
            return Err(Error::config(
                format!("{path}.{key}"),
                "",
                "is not an adaptive field (expected one of window, horizon, factor, floor, min_rate, alert_keys)",
            ));
        }
    }
    let field = |name: &str| format!("{path}.{name}");
    let duration = |name: &str, default: u64| -> Result<u64> {
        match obj.get(name) {
            None => Ok(default),
            Some(v) => v
                .as_str()
                .and_then(parse_duration_ms)
                .filter(|ms| (100..=MAX_WINDOW_MS).contains(ms))
                .ok_or_else(|| Error::config(field(name), v, "is not a duration from 100ms to 1d")),
        }
    };
    let window_ms = duration("window", 120_000)?;
    let horizon_ms = duration("horizon", 600_000)?;
    let horizon_windows = horizon_ms / window_ms;
    if !horizon_ms.is_multiple_of(window_ms) || !(2..=1000).contains(&horizon_windows) {
        return Err(Error::config(
            field("horizon"),
            obj.get("horizon").cloned().unwrap_or_else(|| "10m".into()),
            format!("is not a multiple of 2 to 1000 windows ({window_ms}ms)"),
        ));
    }
    let factor_centi = match obj.get("factor") {
        None => 2000,
        Some(v) => v
            .as_f64()
            .map(|f| (f * 100.0).round())
            .filter(|c| (101.0..=100_000.0).contains(c))
            .map(|c| c as u64)
            .ok_or_else(|| Error::config(field("factor"), v, "is not a number above 1 and at most 1000"))?,
    };
    let per_window = |name: &str| -> Result<u64> {
        match obj.get(name) {
            None => Ok(window_ms.div_ceil(1000)),
            Some(v) => {
                let bad = || Error::config(field(name), v, "is not \"<n>/<duration>\" with n and duration > 0");
                let text = v.as_str().ok_or_else(bad)?.trim();
                let (n, d) = text
                    .split_once('/')
                    .or_else(|| text.split_once(" per "))
                    .ok_or_else(bad)?;
                let n: u64 = n.trim().parse().ok().filter(|n| *n > 0).ok_or_else(bad)?;
                let d = parse_duration_ms(d).filter(|d| *d > 0).ok_or_else(bad)?;
                let per = (n as u128 * window_ms as u128).div_ceil(d as u128);
                // Half the arithmetic's count cap (algorithm/adaptive.rs: 2^24).
                if per > 8_388_608 {
                    return Err(Error::config(
                        field(name),
                        v,
                        "is more than 8388608 requests per window",
                    ));
                }
                Ok(per as u64)
            }
        }
    };
    let floor_per_window = per_window("floor")?;
    let min_per_window = per_window("min_rate")?;
    let alert_keys = match obj.get("alert_keys") {
        None => AlertKeys::Dimensions,
        Some(v) => match v.as_str() {
            Some("dimensions") => AlertKeys::Dimensions,
            Some("hash") => AlertKeys::Hash,
            Some("raw") => AlertKeys::Raw,
            _ => {
                return Err(Error::config(
                    field("alert_keys"),
                    v,
                    "is not one of dimensions, hash, raw",
                ))
            }
        },
    };
    Ok(Adaptive {
        window_ms,
        horizon_windows,
        factor_centi,
        floor_per_window,
        min_per_window,
        alert_keys,
    })
}

impl Adaptive {
    /// The object [`parse`] reads back, every field spelled out.
    pub(crate) fn to_value(&self) -> Value {
        let w = self.window_ms;
        let mut out = Map::new();
        out.insert("window".into(), format!("{w}ms").into());
        out.insert("horizon".into(), format!("{}ms", w * self.horizon_windows).into());
        let factor = if self.factor_centi.is_multiple_of(100) {
            Value::from(self.factor_centi / 100)
        } else {
            Value::from(self.factor_centi as f64 / 100.0)
        };
        out.insert("factor".into(), factor);
        out.insert("floor".into(), format!("{}/{w}ms", self.floor_per_window).into());
        out.insert("min_rate".into(), format!("{}/{w}ms", self.min_per_window).into());
        out.insert("alert_keys".into(), self.alert_keys.as_str().into());
        Value::Object(out)
    }
}

/// What an alert reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnomalyKind {
    /// The key's rate went above `factor` x its baseline: its budget shrinks.
    Anomalous,
    /// The key's rate fell back: its budget is restored.
    Recovered,
}

impl AnomalyKind {
    /// `anomalous` or `recovered`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnomalyKind::Anomalous => "anomalous",
            AnomalyKind::Recovered => "recovered",
        }
    }
}

/// An alert: a key became anomalous, or recovered.
#[derive(Debug, Clone, PartialEq)]
pub struct AnomalyEvent {
    /// What happened.
    pub kind: AnomalyKind,
    /// The policy's name.
    pub policy: String,
    /// The key as `alert_keys` says: by default a rule's dimensions with
    /// `ip` and `key` values hashed (`ip=sha256:<16 hex>|route=/pay`).
    pub key: String,
    /// Requests per second over the short window, this one included.
    pub rate: f64,
    /// The key's baseline, in requests per second.
    pub baseline: f64,
    /// The budget while anomalous, in requests per second (0 after recovery).
    pub limited_to: f64,
    /// The decision's time (store time), ms since the epoch.
    pub at_ms: i64,
    /// Alerts of this policy suppressed by the storm limit since the last one delivered.
    pub suppressed: u64,
}

impl AnomalyEvent {
    /// The event as one JSON object (the log line and the bindings' form).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "event": format!("polylimit.{}", self.kind.as_str()),
            "policy": self.policy,
            "key": self.key,
            "rate": self.rate,
            "baseline": self.baseline,
            "action": if self.kind == AnomalyKind::Anomalous { "limit" } else { "restore" },
            "limited_to": self.limited_to,
            "at_ms": self.at_ms,
            "suppressed": self.suppressed,
        })
    }
}

/// Receives alerts. `Limiter::on_anomaly` runs it on a thread of its own
/// ([`on_a_thread`]); a panic in it is caught and counted, never reaching
/// the request.
pub type AnomalySink = Arc<dyn Fn(&AnomalyEvent) + Send + Sync>;

/// A sink that hands each alert to `deliver` on a thread of its own, in
/// order, never on the deciding task (bindings call into their language
/// there). The thread ends when the sink is dropped; at most 1024 alerts
/// wait, more are dropped and counted in `dropped`.
pub fn on_a_thread(
    name: &str,
    deliver: impl Fn(AnomalyEvent) + Send + 'static,
    dropped: Arc<std::sync::atomic::AtomicU64>,
) -> std::io::Result<AnomalySink> {
    on_a_counted_thread(name, deliver, dropped, None)
}

/// [`on_a_thread`], each alert counted in `background` from the moment it is
/// queued until it was delivered (or dropped).
pub(crate) fn on_a_counted_thread(
    name: &str,
    deliver: impl Fn(AnomalyEvent) + Send + 'static,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    background: Option<Arc<Background>>,
) -> std::io::Result<AnomalySink> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<(AnomalyEvent, Option<Running>)>(1024);
    std::thread::Builder::new().name(name.to_string()).spawn(move || {
        for (event, _running) in rx {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| deliver(event)));
        }
    })?;
    let tx = Mutex::new(tx);
    Ok(Arc::new(move |event: &AnomalyEvent| {
        let running = background.as_ref().map(|b| b.start());
        if tx.lock().try_send((event.clone(), running)).is_err() {
            dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value) -> String {
        parse(&v, "adaptive").unwrap_err().to_string()
    }

    #[test]
    fn defaults_and_errors() {
        let a = parse(&json!({}), "adaptive").unwrap();
        assert_eq!((a.window_ms, a.horizon_windows, a.factor_centi), (120_000, 5, 2000));
        assert_eq!((a.floor_per_window, a.min_per_window), (120, 120));
        assert_eq!(parse(&a.to_value(), "adaptive").unwrap(), a);
        assert_eq!(a.alert_keys, AlertKeys::Dimensions);
        assert!(err(json!({"factor": 1})).starts_with("adaptive.factor: 1 "));
        assert!(err(json!({"window": "1m", "horizon": "90s"})).starts_with("adaptive.horizon: \"90s\" "));
        assert!(err(json!({"floor": "x"})).starts_with("adaptive.floor: \"x\" "));
        assert!(err(json!({"bogus": 1})).starts_with("adaptive.bogus: "));
    }
}
