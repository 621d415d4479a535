//! `/check`: a proxy's forwarded request (nginx `auth_request`, Traefik
//! `ForwardAuth`, Caddy `forward_auth`) as the core's [`RequestInfo`].
//!
//! The original method comes from `X-Forwarded-Method` or
//! `X-Original-Method` (else the check request's own method: nginx's
//! subrequest keeps it), the original URI from `X-Forwarded-Uri` or
//! `X-Original-URI`, the peer is the proxy's TCP address (the rules'
//! `trusted_proxies` apply to it, then its `forwarded_header`), and every
//! other header is the client's. The core reduces an absolute-form URI to
//! its path and decodes its percent-escapes, as for the apps.
//!
//! The check URL's own query string is the proxy operator's (the client's
//! URI travels in a header): `route` (a route template), `user_header`,
//! `api_key_header`, `key_header` (the client header to read that dimension
//! from) and `proxy=nginx`: nginx's `auth_request` drops the answer's body
//! and turns any status but 2xx, 401 and 403 into a 500 with an error in its
//! log, so a refusal is answered 403 with its status in `X-Polylimit-Status`
//! and its body in `X-Polylimit-Body`, for the nginx config to rebuild.

use std::net::SocketAddr;

use axum::http::{HeaderMap, HeaderName, Method};
use percent_encoding::percent_decode_str;
use polylimit::{Limiter, RequestInfo};

/// The headers naming the original method and URI: (name, as errors spell it).
const METHOD_HEADERS: [(&str, &str); 2] = [
    ("x-forwarded-method", "X-Forwarded-Method"),
    ("x-original-method", "X-Original-Method"),
];
const URI_HEADERS: [(&str, &str); 2] = [
    ("x-forwarded-uri", "X-Forwarded-Uri"),
    ("x-original-uri", "X-Original-URI"),
];
/// The test clock's header (only with `POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1`).
pub const NOW_HEADER: &str = "x-polylimit-now-ms";
/// Where `proxy=nginx` puts a refusal's status and body.
pub const STATUS_HEADER: &str = "x-polylimit-status";
pub const BODY_HEADER: &str = "x-polylimit-body";

/// What the check URL's query string asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Params {
    route: Option<String>,
    user_header: Option<HeaderName>,
    api_key_header: Option<HeaderName>,
    key_header: Option<HeaderName>,
    /// `proxy=nginx`: a refusal as 403 with its status and body in headers.
    pub nginx: bool,
}

/// A request the proxy should not have sent: answered 400 with this text.
#[derive(Debug, PartialEq, Eq)]
pub struct BadRequest(pub String);

/// Parses the check URL's query string; an unknown or repeated parameter is
/// an error naming it.
pub fn params(query: Option<&str>) -> Result<Params, BadRequest> {
    let mut params = Params::default();
    let mut seen: Vec<String> = Vec::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_decode_str(&value.replace('+', " "))
            .decode_utf8()
            .map_err(|_| BadRequest(format!("check parameter {name}: {value:?} is not UTF-8")))?
            .into_owned();
        if seen.iter().any(|s| s == name) {
            return Err(BadRequest(format!("check parameter {name} is given twice")));
        }
        seen.push(name.to_string());
        let header = |value: &str| {
            HeaderName::from_bytes(value.as_bytes())
                .map_err(|_| BadRequest(format!("check parameter {name}: {value:?} is not a header name")))
        };
        match name {
            "route" => params.route = Some(value),
            "user_header" => params.user_header = Some(header(&value)?),
            "api_key_header" => params.api_key_header = Some(header(&value)?),
            "key_header" => params.key_header = Some(header(&value)?),
            "proxy" if value == "nginx" => params.nginx = true,
            "proxy" => return Err(BadRequest(format!("check parameter proxy: {value:?} is not nginx"))),
            _ => {
                return Err(BadRequest(format!(
                    "unknown check parameter {name:?} (route, user_header, api_key_header, key_header, proxy)"
                )))
            }
        }
    }
    Ok(params)
}

/// The one value of whichever of `names` the proxy sent; two field lines,
/// or the two headers disagreeing, is an error naming them.
fn original<'a>(headers: &'a HeaderMap, names: &[(&str, &'static str); 2]) -> Result<Option<&'a str>, BadRequest> {
    let mut found: Option<(&str, &str)> = None;
    for &(name, spelled) in names {
        let mut values = headers.get_all(name).iter();
        let Some(value) = values.next() else { continue };
        if values.next().is_some() {
            return Err(BadRequest(format!("{spelled} has several field lines")));
        }
        let value = value
            .to_str()
            .map_err(|_| BadRequest(format!("{spelled} is not visible ASCII")))?;
        match found {
            Some((first, v)) if v != value => {
                return Err(BadRequest(format!("{first} {v:?} and {spelled} {value:?} disagree")))
            }
            _ => found = Some((spelled, value)),
        }
    }
    Ok(found.map(|(_, v)| v))
}

/// A header value as the apps' frameworks read it: bytes as Latin-1.
fn text(value: &axum::http::HeaderValue) -> String {
    value.as_bytes().iter().map(|&b| b as char).collect()
}

/// The core's view of the request the proxy forwarded.
pub fn request(
    limiter: &Limiter,
    method: &Method,
    headers: &HeaderMap,
    peer: SocketAddr,
    params: &Params,
    trust_clock: bool,
) -> Result<RequestInfo, BadRequest> {
    let method = match original(headers, &METHOD_HEADERS)? {
        Some(m) if Method::from_bytes(m.as_bytes()).is_err() => {
            return Err(BadRequest(format!("original method {m:?} is not an HTTP method")))
        }
        Some(m) => m.to_string(),
        None => method.as_str().to_string(),
    };
    let path = original(headers, &URI_HEADERS)?
        .filter(|uri| !uri.is_empty())
        .ok_or_else(|| BadRequest("X-Forwarded-Uri or X-Original-URI is missing: the original request's URI".into()))?
        .to_string();
    let now_ms = match headers.get(NOW_HEADER).filter(|_| trust_clock) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| BadRequest(format!("X-Polylimit-Now-Ms {:?} is not milliseconds", text(v))))?,
        ),
    };
    let named = |name: &Option<HeaderName>| name.as_ref().and_then(|n| headers.get(n)).map(text);
    let own = |name: &str| METHOD_HEADERS.iter().chain(&URI_HEADERS).any(|(n, _)| *n == name) || name == NOW_HEADER;
    let client_headers = headers
        .iter()
        .filter(|(name, _)| !own(name.as_str()) && limiter.reads_header(name.as_str()))
        .map(|(name, value)| (name.as_str().to_string(), text(value)))
        .collect();
    Ok(RequestInfo {
        method,
        path,
        route: params.route.clone(),
        // An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d.
        peer: Some(peer.ip().to_canonical().to_string()),
        headers: client_headers,
        user: named(&params.user_header),
        api_key: named(&params.api_key_header),
        key: named(&params.key_header),
        now_ms,
        ..RequestInfo::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter() -> Limiter {
        Limiter::from_rules(
            "store: memory\ntrusted_proxies: [127.0.0.1/32]\npolicies: { api: { rate: 1/s, burst: 2 } }\n\
             rules: [{ match: { path: /api/* }, key: [ip, header:x-tenant], policy: api }]\n",
        )
        .unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        map
    }

    fn peer() -> SocketAddr {
        "[::ffff:127.0.0.1]:5000".parse().unwrap()
    }

    fn build(method: Method, pairs: &[(&str, &str)], query: Option<&str>) -> Result<RequestInfo, BadRequest> {
        let params = params(query)?;
        request(&limiter(), &method, &headers(pairs), peer(), &params, true)
    }

    #[test]
    fn nginx_form_keeps_the_subrequest_method_and_only_the_headers_the_rules_read() {
        let got = build(
            Method::HEAD,
            &[
                ("x-original-uri", "/api/a%2Fb?q=1"),
                ("x-forwarded-for", "203.0.113.9"),
                ("x-tenant", "t1"),
                ("user-agent", "curl"),
                ("x-polylimit-now-ms", "1000"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(got.method, "HEAD");
        assert_eq!(got.path, "/api/a%2Fb?q=1");
        assert_eq!(got.peer.as_deref(), Some("127.0.0.1"));
        assert_eq!(
            got.headers,
            vec![
                ("x-forwarded-for".to_string(), "203.0.113.9".to_string()),
                ("x-tenant".to_string(), "t1".to_string())
            ]
        );
        assert_eq!(got.now_ms, Some(1000));
    }

    #[test]
    fn traefik_and_caddy_forms_name_the_method_and_absolute_uri() {
        let got = build(
            Method::GET,
            &[
                ("x-forwarded-method", "POST"),
                ("x-forwarded-uri", "http://example.com/api/pay"),
            ],
            Some("route=%2Fapi%2Fpay%2F%7Bid%7D&user_header=X-User&proxy=nginx"),
        )
        .unwrap();
        assert_eq!(
            (got.method.as_str(), got.path.as_str()),
            ("POST", "http://example.com/api/pay")
        );
        assert_eq!(got.route.as_deref(), Some("/api/pay/{id}"));
        assert_eq!(got.user, None);
        let got = build(
            Method::GET,
            &[("x-forwarded-uri", "/a"), ("x-original-uri", "/a"), ("x-user", "u1")],
            Some("user_header=x-user"),
        )
        .unwrap();
        assert_eq!((got.path.as_str(), got.user.as_deref()), ("/a", Some("u1")));
    }

    #[test]
    fn hostile_forms_are_errors_naming_the_header_or_parameter() {
        let bad =
            |method: Method, pairs: &[(&str, &str)], query: Option<&str>| build(method, pairs, query).unwrap_err().0;
        assert_eq!(
            bad(Method::GET, &[], None),
            "X-Forwarded-Uri or X-Original-URI is missing: the original request's URI"
        );
        assert_eq!(
            bad(Method::GET, &[("x-original-uri", "/a"), ("x-original-uri", "/b")], None),
            "X-Original-URI has several field lines"
        );
        assert_eq!(
            bad(
                Method::GET,
                &[("x-forwarded-uri", "/a"), ("x-original-uri", "/b")],
                None
            ),
            "X-Forwarded-Uri \"/a\" and X-Original-URI \"/b\" disagree"
        );
        assert_eq!(
            bad(
                Method::GET,
                &[("x-original-uri", "/a"), ("x-original-method", "GE T")],
                None
            ),
            "original method \"GE T\" is not an HTTP method"
        );
        assert_eq!(
            bad(
                Method::GET,
                &[("x-original-uri", "/a"), ("x-polylimit-now-ms", "soon")],
                None
            ),
            "X-Polylimit-Now-Ms \"soon\" is not milliseconds"
        );
        assert_eq!(
            bad(Method::GET, &[("x-original-uri", "/a")], Some("route=/a&route=/b")),
            "check parameter route is given twice"
        );
        assert_eq!(
            bad(Method::GET, &[("x-original-uri", "/a")], Some("usr=1")),
            "unknown check parameter \"usr\" (route, user_header, api_key_header, key_header, proxy)"
        );
        assert_eq!(
            bad(Method::GET, &[("x-original-uri", "/a")], Some("user_header=a%20b")),
            "check parameter user_header: \"a b\" is not a header name"
        );
    }

    #[test]
    fn the_client_clock_is_ignored_unless_trusted() {
        let params = params(None).unwrap();
        let map = headers(&[("x-original-uri", "/a"), ("x-polylimit-now-ms", "5")]);
        let got = request(&limiter(), &Method::GET, &map, peer(), &params, false).unwrap();
        assert_eq!(got.now_ms, None);
    }
}
