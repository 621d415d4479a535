//! The core's [`Outcome`]s of a request's descriptors as Envoy's
//! `RateLimitResponse`.
//!
//! Each descriptor's status describes one of its decisions: the first
//! enforced denial, else the enforced decision with the fewest requests left
//! (shadow rules only when nothing is enforced), like the rate-limit headers.
//! The response's headers and body are those of the first descriptor over
//! its limit, else of the one closest to it. A fail-closed policy's 503 is
//! answered `OVER_LIMIT` with the 503 body: the request is refused whatever
//! the proxy's `failure_mode_deny` says (an `UNAVAILABLE` error would let
//! Envoy's default fail open).

use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use crate::proto::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use crate::proto::envoy::service::ratelimit::v3::RateLimitResponse;
use crate::proto::google::protobuf::Duration;
use polylimit::{Limiter, Outcome, Policy, RuleDecision};

/// The response to a request whose descriptors had `outcomes`, in order
/// (the shown one's headers and body are moved into it).
pub fn response(limiter: &Limiter, mut outcomes: Vec<Outcome>) -> RateLimitResponse {
    let described: Vec<Option<&RuleDecision>> = outcomes.iter().map(described).collect();
    let statuses = outcomes
        .iter()
        .zip(&described)
        .map(|(outcome, d)| status(limiter, outcome, *d))
        .collect();
    let over = outcomes.iter().any(|o| o.status.is_some());
    // The descriptor whose headers (and body) the client gets.
    let shown = outcomes.iter().position(|o| o.status.is_some()).or_else(|| {
        (0..outcomes.len())
            .filter(|&i| described[i].is_some())
            .min_by_key(|&i| described[i].map(|d| d.decision.remaining))
    });
    let mut response = RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        ..RateLimitResponse::default()
    };
    if let Some(outcome) = shown.map(|i| &mut outcomes[i]) {
        response.response_headers_to_add = std::mem::take(&mut outcome.headers)
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key,
                value,
                ..HeaderValue::default()
            })
            .collect();
        if let (Some(_), Some(body)) = (outcome.status, outcome.body.take()) {
            response.raw_body = body.into_bytes();
            response.response_headers_to_add.push(HeaderValue {
                key: "content-type".into(),
                value: "application/json".into(),
                ..HeaderValue::default()
            });
        }
    }
    response
}

/// The decision a descriptor's status describes (`None`: no rule limits it).
fn described(outcome: &Outcome) -> Option<&RuleDecision> {
    let any_enforced = outcome.decisions.iter().any(|d| !d.shadow);
    let candidates = || outcome.decisions.iter().filter(move |d| !any_enforced || !d.shadow);
    candidates()
        .find(|d| !d.decision.allowed && !d.shadow)
        .or_else(|| candidates().min_by_key(|d| d.decision.remaining))
}

fn status(limiter: &Limiter, outcome: &Outcome, described: Option<&RuleDecision>) -> DescriptorStatus {
    let code = if outcome.status.is_some() {
        Code::OverLimit
    } else {
        Code::Ok
    };
    let Some(d) = described else {
        return DescriptorStatus {
            code: code as i32,
            ..DescriptorStatus::default()
        };
    };
    let current_limit = limiter.policy(&d.policy).map(|policy| {
        let (requests_per_unit, unit) = per_unit(&policy);
        RateLimit {
            name: d.policy.to_string(),
            requests_per_unit,
            unit: unit as i32,
        }
    });
    let reset = d.decision.reset_after_ms;
    DescriptorStatus {
        code: code as i32,
        current_limit,
        limit_remaining: u32::try_from(d.decision.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(Duration {
            seconds: (reset / 1000) as i64,
            nanos: ((reset % 1000) * 1_000_000) as i32,
        }),
        ..DescriptorStatus::default()
    }
}

/// The policy's rate in Envoy's terms: the smallest unit at least as long
/// as the period in which the rate is a whole number (`5/15min` → 20 per
/// hour); `UNKNOWN` with the policy's count when none is.
fn per_unit(policy: &Policy) -> (u32, Unit) {
    rate_per_unit(policy.count(), policy.period_ms())
}

fn rate_per_unit(count: u64, period_ms: u64) -> (u32, Unit) {
    const UNITS: [(u64, Unit); 7] = [
        (1_000, Unit::Second),
        (60_000, Unit::Minute),
        (3_600_000, Unit::Hour),
        (86_400_000, Unit::Day),
        (7 * 86_400_000, Unit::Week),
        (30 * 86_400_000, Unit::Month),
        (365 * 86_400_000, Unit::Year),
    ];
    let whole = |unit_ms: u64| {
        let scaled = u128::from(count) * u128::from(unit_ms);
        let period = u128::from(period_ms.max(1));
        (scaled % period == 0).then(|| scaled / period)
    };
    UNITS
        .iter()
        .filter(|(unit_ms, _)| *unit_ms >= period_ms)
        .find_map(|(unit_ms, unit)| Some((u32::try_from(whole(*unit_ms)?).ok()?, *unit)))
        .unwrap_or((u32::try_from(count).unwrap_or(u32::MAX), Unit::Unknown))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_become_whole_requests_per_unit() {
        assert_eq!(rate_per_unit(1, 1_000), (1, Unit::Second));
        assert_eq!(rate_per_unit(10, 100), (100, Unit::Second));
        assert_eq!(rate_per_unit(5, 900_000), (20, Unit::Hour));
        assert_eq!(rate_per_unit(100, 60_000), (100, Unit::Minute));
        assert_eq!(rate_per_unit(3, 7_000), (259_200, Unit::Week));
        assert_eq!(rate_per_unit(7, 86_400_000 * 400), (7, Unit::Unknown));
        assert_eq!(rate_per_unit(1 << 40, 1_000), (u32::MAX, Unit::Unknown));
    }
}
