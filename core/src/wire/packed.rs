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
//! - a `u32` trailer count, then each trailer's name and value (a gRPC
//!   call's trailing metadata; none for an HTTP request);
//! - the body (a string) when there is one;
//! - a `u32` decision count (0 unless decisions were asked for), then for
//!   each: rule and policy (two strings), a `u8` of bits (1 allowed, 2 shadow,
//!   4 has a retry-after), `u64` limit, remaining, reset-after ms,
//!   retry-after ms (0 without one) and delay ms, and a `u8` source: its
//!   place in [`Source::ALL`](crate::Source::ALL) (`polylimit_source_t` in C);
//! - the completion token (a string), or the length [`ABSENT`] alone when the
//!   outcome has none (`Outcome::completion`: settle it after the response).
//!
//! A decision (alone, in a list, or in an outcome as above): a `u8` of bits
//! (1 allowed, 2 shadow: only in an outcome, 4 has a retry-after), `u64`
//! limit, remaining, reset-after ms, retry-after ms (0 without one) and delay
//! ms, and a `u8` source.
//!
//! A finished call ([`write_record`], [`read_record`]; the completion
//! bridge's batches are these records one after another, nothing between):
//! `u64` ctx (the caller's value), `u8` kind ([`Kind`]), then the payload:
//! - 0 error: `u8` error kind (its place in
//!   [`ErrorKind::ALL`](crate::ErrorKind::ALL)), the message (a string: the
//!   error as it displays), then field and value (strings, or [`ABSENT`]
//!   alone; only a config error has them), then the key (a string, or
//!   [`ABSENT`] alone; only a store error has one);
//! - 1 unit: nothing;
//! - 2 bool: a `u8`, 0 or 1;
//! - 3 count: a `u64`;
//! - 4 decision: a decision;
//! - 5 decisions: a `u32` count, then each decision;
//! - 6 acquired: a decision, then a `u32` lease count and each lease: `u32`
//!   policy index, key and id (two strings);
//! - 7 outcome: an outcome, as above;
//! - 8 json: a string holding JSON text (an admin call's answer).
//!
//! The shared vectors `tests/conformance/wire/packed.json` pin these bytes in
//! every reader.

use std::fmt;

use crate::decision::{Decision, Lease, Source};
use crate::error::{Error, ErrorKind};
use crate::http::{Headers, Outcome, RequestInfo, RuleDecision};

/// The length that marks an absent string in a request.
pub const ABSENT: u32 = u32::MAX;

/// The bytes of a decision: bits, five `u64`s, source.
pub const DECISION_LEN: usize = 1 + 5 * 8 + 1;

/// Packed bytes that are not well formed (truncated, padded, a header
/// without a name): the writer is wrong, not the user's input. Displays as
/// what was read (`request`, `outcome`, `record`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(String);

impl Malformed {
    fn of(self, what: &str) -> Malformed {
        Malformed(format!("{what}: {}", self.0))
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Malformed {}

/// A record's kind: the `u8` after its ctx (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An error.
    Error = 0,
    /// Done, no value (a reset, a release).
    Unit = 1,
    /// A yes or no.
    Bool = 2,
    /// A number (released slots, a count).
    Count = 3,
    /// One decision.
    Decision = 4,
    /// One decision per policy.
    Decisions = 5,
    /// An acquire's decision and the leases it took.
    Acquired = 6,
    /// A request's outcome.
    Outcome = 7,
    /// An admin call's answer as JSON text.
    Json = 8,
}

impl Kind {
    /// Every kind, at its number.
    pub const ALL: [Kind; 9] = [
        Kind::Error,
        Kind::Unit,
        Kind::Bool,
        Kind::Count,
        Kind::Decision,
        Kind::Decisions,
        Kind::Acquired,
        Kind::Outcome,
        Kind::Json,
    ];
}

/// What a call returns, before it is packed (one variant per [`Kind`] but
/// the error, which is the `Err` beside it).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// [`Kind::Unit`].
    Unit,
    /// [`Kind::Bool`].
    Bool(bool),
    /// [`Kind::Count`].
    Count(u64),
    /// [`Kind::Decision`].
    Decision(Decision),
    /// [`Kind::Decisions`].
    Decisions(Vec<Decision>),
    /// [`Kind::Acquired`].
    Acquired(Decision, Vec<Lease>),
    /// [`Kind::Outcome`], with its per-policy decisions when the flag is set
    /// (read back, an outcome packed without them has none).
    Outcome(Outcome, bool),
    /// [`Kind::Json`].
    Json(serde_json::Value),
}

impl Reply {
    /// This reply's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Reply::Unit => Kind::Unit,
            Reply::Bool(_) => Kind::Bool,
            Reply::Count(_) => Kind::Count,
            Reply::Decision(_) => Kind::Decision,
            Reply::Decisions(_) => Kind::Decisions,
            Reply::Acquired(..) => Kind::Acquired,
            Reply::Outcome(..) => Kind::Outcome,
            Reply::Json(_) => Kind::Json,
        }
    }
}

/// An error as a record carries it: what every binding's error classes need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorRecord {
    /// The error's kind.
    pub kind: ErrorKind,
    /// The error as it displays.
    pub message: String,
    /// A config error's field.
    pub field: Option<String>,
    /// A config error's value.
    pub value: Option<String>,
    /// A store error's key.
    pub key: Option<String>,
}

impl From<&Error> for ErrorRecord {
    fn from(e: &Error) -> Self {
        let (field, value) = match e {
            Error::Config { field, value, .. } => (Some(field.clone()), Some(value.clone())),
            _ => (None, None),
        };
        let key = match e {
            Error::Store { key, .. } => Some(key.clone()),
            _ => None,
        };
        ErrorRecord {
            kind: e.kind(),
            message: e.to_string(),
            field,
            value,
            key,
        }
    }
}

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

    fn u8(&mut self, what: &str) -> Result<u8, Malformed> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &str) -> Result<u16, Malformed> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, Malformed> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or_default()))
    }

    /// A string that must be there.
    fn text(&mut self, what: &str) -> Result<String, Malformed> {
        Ok(String::from_utf8_lossy(self.bytes_of(what)?).into_owned())
    }

    /// A count of items of at least `min` bytes each: a corrupt count cannot
    /// reserve more than the bytes left could hold.
    fn count(&mut self, min: usize, what: &str) -> Result<usize, Malformed> {
        let n = self.u32(what)? as usize;
        if n > self.bytes.len() / min {
            return Err(Malformed(format!("{what} {n} runs past the end")));
        }
        Ok(n)
    }

    /// A decision; the shadow bit returned beside it.
    fn decision(&mut self) -> Result<(Decision, bool), Malformed> {
        let bits = self.u8("decision")?;
        if bits & !7 != 0 {
            return Err(Malformed(format!("decision bits {bits:#x}")));
        }
        let mut n = [0u64; 5];
        for v in &mut n {
            *v = self.u64("decision")?;
        }
        let source = self.u8("source")?;
        let source = *Source::ALL
            .get(usize::from(source))
            .ok_or_else(|| Malformed(format!("source {source}")))?;
        let [limit, remaining, reset_after_ms, retry_after_ms, delay_ms] = n;
        let d = Decision {
            allowed: bits & 1 != 0,
            limit,
            remaining,
            reset_after_ms,
            retry_after_ms: (bits & 4 != 0).then_some(retry_after_ms),
            delay_ms,
            source,
        };
        Ok((d, bits & 2 != 0))
    }

    /// A count of (name, value) pairs and the pairs; `what`: the words for
    /// the count, a name and a value.
    fn headers(&mut self, [count, name, value]: [&str; 3]) -> Result<Headers, Malformed> {
        let n = self.count(8, count)?;
        let mut headers = Headers::new();
        for _ in 0..n {
            let name = self.text(name)?;
            headers.push(name, &self.text(value)?);
        }
        Ok(headers)
    }

    fn outcome(&mut self) -> Result<Outcome, Malformed> {
        let status = self.u16("status")?;
        let has_body = self.u8("body flag")?;
        if has_body > 1 {
            return Err(Malformed(format!("body flag {has_body}")));
        }
        let delay_ms = self.u64("delay")?;
        let headers = self.headers(["header count", "header name", "header value"])?;
        let trailers = self.headers(["trailer count", "trailer name", "trailer value"])?;
        let body = if has_body == 1 { Some(self.text("body")?) } else { None };
        let n = self.count(8 + DECISION_LEN, "decision count")?;
        let mut decisions = Vec::with_capacity(n);
        for _ in 0..n {
            let (rule, policy) = (self.text("rule")?, self.text("policy")?);
            let (decision, shadow) = self.decision()?;
            decisions.push(RuleDecision {
                rule: rule.into(),
                policy: policy.into(),
                decision,
                shadow,
            });
        }
        let completion = self.string("completion")?;
        Ok(Outcome {
            status: (status != 0).then_some(status),
            headers,
            body,
            trailers,
            delay_ms,
            decisions,
            leases: Vec::new(),
            completion,
        })
    }

    fn record(&mut self) -> Result<(u64, Result<Reply, ErrorRecord>), Malformed> {
        let ctx = self.u64("ctx")?;
        let kind = self.u8("kind")?;
        let kind = *Kind::ALL
            .get(usize::from(kind))
            .ok_or_else(|| Malformed(format!("record kind {kind}")))?;
        let reply = match kind {
            Kind::Error => {
                let k = self.u8("error kind")?;
                let kind = *ErrorKind::ALL
                    .get(usize::from(k))
                    .ok_or_else(|| Malformed(format!("error kind {k}")))?;
                return Ok((
                    ctx,
                    Err(ErrorRecord {
                        kind,
                        message: self.text("message")?,
                        field: self.string("field")?,
                        value: self.string("value")?,
                        key: self.string("key")?,
                    }),
                ));
            }
            Kind::Unit => Reply::Unit,
            Kind::Bool => match self.u8("bool")? {
                b @ (0 | 1) => Reply::Bool(b == 1),
                b => return Err(Malformed(format!("bool {b}"))),
            },
            Kind::Count => Reply::Count(self.u64("count")?),
            Kind::Decision => Reply::Decision(self.decision()?.0),
            Kind::Decisions => {
                let n = self.count(DECISION_LEN, "decision count")?;
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    list.push(self.decision()?.0);
                }
                Reply::Decisions(list)
            }
            Kind::Acquired => {
                let (decision, _) = self.decision()?;
                let n = self.count(12, "lease count")?;
                let mut leases = Vec::with_capacity(n);
                for _ in 0..n {
                    leases.push(Lease {
                        policy: self.u32("lease policy")? as usize,
                        key: self.text("lease key")?,
                        id: self.text("lease id")?,
                    });
                }
                Reply::Acquired(decision, leases)
            }
            Kind::Outcome => {
                let o = self.outcome()?;
                let with = !o.decisions.is_empty();
                Reply::Outcome(o, with)
            }
            Kind::Json => {
                let text = self.bytes_of("json")?;
                Reply::Json(serde_json::from_slice(text).map_err(|e| Malformed(format!("json: {e}")))?)
            }
        };
        Ok((ctx, Ok(reply)))
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
    request_keeping(bytes, keep).map_err(|e| e.of("request"))
}

fn request_keeping(bytes: &[u8], keep: impl Fn(&str) -> bool) -> Result<RequestInfo, Malformed> {
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
    let mut size = 2 + 1 + 8 + 4 + 4 + 4 + 4;
    size += outcome.completion.as_ref().map_or(0, String::len);
    size += outcome.headers.iter().map(|(k, v)| strings(k, v)).sum::<usize>();
    size += outcome.trailers.iter().map(|(k, v)| strings(k, v)).sum::<usize>();
    size += outcome.body.as_ref().map_or(0, |b| 4 + b.len());
    if with_decisions {
        size += outcome
            .decisions
            .iter()
            .map(|d| strings(&d.rule, &d.policy) + DECISION_LEN)
            .sum::<usize>();
    }
    size
}

/// Appends `outcome` packed to `out`, with its decisions when `with_decisions`.
pub fn write_outcome(outcome: &Outcome, with_decisions: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(&outcome.status.unwrap_or(0).to_le_bytes());
    out.push(u8::from(outcome.body.is_some()));
    out.extend_from_slice(&outcome.delay_ms.to_le_bytes());
    for headers in [&outcome.headers, &outcome.trailers] {
        out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
        for (name, value) in headers {
            put_str(out, name);
            put_str(out, value);
        }
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
        put_decision(out, d, rd.shadow);
    }
    put_opt(out, outcome.completion.as_deref());
}

/// Appends decision `d` packed (`shadow`: only an outcome's decision has it).
fn put_decision(out: &mut Vec<u8>, d: &Decision, shadow: bool) {
    out.push(u8::from(d.allowed) | u8::from(shadow) << 1 | u8::from(d.retry_after_ms.is_some()) << 2);
    for n in [
        d.limit,
        d.remaining,
        d.reset_after_ms,
        d.retry_after_ms.unwrap_or(0),
        d.delay_ms,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    // A handful of sources: the index always fits.
    out.push(d.source.index() as u8);
}

/// Appends the record of call `ctx`'s result (see the module's documentation).
pub fn write_record(out: &mut Vec<u8>, ctx: u64, result: &Result<Reply, Error>) {
    out.extend_from_slice(&ctx.to_le_bytes());
    let reply = match result {
        Ok(reply) => reply,
        Err(e) => return write_error(out, &ErrorRecord::from(e)),
    };
    out.push(reply.kind() as u8);
    match reply {
        Reply::Unit => {}
        Reply::Bool(b) => out.push(u8::from(*b)),
        Reply::Count(n) => out.extend_from_slice(&n.to_le_bytes()),
        Reply::Decision(d) => put_decision(out, d, false),
        Reply::Decisions(list) => {
            out.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for d in list {
                put_decision(out, d, false);
            }
        }
        Reply::Acquired(d, leases) => {
            put_decision(out, d, false);
            out.extend_from_slice(&(leases.len() as u32).to_le_bytes());
            for l in leases {
                // A limiter holds far fewer than 2^32 policies.
                out.extend_from_slice(&(l.policy as u32).to_le_bytes());
                put_str(out, &l.key);
                put_str(out, &l.id);
            }
        }
        Reply::Outcome(o, with_decisions) => {
            out.reserve(outcome_len(o, *with_decisions));
            write_outcome(o, *with_decisions, out);
        }
        Reply::Json(v) => put_str(out, &v.to_string()),
    }
}

/// The error part of a record, after its ctx.
fn write_error(out: &mut Vec<u8>, e: &ErrorRecord) {
    out.push(Kind::Error as u8);
    // A handful of kinds: the index always fits.
    out.push(e.kind.index() as u8);
    put_str(out, &e.message);
    put_opt(out, e.field.as_deref());
    put_opt(out, e.value.as_deref());
    put_opt(out, e.key.as_deref());
}

/// Reads the first record of `bytes` and moves `bytes` past it: the call's
/// ctx and its reply or error. Every record of a batch: call it until
/// `bytes` is empty.
#[allow(clippy::type_complexity)]
pub fn read_record(bytes: &mut &[u8]) -> Result<(u64, Result<Reply, ErrorRecord>), Malformed> {
    let mut r = Reader { bytes };
    let record = r.record().map_err(|e| e.of("record"))?;
    *bytes = r.bytes;
    Ok(record)
}

/// Reads a whole packed outcome (what [`outcome`] wrote).
pub fn read_outcome(bytes: &[u8]) -> Result<Outcome, Malformed> {
    let mut r = Reader { bytes };
    let o = r.outcome().map_err(|e| e.of("outcome"))?;
    if !r.bytes.is_empty() {
        return Err(Malformed(format!("outcome: {} bytes after it", r.bytes.len())));
    }
    Ok(o)
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
            headers: [("Retry-After", "2"), ("RateLimit-Policy", "10;w=1")]
                .into_iter()
                .collect(),
            body: Some(r#"{"error":"rate_limit_exceeded"}"#.into()),
            trailers: [("retry-after", "2")].into_iter().collect(),
            delay_ms: 250,
            decisions: Source::ALL
                .iter()
                .enumerate()
                .map(|(i, &source)| RuleDecision {
                    rule: format!("rule{i}").into(),
                    policy: format!("policy{i}").into(),
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
        assert_eq!(read_outcome(&bytes).unwrap(), o);
        let sources: Vec<Source> = read_outcome(&bytes)
            .unwrap()
            .decisions
            .iter()
            .map(|d| d.decision.source)
            .collect();
        assert_eq!(sources, Source::ALL);

        let without = outcome(&o, false);
        assert_eq!(without.len(), outcome_len(&o, false));
        assert_eq!(
            read_outcome(&without).unwrap(),
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
            headers: [("A", "1")].into_iter().collect(),
            body: Some("{}".into()),
            trailers: [("t", "2")].into_iter().collect(),
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
        want.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, b't', 1, 0, 0, 0, b'2']);
        want.extend_from_slice(&[2, 0, 0, 0, b'{', b'}']);
        want.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0, b'r', 1, 0, 0, 0, b'p']);
        want.push(2 | 4); // denied, shadow, has a retry-after
        for n in [14u64, 0, 1504, 2000, 7] {
            want.extend_from_slice(&n.to_le_bytes());
        }
        want.push(4); // penalty
        want.extend_from_slice(&ABSENT.to_le_bytes()); // no completion token
        assert_eq!(outcome(&o, true), want);

        // A pass without headers or body: 23 bytes.
        let pass = Outcome {
            status: None,
            headers: Headers::new(),
            body: None,
            trailers: Headers::new(),
            delay_ms: 0,
            decisions: Vec::new(),
            leases: Vec::new(),
            completion: None,
        };
        let mut want = vec![0; 23];
        want.extend_from_slice(&ABSENT.to_le_bytes());
        assert_eq!(outcome(&pass, true), want);
        // An allowed request to settle after its response: the token last.
        let settle = Outcome {
            completion: Some("pl1;n1;c1".into()),
            ..pass
        };
        let mut want = vec![0; 23];
        want.extend_from_slice(&[9, 0, 0, 0]);
        want.extend_from_slice(b"pl1;n1;c1");
        assert_eq!(outcome(&settle, false), want);
        assert_eq!(read_outcome(&want).unwrap(), settle);
    }

    #[test]
    fn a_record_with_an_unknown_number_is_malformed() {
        let mut decision = Vec::new();
        write_record(&mut decision, 1, &Ok(Reply::Decision(decision_of(Source::Store))));
        let mut cases = Vec::new();
        let mut unknown_kind = decision.clone();
        unknown_kind[8] = Kind::ALL.len() as u8;
        cases.push((unknown_kind, "record: record kind 9"));
        let mut bad_bits = decision.clone();
        bad_bits[9] = 8;
        cases.push((bad_bits, "record: decision bits 0x8"));
        let mut bad_source = decision.clone();
        *bad_source.last_mut().unwrap() = Source::ALL.len() as u8;
        cases.push((bad_source, "record: source 8"));
        let mut error = Vec::new();
        write_record(&mut error, 1, &Err(Error::Closed));
        error[9] = ErrorKind::ALL.len() as u8;
        cases.push((error, "record: error kind 5"));
        let mut yes = Vec::new();
        write_record(&mut yes, 1, &Ok(Reply::Bool(true)));
        yes[9] = 2;
        cases.push((yes, "record: bool 2"));
        let mut many = Vec::new();
        write_record(&mut many, 1, &Ok(Reply::Decisions(Vec::new())));
        many[9] = 1;
        cases.push((many, "record: decision count 1 runs past the end"));
        for (bytes, want) in cases {
            assert_eq!(read_record(&mut &bytes[..]).unwrap_err().to_string(), want);
        }
    }

    fn decision_of(source: Source) -> Decision {
        decision(source, true, None)
    }

    #[test]
    fn records_follow_one_another_and_the_reader_moves_past_each() {
        let mut batch = Vec::new();
        write_record(&mut batch, 7, &Ok(Reply::Count(2)));
        write_record(&mut batch, 8, &Err(Error::config("rate", "\"x\"", "is not a rate")));
        write_record(&mut batch, 9, &Ok(Reply::Unit));
        let mut rest = &batch[..];
        assert_eq!(read_record(&mut rest).unwrap(), (7, Ok(Reply::Count(2))));
        assert_eq!(
            read_record(&mut rest).unwrap(),
            (
                8,
                Err(ErrorRecord {
                    kind: ErrorKind::Config,
                    message: "rate: \"x\" is not a rate".into(),
                    field: Some("rate".into()),
                    value: Some("\"x\"".into()),
                    key: None,
                })
            )
        );
        assert_eq!(rest, [9, 0, 0, 0, 0, 0, 0, 0, Kind::Unit as u8]);
        assert_eq!(read_record(&mut rest).unwrap(), (9, Ok(Reply::Unit)));
        assert!(rest.is_empty());
    }
}
