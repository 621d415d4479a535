//! The compact binary forms of a request and of its [`Outcome`], for a
//! binding that crosses into the core without a JSON encoder or decoder (the
//! C ABI, and so Go). Every integer is little-endian; a string is a `u32`
//! byte length and the bytes.
//!
//! A request ([`read_request`], [`write_request`]):
//! - `method`, `path`, `route`, `peer`, `user`, `api_key`, `key`, in this
//!   order, each a string, or the length [`ABSENT`] (`0xFFFFFFFF`) alone for
//!   an absent one (an absent method is `GET`, an absent path `/`);
//! - a `u32` header count, then each header's name and value (two strings),
//! - and nothing after the last header.
//!
//! Strings are UTF-8; an invalid sequence becomes U+FFFD, as a JSON encoder
//! would have written it. The cost, the clock and the router's path matching
//! travel beside the buffer (they are numbers and flags).
//!
//! An outcome ([`write_outcome`]):
//! - `u16` status (0: let the request through), `u8` 1 when there is a body,
//!   `u64` delay in ms;
//! - a `u32` header count, then each header's name and value (two strings);
//! - the body (a string) when there is one;
//! - a `u32` decision count (0 unless decisions were asked for), then for
//!   each: rule and policy (two strings), a `u8` of bits (1 allowed, 2 shadow,
//!   4 has a retry-after), `u64` limit, remaining, reset-after ms,
//!   retry-after ms (0 without one) and delay ms, and a `u8` source: its
//!   place in [`Source::ALL`](crate::Source::ALL) (`polylimit_source_t` in C);
//! - the completion token (a string), or the length [`ABSENT`] alone when the
//!   outcome has none (`Outcome::completion`: settle it after the response).

use std::fmt;

use crate::http::{Outcome, RequestInfo};

/// The length that marks an absent string in a request.
pub const ABSENT: u32 = u32::MAX;

/// The bytes of a decision's fixed part: bits, five `u64`s, source.
const DECISION_FIXED: usize = 1 + 5 * 8 + 1;

/// A packed request that is not well formed (truncated, padded, a header
/// without a name): the caller's encoder is wrong, not the user's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request: {}", self.0)
    }
}

impl std::error::Error for Malformed {}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], Malformed> {
        if self.bytes.len() < n {
            return Err(Malformed(format!("{what} runs past the end")));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &str) -> Result<u32, Malformed> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, what: &str) -> Result<Option<String>, Malformed> {
        let len = self.u32(what)?;
        if len == ABSENT {
            return Ok(None);
        }
        let bytes = self.take(len as usize, what)?;
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    /// A string that must be there, unconverted.
    fn bytes_of(&mut self, what: &str) -> Result<&'a [u8], Malformed> {
        let len = self.u32(what)?;
        if len == ABSENT {
            return Err(Malformed(format!("{what} is absent")));
        }
        self.take(len as usize, what)
    }
}

/// The request packed in `bytes`. The fields the packed form does not carry
/// (`cost`, `now_ms`, `case_insensitive`, `ignore_trailing_slash`) are left
/// at their defaults for the caller to set.
pub fn read_request(bytes: &[u8]) -> Result<RequestInfo, Malformed> {
    read_request_keeping(bytes, |_| true)
}

/// [`read_request`], keeping only the headers whose name `keep` accepts
/// (`|name| limiter.reads_header(name)`: no copy of headers nobody reads);
/// every header is still checked.
pub fn read_request_keeping(bytes: &[u8], keep: impl Fn(&str) -> bool) -> Result<RequestInfo, Malformed> {
    let mut r = Reader { bytes };
    let method = r.string("method")?;
    let path = r.string("path")?;
    let route = r.string("route")?;
    let peer = r.string("peer")?;
    let user = r.string("user")?;
    let api_key = r.string("api_key")?;
    let key = r.string("key")?;
    let count = r.u32("header count")? as usize;
    // Each header takes at least 8 bytes: a corrupt count cannot reserve much.
    let mut headers = Vec::new();
    for _ in 0..count {
        let name = r.bytes_of("header name")?;
        let value = r.bytes_of("header value")?;
        let name = String::from_utf8_lossy(name);
        if keep(&name) {
            headers.push((name.into_owned(), String::from_utf8_lossy(value).into_owned()));
        }
    }
    if !r.bytes.is_empty() {
        return Err(Malformed(format!("{} bytes after the last header", r.bytes.len())));
    }
    Ok(RequestInfo {
        method: method.unwrap_or_else(|| "GET".into()),
        path: path.unwrap_or_else(|| "/".into()),
        route,
        peer,
        headers,
        user,
        api_key,
        key,
        ..RequestInfo::default()
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // A string over 4 GiB cannot come from the core; saturate rather than wrap
    // (or collide with ABSENT).
    let len = u32::try_from(s.len()).unwrap_or(ABSENT - 1);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_str(out, s),
        None => out.extend_from_slice(&ABSENT.to_le_bytes()),
    }
}

/// Appends `request` packed to `out` (what a caller's encoder writes; the
/// fields [`read_request`] leaves at their defaults are not written).
pub fn write_request(request: &RequestInfo, out: &mut Vec<u8>) {
    put_str(out, &request.method);
    put_str(out, &request.path);
    for s in [
        &request.route,
        &request.peer,
        &request.user,
        &request.api_key,
        &request.key,
    ] {
        put_opt(out, s.as_deref());
    }
    out.extend_from_slice(&(request.headers.len() as u32).to_le_bytes());
    for (name, value) in &request.headers {
        put_str(out, name);
        put_str(out, value);
    }
}

/// The exact size of `outcome` packed (with its decisions when `with_decisions`).
pub fn outcome_len(outcome: &Outcome, with_decisions: bool) -> usize {
    let strings = |a: &str, b: &str| 8 + a.len() + b.len();
    let mut size = 2 + 1 + 8 + 4 + 4 + 4;
    size += outcome.completion.as_ref().map_or(0, String::len);
    size += outcome.headers.iter().map(|(k, v)| strings(k, v)).sum::<usize>();
    size += outcome.body.as_ref().map_or(0, |b| 4 + b.len());
    if with_decisions {
        size += outcome
            .decisions
            .iter()
            .map(|d| strings(&d.rule, &d.policy) + DECISION_FIXED)
            .sum::<usize>();
    }
    size
}

/// Appends `outcome` packed to `out`, with its decisions when `with_decisions`.
pub fn write_outcome(outcome: &Outcome, with_decisions: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(&outcome.status.unwrap_or(0).to_le_bytes());
    out.push(u8::from(outcome.body.is_some()));
    out.extend_from_slice(&outcome.delay_ms.to_le_bytes());
    out.extend_from_slice(&(outcome.headers.len() as u32).to_le_bytes());
    for (name, value) in &outcome.headers {
        put_str(out, name);
        put_str(out, value);
    }
    if let Some(body) = &outcome.body {
        put_str(out, body);
    }
    let decisions = if with_decisions { &outcome.decisions[..] } else { &[] };
    out.extend_from_slice(&(decisions.len() as u32).to_le_bytes());
    for rd in decisions {
        let d = &rd.decision;
        put_str(out, &rd.rule);
        put_str(out, &rd.policy);
        out.push(u8::from(d.allowed) | u8::from(rd.shadow) << 1 | u8::from(d.retry_after_ms.is_some()) << 2);
        for n in [
            d.limit,
            d.remaining,
            d.reset_after_ms,
            d.retry_after_ms.unwrap_or(0),
            d.delay_ms,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        // Seven sources: the index always fits.
        out.push(d.source.index() as u8);
    }
    put_opt(out, outcome.completion.as_deref());
}

/// `outcome` packed in a buffer of exactly its size (one allocation).
pub fn outcome(outcome: &Outcome, with_decisions: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(outcome_len(outcome, with_decisions));
    write_outcome(outcome, with_decisions, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Decision, Source};
    use crate::http::RuleDecision;

    #[test]
    fn only_the_kept_headers_are_copied_and_every_header_is_checked() {
        let sent = RequestInfo {
            method: "POST".into(),
            path: "/login".into(),
            headers: vec![
                ("User-Agent".into(), "curl".into()),
                ("X-Forwarded-For".into(), "203.0.113.7".into()),
                ("Accept".into(), "*/*".into()),
                ("x-forwarded-for".into(), "10.0.0.1".into()),
            ],
            ..RequestInfo::default()
        };
        let mut b = Vec::new();
        write_request(&sent, &mut b);
        let kept = read_request_keeping(&b, |name| name.eq_ignore_ascii_case("x-forwarded-for")).unwrap();
        assert_eq!(
            kept,
            RequestInfo {
                headers: vec![
                    ("X-Forwarded-For".into(), "203.0.113.7".into()),
                    ("x-forwarded-for".into(), "10.0.0.1".into()),
                ],
                ..sent.clone()
            }
        );
        assert_eq!(read_request(&b).unwrap(), sent);
        // A header left out is still read: a truncated one is an error.
        b.truncate(b.len() - 1);
        assert!(read_request_keeping(&b, |_| false).is_err());
    }

    /// A test-side reader of the outcome layout, written from the module
    /// documentation (as the Go reader is).
    struct Bytes<'a>(&'a [u8]);

    impl Bytes<'_> {
        fn take<const N: usize>(&mut self) -> [u8; N] {
            let (head, rest) = self.0.split_at(N);
            self.0 = rest;
            head.try_into().unwrap()
        }
        fn u8(&mut self) -> u8 {
            self.take::<1>()[0]
        }
        fn u16(&mut self) -> u16 {
            u16::from_le_bytes(self.take())
        }
        fn u32(&mut self) -> u32 {
            u32::from_le_bytes(self.take())
        }
        fn u64(&mut self) -> u64 {
            u64::from_le_bytes(self.take())
        }
        fn string(&mut self) -> String {
            let n = self.u32() as usize;
            let (head, rest) = self.0.split_at(n);
            self.0 = rest;
            String::from_utf8(head.to_vec()).unwrap()
        }
    }

    fn read_outcome(bytes: &[u8]) -> Outcome {
        let mut b = Bytes(bytes);
        let status = b.u16();
        let has_body = b.u8();
        assert!(has_body <= 1);
        let delay_ms = b.u64();
        let headers = (0..b.u32()).map(|_| (b.string(), b.string())).collect();
        let body = (has_body == 1).then(|| b.string());
        let decisions = (0..b.u32())
            .map(|_| {
                let (rule, policy) = (b.string(), b.string());
                let bits = b.u8();
                assert_eq!(bits & !7, 0, "unknown bits");
                let [limit, remaining, reset_after_ms, retry_after_ms, delay_ms] = [(); 5].map(|_| b.u64());
                let source = Source::ALL[b.u8() as usize];
                RuleDecision {
                    rule,
                    policy,
                    shadow: bits & 2 != 0,
                    decision: Decision {
                        allowed: bits & 1 != 0,
                        limit,
                        remaining,
                        reset_after_ms,
                        retry_after_ms: (bits & 4 != 0).then_some(retry_after_ms),
                        delay_ms,
                        source,
                    },
                }
            })
            .collect();
        let completion = if b.0[..4] == ABSENT.to_le_bytes() {
            b.u32();
            None
        } else {
            Some(b.string())
        };
        assert!(b.0.is_empty(), "{} bytes left", b.0.len());
        Outcome {
            status: (status != 0).then_some(status),
            headers,
            body,
            delay_ms,
            decisions,
            leases: Vec::new(),
            completion,
        }
    }

    fn put(out: &mut Vec<u8>, s: Option<&[u8]>) {
        match s {
            None => out.extend_from_slice(&ABSENT.to_le_bytes()),
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s);
            }
        }
    }

    #[test]
    fn a_request_round_trips() {
        let request = RequestInfo {
            method: "POST".into(),
            path: "/api/é".into(),
            route: Some("/api/{id}".into()),
            peer: Some("203.0.113.7".into()),
            headers: vec![
                ("X-Forwarded-For".into(), "198.51.100.1".into()),
                ("X-Empty".into(), String::new()),
            ],
            user: Some(String::new()),
            api_key: None,
            key: Some("k".into()),
            ..RequestInfo::default()
        };
        let mut b = Vec::new();
        write_request(&request, &mut b);
        assert_eq!(read_request(&b), Ok(request));
    }

    #[test]
    fn a_request_reads_from_the_documented_bytes() {
        let mut b = Vec::new();
        for s in [
            None,
            Some(&b"/x"[..]),
            None,
            Some(b"203.0.113.7"),
            None,
            None,
            Some(b"k"),
        ] {
            put(&mut b, s);
        }
        b.extend_from_slice(&2u32.to_le_bytes());
        for s in [&b"X-Forwarded-For"[..], b"198.51.100.1", b"X-Bad", b"a\xffb"] {
            put(&mut b, Some(s));
        }
        let r = read_request(&b).unwrap();
        assert_eq!(
            r,
            RequestInfo {
                method: "GET".into(),
                path: "/x".into(),
                peer: Some("203.0.113.7".into()),
                key: Some("k".into()),
                headers: vec![
                    ("X-Forwarded-For".into(), "198.51.100.1".into()),
                    ("X-Bad".into(), "a\u{FFFD}b".into()),
                ],
                ..RequestInfo::default()
            }
        );
    }

    #[test]
    fn a_truncated_or_padded_request_is_malformed() {
        let mut b = Vec::new();
        for _ in 0..7 {
            put(&mut b, None);
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        put(&mut b, Some(b"name"));
        assert_eq!(
            read_request(&b).unwrap_err().to_string(),
            "request: header value runs past the end"
        );
        put(&mut b, Some(b"value"));
        assert!(read_request(&b).is_ok());
        for n in 0..b.len() {
            assert!(read_request(&b[..n]).is_err(), "truncated to {n} bytes");
        }
        b.push(0);
        assert_eq!(
            read_request(&b).unwrap_err().to_string(),
            "request: 1 bytes after the last header"
        );
        let mut absent_name = Vec::new();
        for _ in 0..7 {
            put(&mut absent_name, None);
        }
        absent_name.extend_from_slice(&1u32.to_le_bytes());
        put(&mut absent_name, None);
        put(&mut absent_name, Some(b"v"));
        assert_eq!(
            read_request(&absent_name).unwrap_err().to_string(),
            "request: header name is absent"
        );
    }

    fn decision(source: Source, allowed: bool, retry: Option<u64>) -> Decision {
        Decision {
            allowed,
            limit: 10 + source.index() as u64,
            remaining: if allowed { 3 } else { 0 },
            reset_after_ms: 1500 + source.index() as u64,
            retry_after_ms: retry,
            delay_ms: 7,
            source,
        }
    }

    fn full_outcome() -> Outcome {
        Outcome {
            status: Some(429),
            headers: vec![
                ("Retry-After".into(), "2".into()),
                ("RateLimit-Policy".into(), "10;w=1".into()),
            ],
            body: Some(r#"{"error":"rate_limit_exceeded"}"#.into()),
            delay_ms: 250,
            decisions: Source::ALL
                .iter()
                .enumerate()
                .map(|(i, &source)| RuleDecision {
                    rule: format!("rule{i}"),
                    policy: format!("policy{i}"),
                    decision: decision(source, i % 2 == 0, (i % 3 == 0).then_some(u64::MAX - i as u64)),
                    shadow: i % 4 == 1,
                })
                .collect(),
            leases: Vec::new(),
            completion: Some("pl1;n1;c1;rs0,failed,ip=1".into()),
        }
    }

    #[test]
    fn an_outcome_reads_back_with_every_source() {
        let o = full_outcome();
        let bytes = outcome(&o, true);
        assert_eq!(bytes.len(), outcome_len(&o, true));
        assert_eq!(bytes.capacity(), bytes.len(), "one exact allocation");
        assert_eq!(read_outcome(&bytes), o);
        let sources: Vec<Source> = read_outcome(&bytes)
            .decisions
            .iter()
            .map(|d| d.decision.source)
            .collect();
        assert_eq!(sources, Source::ALL);

        let without = outcome(&o, false);
        assert_eq!(without.len(), outcome_len(&o, false));
        assert_eq!(
            read_outcome(&without),
            Outcome {
                decisions: Vec::new(),
                ..o.clone()
            }
        );
    }

    #[test]
    fn an_outcome_has_the_documented_bytes() {
        let o = Outcome {
            status: Some(429),
            headers: vec![("A".into(), "1".into())],
            body: Some("{}".into()),
            delay_ms: 0x0102,
            decisions: vec![RuleDecision {
                rule: "r".into(),
                policy: "p".into(),
                decision: decision(Source::Penalty, false, Some(2000)),
                shadow: true,
            }],
            leases: Vec::new(),
            completion: None,
        };
        let mut want: Vec<u8> = vec![0xAD, 0x01, 1, 0x02, 0x01, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, b'A', 1, 0, 0, 0, b'1']);
        want.extend_from_slice(&[2, 0, 0, 0, b'{', b'}']);
        want.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, b'r', 1, 0, 0, 0, b'p']);
        want.push(2 | 4); // denied, shadow, has a retry-after
        for n in [14u64, 0, 1504, 2000, 7] {
            want.extend_from_slice(&n.to_le_bytes());
        }
        want.push(4); // penalty
        want.extend_from_slice(&ABSENT.to_le_bytes()); // no completion token
        assert_eq!(outcome(&o, true), want);

        // A pass without headers or body: 19 bytes.
        let pass = Outcome {
            status: None,
            headers: Vec::new(),
            body: None,
            delay_ms: 0,
            decisions: Vec::new(),
            leases: Vec::new(),
            completion: None,
        };
        let mut want = vec![0; 19];
        want.extend_from_slice(&ABSENT.to_le_bytes());
        assert_eq!(outcome(&pass, true), want);
        // An allowed request to settle after its response: the token last.
        let settle = Outcome {
            completion: Some("pl1;n1;c1".into()),
            ..pass
        };
        let mut want = vec![0; 19];
        want.extend_from_slice(&[9, 0, 0, 0]);
        want.extend_from_slice(b"pl1;n1;c1");
        assert_eq!(outcome(&settle, false), want);
        assert_eq!(read_outcome(&want), settle);
    }
}
