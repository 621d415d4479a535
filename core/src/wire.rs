//! The serialised forms every binding reads, all written here:
//! - an [`Outcome`] as JSON ([`OutcomeWire`]): the core's `to_value`, the
//!   C ABI's text, field names in snake_case;
//! - a request, its outcome and every finished call (decision, decisions,
//!   leases, error, count, ...) in the compact binary form of [`packed`]: the
//!   records the completion bridge hands every binding;
//! - a [`Decision`] as a record of numbers ([`decision_record`], the Node
//!   addon's batches of checks).
//!
//! A [`Source`](crate::Source) travels as its name
//! ([`Source::as_str`](crate::Source::as_str)) in JSON and as its place in
//! [`Source::ALL`](crate::Source::ALL) in the binary forms.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::decision::Decision;
use crate::http::{Outcome, RuleDecision};

pub mod packed;

/// The number of `f64`s in a [`decision_record`].
pub const DECISION_RECORD_LEN: usize = 8;

/// The decision of check `id` as a record of numbers, cheaper to hand to
/// JavaScript than an object (a `Float64Array` holds one after another):
/// `id`, `allowed` (0 or 1), `limit`, `remaining`, `reset_after_ms`,
/// `retry_after_ms` (-1 for none), `delay_ms`, and the source's place in
/// [`Source::ALL`](crate::Source::ALL). Counts and times above 2^53 lose
/// precision, as any JavaScript number does.
pub fn decision_record(id: u32, d: &Decision) -> [f64; DECISION_RECORD_LEN] {
    [
        f64::from(id),
        if d.allowed { 1.0 } else { 0.0 },
        d.limit as f64,
        d.remaining as f64,
        d.reset_after_ms as f64,
        d.retry_after_ms.map_or(-1.0, |v| v as f64),
        d.delay_ms as f64,
        d.source.index() as f64,
    ]
}

impl Outcome {
    /// The outcome as the JSON object bindings read ([`OutcomeWire`], snake_case).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(OutcomeWire::new(self)).unwrap_or(serde_json::Value::Null)
    }
}

/// An outcome ready to serialise: `status`, `headers` (`[name, value]`
/// pairs), `body`, `trailers` (only a refused gRPC call's), `delay_ms`, `completion` (only when the outcome has a
/// completion token) and, unless left out, `decisions`.
pub struct OutcomeWire<'a> {
    outcome: &'a Outcome,
    decisions: bool,
}

impl<'a> OutcomeWire<'a> {
    /// The whole outcome.
    pub fn new(outcome: &'a Outcome) -> Self {
        OutcomeWire {
            outcome,
            decisions: true,
        }
    }

    /// Without the per-policy decisions (a middleware only needs the answer).
    pub fn without_decisions(mut self) -> Self {
        self.decisions = false;
        self
    }
}

impl Serialize for OutcomeWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let o = self.outcome;
        let fields =
            4 + usize::from(self.decisions) + usize::from(o.completion.is_some()) + usize::from(!o.trailers.is_empty());
        let mut map = serializer.serialize_map(Some(fields))?;
        map.serialize_entry("status", &o.status)?;
        map.serialize_entry("headers", &o.headers)?;
        map.serialize_entry("body", &o.body)?;
        if !o.trailers.is_empty() {
            // Only a refused gRPC call has trailers.
            map.serialize_entry("trailers", &o.trailers)?;
        }
        map.serialize_entry("delay_ms", &o.delay_ms)?;
        if let Some(token) = &o.completion {
            // Only when there is one: the after-response token (`Limiter::complete`).
            map.serialize_entry("completion", token)?;
        }
        if self.decisions {
            let decisions: Vec<RuleDecisionWire<'_>> = o.decisions.iter().map(|d| RuleDecisionWire { d }).collect();
            map.serialize_entry("decisions", &decisions)?;
        }
        map.end()
    }
}

struct RuleDecisionWire<'a> {
    d: &'a RuleDecision,
}

impl Serialize for RuleDecisionWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let d = &self.d.decision;
        let mut map = serializer.serialize_map(Some(10))?;
        map.serialize_entry("rule", &*self.d.rule)?;
        map.serialize_entry("policy", &*self.d.policy)?;
        map.serialize_entry("allowed", &d.allowed)?;
        map.serialize_entry("limit", &d.limit)?;
        map.serialize_entry("remaining", &d.remaining)?;
        map.serialize_entry("reset_after_ms", &d.reset_after_ms)?;
        map.serialize_entry("retry_after_ms", &d.retry_after_ms)?;
        map.serialize_entry("delay_ms", &d.delay_ms)?;
        map.serialize_entry("source", d.source.as_str())?;
        map.serialize_entry("shadow", &self.d.shadow)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Decision, Source};
    use serde_json::json;

    fn outcome() -> Outcome {
        Outcome {
            status: Some(429),
            headers: [("Retry-After", "2")].into_iter().collect(),
            body: Some("{}".into()),
            trailers: crate::http::Headers::new(),
            delay_ms: 0,
            decisions: vec![RuleDecision {
                rule: "api".into(),
                policy: "per_ip".into(),
                decision: Decision {
                    allowed: false,
                    limit: 5,
                    remaining: 0,
                    reset_after_ms: 1500,
                    retry_after_ms: Some(1200),
                    delay_ms: 0,
                    source: Source::Store,
                },
                shadow: false,
            }],
            leases: Vec::new(),
            completion: None,
        }
    }

    #[test]
    fn a_decision_record_per_source() {
        for (i, &source) in Source::ALL.iter().enumerate() {
            let d = Decision {
                allowed: i % 2 == 0,
                limit: 5,
                remaining: 2,
                reset_after_ms: 1500,
                retry_after_ms: (i % 2 == 1).then_some(1200),
                delay_ms: 30,
                source,
            };
            let retry = if i % 2 == 1 { 1200.0 } else { -1.0 };
            let allowed = if i % 2 == 0 { 1.0 } else { 0.0 };
            assert_eq!(
                decision_record(u32::MAX, &d),
                [u32::MAX as f64, allowed, 5.0, 2.0, 1500.0, retry, 30.0, i as f64],
                "{source:?}"
            );
        }
    }

    #[test]
    fn the_json_form() {
        let o = outcome();
        let snake = serde_json::to_value(OutcomeWire::new(&o)).unwrap();
        assert_eq!(
            snake,
            json!({"status": 429, "headers": [["Retry-After", "2"]], "body": "{}", "delay_ms": 0,
                   "decisions": [{"rule": "api", "policy": "per_ip", "allowed": false, "limit": 5, "remaining": 0,
                                  "reset_after_ms": 1500, "retry_after_ms": 1200, "delay_ms": 0,
                                  "source": "store", "shadow": false}]})
        );
        let answer = serde_json::to_string(&OutcomeWire::new(&o).without_decisions()).unwrap();
        assert_eq!(
            answer,
            r#"{"status":429,"headers":[["Retry-After","2"]],"body":"{}","delay_ms":0}"#
        );
    }
}
