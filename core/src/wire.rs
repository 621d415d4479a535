//! The one serialised form of an [`Outcome`] every binding reads: the core's
//! JSON (`to_value`), the Node addon's batches and the C ABI's text all come
//! from here. Field names are snake_case, or camelCase for JavaScript; the
//! fields, their order and their values are the same.

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::http::{Outcome, RuleDecision};

impl Outcome {
    /// The outcome as the JSON object bindings read ([`OutcomeWire`], snake_case).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(OutcomeWire::new(self, Case::Snake)).unwrap_or(serde_json::Value::Null)
    }
}

/// How field names are spelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Case {
    /// `delay_ms`, `reset_after_ms` (Python, Go, the vectors).
    Snake,
    /// `delayMs`, `resetAfterMs` (JavaScript).
    Camel,
}

impl Case {
    fn name(self, snake: &'static str, camel: &'static str) -> &'static str {
        match self {
            Case::Snake => snake,
            Case::Camel => camel,
        }
    }
}

/// An outcome ready to serialise: `status`, `headers` (`[name, value]`
/// pairs), `body`, `delay_ms` and, unless left out, `decisions`.
pub struct OutcomeWire<'a> {
    outcome: &'a Outcome,
    case: Case,
    decisions: bool,
}

impl<'a> OutcomeWire<'a> {
    /// The whole outcome in `case`.
    pub fn new(outcome: &'a Outcome, case: Case) -> Self {
        OutcomeWire {
            outcome,
            case,
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
        let mut map = serializer.serialize_map(Some(4 + usize::from(self.decisions)))?;
        map.serialize_entry("status", &o.status)?;
        map.serialize_entry("headers", &o.headers)?;
        map.serialize_entry("body", &o.body)?;
        map.serialize_entry(self.case.name("delay_ms", "delayMs"), &o.delay_ms)?;
        if self.decisions {
            let decisions: Vec<RuleDecisionWire<'_>> = o
                .decisions
                .iter()
                .map(|d| RuleDecisionWire { d, case: self.case })
                .collect();
            map.serialize_entry("decisions", &decisions)?;
        }
        map.end()
    }
}

struct RuleDecisionWire<'a> {
    d: &'a RuleDecision,
    case: Case,
}

impl Serialize for RuleDecisionWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (d, name) = (&self.d.decision, |snake, camel| self.case.name(snake, camel));
        let mut map = serializer.serialize_map(Some(10))?;
        map.serialize_entry("rule", &self.d.rule)?;
        map.serialize_entry("policy", &self.d.policy)?;
        map.serialize_entry("allowed", &d.allowed)?;
        map.serialize_entry("limit", &d.limit)?;
        map.serialize_entry("remaining", &d.remaining)?;
        map.serialize_entry(name("reset_after_ms", "resetAfterMs"), &d.reset_after_ms)?;
        map.serialize_entry(name("retry_after_ms", "retryAfterMs"), &d.retry_after_ms)?;
        map.serialize_entry(name("delay_ms", "delayMs"), &d.delay_ms)?;
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
            headers: vec![("Retry-After".into(), "2".into())],
            body: Some("{}".into()),
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
        }
    }

    #[test]
    fn one_form_two_spellings() {
        let o = outcome();
        let snake = serde_json::to_value(OutcomeWire::new(&o, Case::Snake)).unwrap();
        assert_eq!(
            snake,
            json!({"status": 429, "headers": [["Retry-After", "2"]], "body": "{}", "delay_ms": 0,
                   "decisions": [{"rule": "api", "policy": "per_ip", "allowed": false, "limit": 5, "remaining": 0,
                                  "reset_after_ms": 1500, "retry_after_ms": 1200, "delay_ms": 0,
                                  "source": "store", "shadow": false}]})
        );
        let camel = serde_json::to_string(&OutcomeWire::new(&o, Case::Camel).without_decisions()).unwrap();
        assert_eq!(
            camel,
            r#"{"status":429,"headers":[["Retry-After","2"]],"body":"{}","delayMs":0}"#
        );
    }
}
