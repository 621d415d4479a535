//! Rate-limit response headers and bodies, identical in every language.

use super::header_list::Headers;
use crate::decision::Decision;
use crate::error::{Error, Result};
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
    /// Byte for byte what express-rate-limit's `standardHeaders: 'draft-N'`
    /// sends, after the legacy headers when `legacy` (`headers: [legacy, draft-7]`,
    /// express-rate-limit's `legacyHeaders: true`).
    Draft {
        /// Which draft.
        draft: HeaderDraft,
        /// The legacy `X-RateLimit-*` headers first.
        legacy: bool,
    },
}

/// An IETF ratelimit-headers draft as express-rate-limit writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderDraft {
    /// `RateLimit-Policy: 100;w=60`, `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    Draft6,
    /// `RateLimit-Policy: 100;w=60`, `RateLimit: limit=100, remaining=99, reset=60`.
    Draft7,
    /// `RateLimit: "100-in-1min"; r=99; t=60`,
    /// `RateLimit-Policy: "100-in-1min"; q=100; w=60; pk=:<partition key>:`.
    Draft8,
}

impl HeaderDraft {
    fn parse(text: &str) -> Option<HeaderDraft> {
        Some(match text {
            "draft-6" => HeaderDraft::Draft6,
            "draft-7" => HeaderDraft::Draft7,
            "draft-8" => HeaderDraft::Draft8,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            HeaderDraft::Draft6 => "draft-6",
            HeaderDraft::Draft7 => "draft-7",
            HeaderDraft::Draft8 => "draft-8",
        }
    }
}

const HEADERS_EXPECTED: &str = "is not one of legacy, ietf, both, none, draft-6, draft-7, draft-8, \
     or a list of legacy and one of ietf, draft-6, draft-7, draft-8";

impl HeaderMode {
    /// One name, or a comma-separated list (`legacy, draft-7`: the form a
    /// Go string option can hold).
    pub(crate) fn parse(text: &str) -> Option<HeaderMode> {
        if text.contains(',') {
            return HeaderMode::combine(text.split(',').map(str::trim));
        }
        Some(match text {
            "legacy" => HeaderMode::Legacy,
            "ietf" => HeaderMode::Ietf,
            "both" => HeaderMode::Both,
            "none" => HeaderMode::None,
            other => HeaderMode::Draft {
                draft: HeaderDraft::parse(other)?,
                legacy: false,
            },
        })
    }

    /// A list of header sets: `legacy` with at most one standard set
    /// (`ietf`, `draft-6`, `draft-7`, `draft-8`: they share header names).
    /// The empty list is `none`.
    fn combine<'a>(names: impl Iterator<Item = &'a str>) -> Option<HeaderMode> {
        let (mut legacy, mut standard, mut none) = (false, None, false);
        for name in names {
            let part = HeaderMode::parse(name)?;
            let (l, s) = match part {
                HeaderMode::Legacy => (true, None),
                HeaderMode::Ietf => (false, Some(HeaderMode::Ietf)),
                HeaderMode::Both => (true, Some(HeaderMode::Ietf)),
                HeaderMode::None => {
                    none = true;
                    (false, None)
                }
                HeaderMode::Draft { draft, .. } => (false, Some(HeaderMode::Draft { draft, legacy: false })),
            };
            legacy |= l;
            match (standard, s) {
                (Some(a), Some(b)) if a != b => return None,
                (_, Some(b)) => standard = Some(b),
                _ => {}
            }
        }
        if none && (legacy || standard.is_some()) {
            return None;
        }
        Some(match (legacy, standard) {
            (false, None) => HeaderMode::None,
            (true, None) => HeaderMode::Legacy,
            (false, Some(s)) => s,
            (true, Some(HeaderMode::Draft { draft, .. })) => HeaderMode::Draft { draft, legacy: true },
            (true, Some(_)) => HeaderMode::Both,
        })
    }

    /// The `headers` option: a name, a comma-separated list, or a list of names.
    pub(crate) fn from_value(value: &serde_json::Value) -> Result<HeaderMode> {
        let mode = match value {
            serde_json::Value::String(s) => HeaderMode::parse(s.trim()),
            serde_json::Value::Array(items) => items
                .iter()
                .map(serde_json::Value::as_str)
                .collect::<Option<Vec<&str>>>()
                .and_then(|names| HeaderMode::combine(names.into_iter().map(str::trim))),
            _ => None,
        };
        mode.ok_or_else(|| Error::config("headers", value, HEADERS_EXPECTED))
    }

    /// The option's canonical value: a name, or `["legacy", "draft-N"]`.
    pub(crate) fn to_value(self) -> serde_json::Value {
        match self {
            HeaderMode::Draft { draft, legacy: true } => serde_json::json!(["legacy", draft.as_str()]),
            other => serde_json::Value::from(other.as_str()),
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            HeaderMode::Legacy => "legacy",
            HeaderMode::Ietf => "ietf",
            HeaderMode::Both => "both",
            HeaderMode::None => "none",
            HeaderMode::Draft { draft, legacy: false } => draft.as_str(),
            HeaderMode::Draft { draft, legacy: true } => match draft {
                HeaderDraft::Draft6 => "legacy,draft-6",
                HeaderDraft::Draft7 => "legacy,draft-7",
                HeaderDraft::Draft8 => "legacy,draft-8",
            },
        }
    }

    /// Whether the headers describe every enforced policy (draft-8), not one.
    pub(crate) fn lists_every_policy(self) -> bool {
        matches!(
            self,
            HeaderMode::Draft {
                draft: HeaderDraft::Draft8,
                ..
            }
        )
    }

    fn legacy(self) -> bool {
        matches!(
            self,
            HeaderMode::Legacy | HeaderMode::Both | HeaderMode::Draft { legacy: true, .. }
        )
    }
}

/// One decision the headers describe: its policy and the key it was decided on.
pub(crate) struct Shown<'a> {
    pub policy: &'a Policy,
    pub decision: &'a Decision,
    pub key: &'a str,
}

fn ceil_secs(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// The policy's quota window in seconds: the window for window algorithms,
/// the time to refill a whole burst for buckets.
fn window_secs(policy: &Policy) -> u64 {
    ceil_secs(window_ms(policy)).max(1)
}

/// The quota window in milliseconds (see [`window_secs`]).
fn window_ms(policy: &Policy) -> u64 {
    if policy.algorithm().is_window() {
        policy.period_ms()
    } else {
        (policy.burst() as u128 * policy.period_ms() as u128).div_ceil(policy.count() as u128) as u64
    }
}

/// Seconds a denied client should wait (`Retry-After`), at least 1.
pub(crate) fn retry_after_secs(decision: &Decision) -> u64 {
    ceil_secs(decision.retry_after_ms.unwrap_or(decision.reset_after_ms)).max(1)
}

/// The rate-limit headers describing `shown` (the decision closest to
/// denying) at `now_ms`; `draft-8` lists every decision of `all` instead, one
/// comma-separated item per policy (what stacked express-rate-limit
/// middlewares append, as one field line).
pub(crate) fn rate_limit_headers(mode: HeaderMode, shown: &Shown<'_>, all: &[Shown<'_>], now_ms: i64) -> Headers {
    let (policy, decision) = (shown.policy, shown.decision);
    // Requests in flight have no window and no reset time (SPEC §6, §10): in
    // every mode a concurrency policy's headers leave out the window (`w`)
    // and the reset (`X-RateLimit-Reset`, `t`, `reset`, `RateLimit-Reset`),
    // and keep its limit and what remains.
    let in_flight = policy.algorithm() == Algorithm::Concurrency;
    // Room for every mode's headers and a `Retry-After`; the values' bytes
    // of `both` (three numbers, two items of the quoted name) and a
    // `Retry-After`, so that buffer grows only for draft-8's lists.
    let mut headers = Headers::with_capacity(8, 72 + 2 * policy.name().len());
    let number = |n: u64| move |v: &mut String| push_decimal(v, n);
    if mode.legacy() {
        headers.push_with("X-RateLimit-Limit", number(decision.limit));
        headers.push_with("X-RateLimit-Remaining", number(decision.remaining));
        if !in_flight {
            let reset_epoch = (now_ms.max(0) as u64 + decision.reset_after_ms).div_ceil(1000);
            headers.push_with("X-RateLimit-Reset", number(reset_epoch));
        }
    }
    if matches!(mode, HeaderMode::Ietf | HeaderMode::Both) {
        let name = quoted_name(policy.name());
        let quoted = |v: &mut String| {
            v.push('"');
            v.push_str(&name);
            v.push_str("\";");
        };
        if in_flight {
            // The draft's quota unit says what `q` counts; no `w`, no `t`.
            headers.push_with("RateLimit-Policy", |v| {
                quoted(v);
                v.push_str("q=");
                push_decimal(v, decision.limit);
                v.push_str(";qu=\"concurrent-requests\"");
            });
            headers.push_with("RateLimit", |v| {
                quoted(v);
                v.push_str("r=");
                push_decimal(v, decision.remaining);
            });
            return headers;
        }
        // Built by hand, not with format!: every response carries them.
        headers.push_with("RateLimit-Policy", |v| {
            quoted(v);
            v.push_str("q=");
            push_decimal(v, decision.limit);
            v.push_str(";w=");
            push_decimal(v, window_secs(policy));
        });
        headers.push_with("RateLimit", |v| {
            quoted(v);
            v.push_str("r=");
            push_decimal(v, decision.remaining);
            v.push_str(";t=");
            push_decimal(v, ceil_secs(decision.reset_after_ms));
        });
    }
    if let HeaderMode::Draft { draft, .. } = mode {
        // express-rate-limit: w = ceil(windowMs / 1000), reset = ceil(ms to the reset / 1000).
        let (limit, remaining) = (decision.limit, decision.remaining);
        let (w, reset) = (window_ms(policy).div_ceil(1000), ceil_secs(decision.reset_after_ms));
        match draft {
            // draft-6 and draft-7 have no quota unit: the limit alone, no window, no reset.
            HeaderDraft::Draft6 if in_flight => {
                headers.push_with("RateLimit-Policy", number(limit));
                headers.push_with("RateLimit-Limit", number(limit));
                headers.push_with("RateLimit-Remaining", number(remaining));
            }
            HeaderDraft::Draft7 if in_flight => {
                headers.push_with("RateLimit-Policy", number(limit));
                headers.push("RateLimit", &format!("limit={limit}, remaining={remaining}"));
            }
            HeaderDraft::Draft6 => {
                headers.push("RateLimit-Policy", &format!("{limit};w={w}"));
                headers.push_with("RateLimit-Limit", number(limit));
                headers.push_with("RateLimit-Remaining", number(remaining));
                headers.push_with("RateLimit-Reset", number(reset));
            }
            HeaderDraft::Draft7 => {
                headers.push("RateLimit-Policy", &format!("{limit};w={w}"));
                headers.push(
                    "RateLimit",
                    &format!("limit={limit}, remaining={remaining}, reset={reset}"),
                );
            }
            HeaderDraft::Draft8 => {
                let (mut lines, mut policies) = (Vec::new(), Vec::new());
                for s in all {
                    let name = draft8_name(s.policy, s.decision.limit);
                    let d = s.decision;
                    if s.policy.algorithm() == Algorithm::Concurrency {
                        // In flight: a quota unit instead of a window, no reset.
                        lines.push(format!("\"{name}\"; r={}", d.remaining));
                        policies.push(format!(
                            "\"{name}\"; q={}; qu=\"concurrent-requests\"; pk=:{}:",
                            d.limit,
                            partition_key(&pk_source(s.key))
                        ));
                        continue;
                    }
                    lines.push(format!(
                        "\"{name}\"; r={}; t={}",
                        d.remaining,
                        ceil_secs(d.reset_after_ms)
                    ));
                    policies.push(format!(
                        "\"{name}\"; q={}; w={}; pk=:{}:",
                        d.limit,
                        window_ms(s.policy).div_ceil(1000),
                        partition_key(&pk_source(s.key))
                    ));
                }
                headers.push("RateLimit", &lines.join(", "));
                headers.push("RateLimit-Policy", &policies.join(", "));
            }
        }
    }
    headers
}

/// Appends `n` in decimal to `out`.
pub(crate) fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits: always UTF-8.
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

/// A policy name as the inside of a quoted string: `"` and `\\` become `_`
/// (borrowed when it has neither, as most names).
fn quoted_name(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains(['"', '\\']) {
        std::borrow::Cow::Owned(name.replace(['"', '\\'], "_"))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// The draft-8 item name: the policy's name, or for an unnamed policy
/// express-rate-limit's default identifier `<limit>-in-<duration>`
/// (`100-in-1min`, `10-in-1.5sec`, `5-in-2hrs`, `1-in-1day`).
fn draft8_name(policy: &Policy, limit: u64) -> String {
    if policy.name() != "default" {
        return policy.name().replace(['"', '\\'], "_");
    }
    if policy.algorithm() == Algorithm::Concurrency {
        return format!("{limit}-in-flight");
    }
    let ms = window_ms(policy) as f64;
    let (seconds, minutes, hours, days) = (ms / 1e3, ms / 6e4, ms / 3.6e6, ms / 8.64e7);
    // Rust's f64 Display prints the shortest round-trip form, as JavaScript's String(number).
    let duration = if seconds < 60.0 {
        format!("{seconds}sec")
    } else if minutes < 60.0 {
        format!("{minutes}min")
    } else if hours < 24.0 {
        format!("{hours}hr{}", if hours > 1.0 { "s" } else { "" })
    } else {
        format!("{days}day{}", if days > 1.0 { "s" } else { "" })
    };
    format!("{limit}-in-{duration}")
}

/// The string express-rate-limit would have as the key: a one-dimension key's
/// value (the client address or subnet for `ip`, the key function's result
/// for `key`), else the whole composite key (`ip=…|route=…`).
fn pk_source(key: &str) -> String {
    match key.split_once('=') {
        Some((_, value)) if !key.contains('|') => value.replace("%3D", "=").replace("%7C", "|").replace("%25", "%"),
        _ => key.to_string(),
    }
}

/// express-rate-limit's partition key: base64 of the first 12 hex digits of
/// sha256(key) (16 characters).
fn partition_key(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    base64(hex.as_bytes())
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Source;
    use serde_json::json;

    #[test]
    fn decimals_are_those_of_display() {
        for n in [0, 1, 9, 10, 99, 100, 255, 1_000_000_007, u64::MAX] {
            let mut out = String::from("x");
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
    }

    fn policy(value: serde_json::Value) -> Policy {
        Policy::from_value(&value, "").unwrap()
    }

    fn decision(limit: u64, remaining: u64, reset_after_ms: u64) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after_ms,
            retry_after_ms: None,
            delay_ms: 0,
            source: Source::Store,
        }
    }

    #[test]
    fn modes_parse_from_names_lists_and_comma_lists() {
        let draft = |draft, legacy| HeaderMode::Draft { draft, legacy };
        for (value, want) in [
            (json!("both"), HeaderMode::Both),
            (json!("draft-6"), draft(HeaderDraft::Draft6, false)),
            (json!("draft-8"), draft(HeaderDraft::Draft8, false)),
            (json!(["legacy", "draft-7"]), draft(HeaderDraft::Draft7, true)),
            (json!(["draft-7", "legacy"]), draft(HeaderDraft::Draft7, true)),
            (json!("legacy, draft-6"), draft(HeaderDraft::Draft6, true)),
            (json!(["legacy", "ietf"]), HeaderMode::Both),
            (json!(["ietf"]), HeaderMode::Ietf),
            (json!([]), HeaderMode::None),
        ] {
            let mode = HeaderMode::from_value(&value).unwrap();
            assert_eq!(mode, want, "{value}");
            assert_eq!(HeaderMode::from_value(&mode.to_value()).unwrap(), mode);
            assert_eq!(HeaderMode::parse(mode.as_str()), Some(mode));
        }
        for bad in [
            json!("draft-9"),
            json!(["ietf", "draft-7"]),
            json!(["draft-6", "draft-7"]),
            json!(["none", "legacy"]),
            json!([1]),
            json!(true),
            json!("legacy,"),
        ] {
            let e = HeaderMode::from_value(&bad).unwrap_err().to_string();
            assert!(e.contains("headers") && e.contains("draft-8"), "{bad}: {e}");
        }
    }

    #[test]
    fn partition_key_is_express_rate_limits() {
        // Node: Buffer.from(sha256(key).hex.slice(0, 12)).toString('base64')
        assert_eq!(partition_key("127.0.0.1"), "MTJjYTE3YjQ5YWYy");
        assert_eq!(partition_key("203.0.113.7"), "ZmVjNTI1NjVhYTBj");
        assert_eq!(partition_key("ip=203.0.113.7|route=/api/{}"), "ZjAwMTFhMWRmN2Ez");
        assert_eq!(pk_source("ip=203.0.113.7"), "203.0.113.7");
        assert_eq!(pk_source("key=a%3Db%7Cc%253D"), "a=b|c%3D");
        assert_eq!(
            pk_source("ip=203.0.113.7|route=/api/{}"),
            "ip=203.0.113.7|route=/api/{}"
        );
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }

    #[test]
    fn draft8_names_follow_express_rate_limits_identifier() {
        let name = |rate: &str, algorithm: &str| {
            let p = policy(json!({"algorithm": algorithm, "rate": rate}));
            draft8_name(&p, p.burst())
        };
        assert_eq!(name("100/min", "fixed_window"), "100-in-1min");
        assert_eq!(name("5/s", "fixed_window"), "5-in-1sec");
        assert_eq!(name("10/90s", "fixed_window"), "10-in-1.5min");
        assert_eq!(name("7/h", "fixed_window"), "7-in-1hr");
        assert_eq!(name("7/2h", "fixed_window"), "7-in-2hrs");
        assert_eq!(name("3/day", "fixed_window"), "3-in-1day");
        assert_eq!(name("3/2d", "fixed_window"), "3-in-2days");
        let named = policy(json!({"algorithm": "fixed_window", "rate": "5/s", "name": "api"}));
        assert_eq!(draft8_name(&named, 5), "api");
    }

    #[test]
    fn draft8_describes_a_concurrency_policy_by_its_quota_unit() {
        let p = policy(json!({"algorithm": "concurrency", "limit": 10}));
        let d = decision(10, 7, 60_000);
        let shown = Shown {
            policy: &p,
            decision: &d,
            key: "ip=127.0.0.1",
        };
        let mode = HeaderMode::Draft {
            draft: HeaderDraft::Draft8,
            legacy: false,
        };
        assert_eq!(
            rate_limit_headers(mode, &shown, std::slice::from_ref(&shown), 0).to_vec(),
            vec![
                ("RateLimit".to_string(), "\"10-in-flight\"; r=7".to_string()),
                (
                    "RateLimit-Policy".to_string(),
                    "\"10-in-flight\"; q=10; qu=\"concurrent-requests\"; pk=:MTJjYTE3YjQ5YWYy:".to_string()
                ),
            ]
        );
    }

    #[test]
    fn draft_headers_byte_for_byte() {
        let p = policy(json!({"algorithm": "fixed_window", "rate": "100/min"}));
        let d = decision(100, 99, 59_001);
        let shown = Shown {
            policy: &p,
            decision: &d,
            key: "ip=127.0.0.1",
        };
        let lines = |mode| rate_limit_headers(mode, &shown, std::slice::from_ref(&shown), 1_700_000_000_999).to_vec();
        let pairs = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines(HeaderMode::Draft {
                draft: HeaderDraft::Draft6,
                legacy: false
            }),
            pairs(&[
                ("RateLimit-Policy", "100;w=60"),
                ("RateLimit-Limit", "100"),
                ("RateLimit-Remaining", "99"),
                ("RateLimit-Reset", "60"),
            ])
        );
        assert_eq!(
            lines(HeaderMode::Draft {
                draft: HeaderDraft::Draft7,
                legacy: true
            }),
            pairs(&[
                ("X-RateLimit-Limit", "100"),
                ("X-RateLimit-Remaining", "99"),
                ("X-RateLimit-Reset", "1700000060"),
                ("RateLimit-Policy", "100;w=60"),
                ("RateLimit", "limit=100, remaining=99, reset=60"),
            ])
        );
        assert_eq!(
            lines(HeaderMode::Draft {
                draft: HeaderDraft::Draft8,
                legacy: false
            }),
            pairs(&[
                ("RateLimit", "\"100-in-1min\"; r=99; t=60"),
                (
                    "RateLimit-Policy",
                    "\"100-in-1min\"; q=100; w=60; pk=:MTJjYTE3YjQ5YWYy:"
                ),
            ])
        );
    }
}
