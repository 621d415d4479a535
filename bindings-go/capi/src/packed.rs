//! The compact binary encodings of `polylimit_limiter_try_check_request`: a
//! request in one buffer the caller fills without a JSON encoder, and an
//! outcome in one buffer the caller reads without a JSON decoder. Every
//! integer is little-endian; a string is a `u32` byte length and the bytes.
//!
//! Request (`polylimit_limiter_try_check_request`'s `request`):
//! - `method`, `path`, `route`, `peer`, `user`, `api_key`, `key`, in this
//!   order, each a string, or the length `0xFFFFFFFF` alone for an absent one
//!   (an absent method is `GET`, an absent path `/`);
//! - a `u32` header count, then each header's name and value (two strings).
//!
//! Strings are UTF-8; an invalid sequence becomes U+FFFD, as a JSON encoder
//! would have written it.
//!
//! Outcome:
//! - `u16` status (0: let the request through), `u8` 1 when there is a body,
//!   `u64` delay in ms;
//! - a `u32` header count, then each header's name and value (two strings);
//! - the body (a string) when there is one;
//! - a `u32` decision count (0 unless decisions were asked for), then for
//!   each: rule and policy (two strings), a `u8` of bits (1 allowed, 2 shadow,
//!   4 has a retry-after), `u64` limit, remaining, reset-after ms,
//!   retry-after ms and delay ms, and a `u8` `polylimit_source_t`.

use polylimit::{CheckOptions, Outcome, RequestInfo};

use crate::decision::polylimit_decision_t;
use crate::errors::FfiError;

/// The length that marks an absent string in a request.
pub const POLYLIMIT_ABSENT: u32 = u32::MAX;

/// `flags` bit: put every policy's decision in the outcome.
pub const POLYLIMIT_WITH_DECISIONS: u32 = 1;
/// `flags` bit: the router matches paths case-insensitively.
pub const POLYLIMIT_CASE_INSENSITIVE: u32 = 2;
/// `flags` bit: the router ignores one trailing slash.
pub const POLYLIMIT_IGNORE_TRAILING_SLASH: u32 = 4;
/// `flags` bit: decide at `now_ms` instead of the store's clock.
pub const POLYLIMIT_HAS_NOW_MS: u32 = 8;

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], FfiError> {
        if self.bytes.len() < n {
            return Err(FfiError::invalid(format!("request: {what} runs past the end")));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &str) -> Result<u32, FfiError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, what: &str) -> Result<Option<String>, FfiError> {
        let len = self.u32(what)?;
        if len == POLYLIMIT_ABSENT {
            return Ok(None);
        }
        let bytes = self.take(len as usize, what)?;
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    fn required(&mut self, what: &str) -> Result<String, FfiError> {
        self.string(what)?
            .ok_or_else(|| FfiError::invalid(format!("request: {what} is absent")))
    }
}

/// The request packed in `bytes`, with `cost` (0: the default) and `now_ms`.
pub(crate) fn request(bytes: &[u8], cost: u64, now_ms: Option<i64>, flags: u32) -> Result<RequestInfo, FfiError> {
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
    let mut headers = Vec::with_capacity(count.min(r.bytes.len() / 8));
    for _ in 0..count {
        let name = r.required("header name")?;
        let value = r.required("header value")?;
        headers.push((name, value));
    }
    if !r.bytes.is_empty() {
        return Err(FfiError::invalid(format!(
            "request: {} bytes after the last header",
            r.bytes.len()
        )));
    }
    // The core's own checks of cost and now_ms, with its messages.
    let cost_value = (cost != 0).then(|| serde_json::Value::from(cost));
    let options = CheckOptions::from_values(cost_value.as_ref(), None)?;
    Ok(RequestInfo {
        method: method.unwrap_or_else(|| "GET".into()),
        path: path.unwrap_or_else(|| "/".into()),
        route,
        peer,
        case_insensitive: flags & POLYLIMIT_CASE_INSENSITIVE != 0,
        ignore_trailing_slash: flags & POLYLIMIT_IGNORE_TRAILING_SLASH != 0,
        headers,
        user,
        api_key,
        key,
        cost: (cost != 0).then_some(options.cost),
        now_ms,
    })
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // A header or body over 4 GiB cannot come from the core; saturate rather than wrap.
    let len = u32::try_from(s.len()).unwrap_or(POLYLIMIT_ABSENT - 1);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..len as usize]);
}

/// `outcome` packed, with its decisions when `with_decisions`.
pub(crate) fn outcome(outcome: &Outcome, with_decisions: bool) -> Vec<u8> {
    let mut size = 19 + outcome.body.as_ref().map_or(0, |b| 4 + b.len());
    size += outcome
        .headers
        .iter()
        .map(|(k, v)| 8 + k.len() + v.len())
        .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&outcome.status.unwrap_or(0).to_le_bytes());
    out.push(u8::from(outcome.body.is_some()));
    out.extend_from_slice(&outcome.delay_ms.to_le_bytes());
    out.extend_from_slice(&(outcome.headers.len() as u32).to_le_bytes());
    for (name, value) in &outcome.headers {
        put_str(&mut out, name);
        put_str(&mut out, value);
    }
    if let Some(body) = &outcome.body {
        put_str(&mut out, body);
    }
    let decisions = if with_decisions { &outcome.decisions[..] } else { &[] };
    out.extend_from_slice(&(decisions.len() as u32).to_le_bytes());
    for d in decisions {
        put_str(&mut out, &d.rule);
        put_str(&mut out, &d.policy);
        let c = polylimit_decision_t::from(&d.decision);
        out.push(u8::from(c.allowed) | u8::from(d.shadow) << 1 | u8::from(c.has_retry_after) << 2);
        for n in [c.limit, c.remaining, c.reset_after_ms, c.retry_after_ms, c.delay_ms] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.push(c.source as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(out: &mut Vec<u8>, s: Option<&[u8]>) {
        match s {
            None => out.extend_from_slice(&POLYLIMIT_ABSENT.to_le_bytes()),
            Some(s) => {
                out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                out.extend_from_slice(s);
            }
        }
    }

    #[test]
    fn a_packed_request_reads_back() {
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
        let r = request(&b, 3, Some(5), POLYLIMIT_CASE_INSENSITIVE).unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/x");
        assert_eq!(r.peer.as_deref(), Some("203.0.113.7"));
        assert_eq!(r.key.as_deref(), Some("k"));
        assert_eq!(r.route, None);
        assert_eq!(r.headers[1], ("X-Bad".to_string(), "a\u{FFFD}b".to_string()));
        assert_eq!(
            (r.cost, r.now_ms, r.case_insensitive, r.ignore_trailing_slash),
            (Some(3), Some(5), true, false)
        );
    }

    #[test]
    fn a_truncated_or_padded_request_is_an_error() {
        let mut b = Vec::new();
        for _ in 0..7 {
            put(&mut b, None);
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        put(&mut b, Some(b"name"));
        assert!(request(&b, 0, None, 0).is_err());
        put(&mut b, Some(b"value"));
        assert!(request(&b, 0, None, 0).is_ok());
        b.push(0);
        assert!(request(&b, 0, None, 0).is_err());
        assert!(request(&[1, 2], 0, None, 0).is_err());
    }

    #[test]
    fn a_cost_out_of_range_is_the_cores_error() {
        let mut b = Vec::new();
        for _ in 0..7 {
            put(&mut b, None);
        }
        b.extend_from_slice(&0u32.to_le_bytes());
        let err = request(&b, u64::MAX, None, 0).unwrap_err();
        assert!(format!("{err:?}").contains("cost"), "{err:?}");
    }
}
