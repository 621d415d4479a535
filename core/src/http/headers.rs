//! Rate-limit response headers and bodies, identical in every language.

use crate::decision::Decision;
use crate::policy::{Algorithm, Policy};

/// Which rate-limit headers a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderMode {
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`.
    Legacy,
    /// `RateLimit-Policy` and `RateLimit` (IETF draft-ietf-httpapi-ratelimit-headers).
    Ietf,
    /// Both.
    Both,
    /// None (`Retry-After` is still sent on 429 and 503).
    None,
}

impl HeaderMode {
    pub(crate) fn parse(text: &str) -> Option<HeaderMode> {
        Some(match text {
            "legacy" => HeaderMode::Legacy,
            "ietf" => HeaderMode::Ietf,
            "both" => HeaderMode::Both,
            "none" => HeaderMode::None,
            _ => return None,
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HeaderMode::Legacy => "legacy",
            HeaderMode::Ietf => "ietf",
            HeaderMode::Both => "both",
            HeaderMode::None => "none",
        }
    }
}

fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// The policy's quota window in seconds: the window for window algorithms,
/// the time to refill a whole burst for buckets.
fn window_secs(policy: &Policy) -> u64 {
    let ms = if policy.algorithm().is_window() {
        policy.period_ms()
    } else {
        (policy.burst() as u128 * policy.period_ms() as u128).div_ceil(policy.count() as u128) as u64
    };
    ceil_secs(ms).max(1)
}

/// Seconds a denied client should wait (`Retry-After`), at least 1.
pub(crate) fn retry_after_secs(decision: &Decision) -> u64 {
    ceil_secs(decision.retry_after_ms.unwrap_or(decision.reset_after_ms)).max(1)
}

/// The rate-limit headers describing `decision` of `policy` at `now_ms`.
pub(crate) fn rate_limit_headers(
    mode: HeaderMode,
    policy: &Policy,
    decision: &Decision,
    now_ms: i64,
) -> Vec<(String, String)> {
    let mut headers = Vec::with_capacity(5);
    if matches!(mode, HeaderMode::Legacy | HeaderMode::Both) {
        let reset_epoch = (now_ms.max(0) as u64 + decision.reset_after_ms).div_ceil(1000);
        headers.push(("X-RateLimit-Limit".into(), decision.limit.to_string()));
        headers.push(("X-RateLimit-Remaining".into(), decision.remaining.to_string()));
        headers.push(("X-RateLimit-Reset".into(), reset_epoch.to_string()));
    }
    if matches!(mode, HeaderMode::Ietf | HeaderMode::Both) {
        let name = policy.name().replace(['"', '\\'], "_");
        if policy.algorithm() == Algorithm::Concurrency {
            // Requests in flight have no window and no reset time: the
            // draft's quota unit says what `q` counts; `t` is left out.
            headers.push((
                "RateLimit-Policy".into(),
                format!("\"{name}\";q={};qu=\"concurrent-requests\"", decision.limit),
            ));
            headers.push(("RateLimit".into(), format!("\"{name}\";r={}", decision.remaining)));
            return headers;
        }
        headers.push((
            "RateLimit-Policy".into(),
            format!("\"{name}\";q={};w={}", decision.limit, window_secs(policy)),
        ));
        headers.push((
            "RateLimit".into(),
            format!(
                "\"{name}\";r={};t={}",
                decision.remaining,
                ceil_secs(decision.reset_after_ms)
            ),
        ));
    }
    headers
}

/// The 429 body.
pub(crate) fn too_many_requests_body(retry_after: u64) -> String {
    format!("{{\"error\":\"rate_limit_exceeded\",\"message\":\"Too Many Requests\",\"retry_after\":{retry_after}}}")
}

/// The 503 body (fail-closed while the store is unavailable).
pub(crate) fn unavailable_body(retry_after: u64) -> String {
    format!(
        "{{\"error\":\"rate_limiter_unavailable\",\"message\":\"Service Unavailable\",\"retry_after\":{retry_after}}}"
    )
}

/// The 403 body (denylisted).
pub(crate) fn forbidden_body() -> String {
    "{\"error\":\"forbidden\",\"message\":\"Forbidden\"}".to_string()
}
