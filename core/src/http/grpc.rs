//! gRPC calls as requests: the one mapping every language's server
//! interceptor shares. A call is a request whose path and route are its full
//! method name (`/pkg.Service/Method`), whose method is `POST` and whose
//! headers are its metadata; its outcome answers with a gRPC status code,
//! lowercase metadata and `retry-after` in the trailers.

use std::borrow::Cow;

use super::header_list::Headers;
use super::outcome::Outcome;
use super::request::RequestInfo;

/// RESOURCE_EXHAUSTED: a limit refused the call (HTTP 429).
pub const RESOURCE_EXHAUSTED: u16 = 8;
/// UNAVAILABLE: a `fail_closed` policy's store is down (HTTP 503).
pub const UNAVAILABLE: u16 = 14;
/// PERMISSION_DENIED: the client is denylisted (HTTP 403).
pub const PERMISSION_DENIED: u16 = 7;
/// INVALID_ARGUMENT: the call's cost (a `cost: header:<name>` metadata
/// value) is refused (HTTP 400, `invalid_cost`).
pub const INVALID_ARGUMENT: u16 = 3;

/// The request the rules see for a gRPC call: method `POST`, the full
/// method name as path and route (with its leading `/`, which grpc-java
/// leaves out), and the peer as an address the client-IP rules read.
pub(super) fn as_http(req: &RequestInfo) -> Cow<'_, RequestInfo> {
    if !req.grpc {
        return Cow::Borrowed(req);
    }
    let mut http = req.clone();
    http.method = "POST".into();
    if !http.path.starts_with('/') {
        http.path.insert(0, '/');
    }
    if http.route.is_none() {
        http.route = Some(http.path.clone());
    }
    http.peer = req.peer.as_deref().and_then(peer_address);
    // Binary metadata (`-bin` keys) is no header the rules read: a binding that
    // cannot pass it as text leaves it out, and one that can gets the same answer.
    http.headers.retain(|(name, _)| !is_binary(name));
    Cow::Owned(http)
}

/// A binary metadata key (`…-bin`, any case): its values are bytes, not text.
fn is_binary(name: &str) -> bool {
    name.len() >= 4 && name.as_bytes()[name.len() - 4..].eq_ignore_ascii_case(b"-bin")
}

/// The address in a gRPC library's peer string, `None` for a Unix socket
/// or an unreadable one (then the client is a peer without an address, as
/// for HTTP). The forms: grpc-core (Python, Node) `ipv4:1.2.3.4:5`,
/// `ipv6:[::1]:5` (Python percent-escapes the brackets: `ipv6:%5B::1%5D:5`),
/// `unix:/path`; grpc-java's socket address `/1.2.3.4:5` or
/// `host/1.2.3.4:5`; grpc-go's `1.2.3.4:5`, `[::1]:5` and `@` or `` for a
/// Unix socket.
fn peer_address(peer: &str) -> Option<String> {
    let peer = peer.trim();
    if peer.starts_with("unix:") || peer.starts_with("unix-abstract:") {
        return None;
    }
    let peer = peer
        .strip_prefix("ipv4:")
        .or_else(|| peer.strip_prefix("ipv6:"))
        .unwrap_or(peer);
    // grpc-java: `InetSocketAddress.toString()`, the host name (maybe empty) before `/`.
    let peer = peer.rsplit_once('/').map_or(peer, |(_, address)| address);
    Some(percent_decoded(peer))
}

/// `%5B` → `[`; other bytes as they are (an address has no other escapes).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The HTTP outcome of a call, as the call's answer: the status as a gRPC
/// code, the metadata names in lower case (HTTP/2 and every gRPC library
/// want them so) and `retry-after` moved to the trailers. The body stays
/// the refusal's JSON: the status message.
pub(super) fn answer(mut outcome: Outcome) -> Outcome {
    outcome.status = outcome.status.map(|status| match status {
        429 => RESOURCE_EXHAUSTED,
        503 => UNAVAILABLE,
        400 => INVALID_ARGUMENT,
        _ => PERMISSION_DENIED,
    });
    let mut headers = Headers::with_capacity(outcome.headers.len(), 0);
    let mut trailers = Headers::new();
    for (name, value) in &outcome.headers {
        let name = lowercase(name);
        if name == "retry-after" {
            trailers.push(name, value);
        } else {
            headers.push(name, value);
        }
    }
    outcome.headers = headers;
    outcome.trailers = trailers;
    outcome
}

/// The core's header names in lower case, static (no allocation); any
/// other name copied.
fn lowercase(name: &str) -> Cow<'static, str> {
    const NAMES: [&str; 9] = [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "ratelimit-policy",
        "ratelimit",
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "retry-after",
    ];
    match NAMES.iter().find(|n| n.eq_ignore_ascii_case(name)) {
        Some(n) => Cow::Borrowed(n),
        None => Cow::Owned(name.to_ascii_lowercase()),
    }
}

/// The HTTP status a call that ended with gRPC status `code` is counted as
/// (a rule's `count:`), as grpc-gateway maps them; `None` (no response) for
/// no code at all.
pub(super) fn counted_status(code: Option<u16>) -> Option<u16> {
    Some(match code? {
        0 => 200,
        1 => 499,
        3 | 9 | 11 => 400,
        4 => 504,
        5 => 404,
        6 | 10 => 409,
        7 => 403,
        8 => 429,
        12 => 501,
        14 => 503,
        16 => 401,
        _ => 500, // UNKNOWN, INTERNAL, DATA_LOSS and codes past the table
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_library_s_peer_form_is_read() {
        for (peer, address) in [
            ("ipv4:203.0.113.7:50051", Some("203.0.113.7:50051")),
            ("ipv6:[2001:db8::7]:50051", Some("[2001:db8::7]:50051")),
            ("ipv6:%5B2001:db8::7%5D:50051", Some("[2001:db8::7]:50051")),
            ("ipv6:%5b::1%5d:1", Some("[::1]:1")),
            ("/203.0.113.7:50051", Some("203.0.113.7:50051")),
            ("localhost/127.0.0.1:50051", Some("127.0.0.1:50051")),
            ("/[0:0:0:0:0:0:0:1]:50051", Some("[0:0:0:0:0:0:0:1]:50051")),
            ("203.0.113.7:50051", Some("203.0.113.7:50051")),
            ("unix:/tmp/grpc.sock", None),
            ("unix-abstract:grpc", None),
            ("%", Some("%")),
            ("ipv4:%zz", Some("%zz")),
            ("", Some("")),
        ] {
            assert_eq!(peer_address(peer).as_deref(), address, "{peer}");
        }
    }

    #[test]
    fn a_call_is_a_post_to_its_full_method_name() {
        let call = RequestInfo {
            grpc: true,
            method: "GET".into(),
            path: "pkg.Service/Method".into(),
            peer: Some("ipv4:10.0.0.1:5".into()),
            headers: vec![
                ("x-user".into(), "ann".into()),
                ("x-trace-bin".into(), "AAEC".into()),
                ("X-Sig-BIN".into(), "AQ==".into()),
                ("x-é".into(), "1".into()),
            ],
            ..RequestInfo::default()
        };
        let http = as_http(&call);
        assert_eq!(http.method, "POST");
        assert_eq!(http.path, "/pkg.Service/Method");
        assert_eq!(http.route.as_deref(), Some("/pkg.Service/Method"));
        assert_eq!(http.peer.as_deref(), Some("10.0.0.1:5"));
        let kept: Vec<&str> = http.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(kept, ["x-user", "x-é"]);
        let plain = RequestInfo::default();
        assert!(matches!(as_http(&plain), Cow::Borrowed(_)));
    }

    #[test]
    fn codes_count_as_grpc_gateway_maps_them() {
        assert_eq!(counted_status(None), None);
        let table: Vec<u16> = (0..=17).map(|c| counted_status(Some(c)).unwrap()).collect();
        assert_eq!(
            table,
            [200, 499, 500, 400, 504, 404, 409, 403, 429, 400, 409, 400, 501, 500, 503, 500, 401, 500]
        );
    }
}
