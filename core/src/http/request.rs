//! What the limiter needs to know about a request ([`RequestInfo`]), as
//! every binding fills it in from its framework's request.

use serde_json::Value;

use crate::engine::CheckOptions;
use crate::error::{Error, Result};

/// What the limiter needs to know about a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path the framework's router saw, or the request target: the core
    /// reduces an absolute-form target to its path, drops the query and
    /// fragment and decodes unreserved percent-escapes before matching.
    pub path: String,
    /// The route template as the framework writes it (`/users/{id}`,
    /// `/users/:id`, `GET /users/{id}`); the core compares its canonical form.
    /// Without one, the `route` dimension is `unmatched`.
    pub route: Option<String>,
    /// The TCP peer address (`203.0.113.7`, `[::1]:8080`, …). `None`, `""`,
    /// `"@"` or anything that is not an address is a peer without an address
    /// (a Unix socket): a trusted proxy with `unix` in `trusted_proxies`, else
    /// the one client `unknown`.
    pub peer: Option<String>,
    /// The framework matches paths case-insensitively (Express by default):
    /// `match: { path }` then ignores case too.
    pub case_insensitive: bool,
    /// The framework serves `/a/` as `/a` (Express by default): `match: { path }`
    /// then ignores one trailing slash too.
    pub ignore_trailing_slash: bool,
    /// Request headers, in order, names in any case.
    pub headers: Vec<(String, String)>,
    /// The authenticated user, if any.
    pub user: Option<String>,
    /// The API key, if any.
    pub api_key: Option<String>,
    /// A key chosen by the caller (the `key` dimension).
    pub key: Option<String>,
    /// Units the request costs (default 1).
    pub cost: Option<u64>,
    /// Decide at this time instead of the store's clock (tests, simulations).
    pub now_ms: Option<i64>,
    /// A gRPC call (`kind: "grpc"`): `path` is its full method name
    /// (`/pkg.Service/Method`), `peer` the gRPC library's peer string
    /// (`ipv4:…`, `ipv6:[…]:…`, `unix:…`), `headers` its metadata; the
    /// outcome answers with a gRPC status code (8, 14 or 7), lowercase
    /// metadata and `retry-after` in the trailers, and the completion takes
    /// the call's gRPC status code.
    pub grpc: bool,
}

impl RequestInfo {
    /// From the JSON object the bindings and the HTTP vectors use:
    /// `method`, `path`, `route`, `peer`, `headers` (object or list of pairs),
    /// `user`, `api_key`, `key`, `cost`, `now_ms`, `case_insensitive`,
    /// `ignore_trailing_slash`, `kind` (`"http"`, the default, or `"grpc"`).
    pub fn from_value(value: &Value) -> Result<RequestInfo> {
        let obj = value
            .as_object()
            .ok_or_else(|| Error::config("request", value, "is not an object"))?;
        let text = |field: &str| -> Result<Option<String>> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(other) => Err(Error::config(format!("request.{field}"), other, "is not a string")),
            }
        };
        let mut headers = Vec::new();
        match obj.get("headers") {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (k, v) in map {
                    let v = v
                        .as_str()
                        .ok_or_else(|| Error::config(format!("request.headers.{k}"), v, "is not a string"))?;
                    headers.push((k.clone(), v.to_string()));
                }
            }
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_array().map(Vec::as_slice) {
                        Some([Value::String(k), Value::String(v)]) => headers.push((k.clone(), v.clone())),
                        _ => {
                            return Err(Error::config(
                                format!("request.headers[{i}]"),
                                item,
                                "is not a [name, value] pair",
                            ))
                        }
                    }
                }
            }
            Some(other) => {
                return Err(Error::config(
                    "request.headers",
                    other,
                    "is not an object or a list of pairs",
                ))
            }
        }
        for k in obj.keys() {
            const FIELDS: [&str; 13] = [
                "kind",
                "method",
                "path",
                "route",
                "peer",
                "headers",
                "user",
                "api_key",
                "key",
                "cost",
                "now_ms",
                "case_insensitive",
                "ignore_trailing_slash",
            ];
            if !FIELDS.contains(&k.as_str()) {
                return Err(Error::config(format!("request.{k}"), "", "is not a request field"));
            }
        }
        let options = CheckOptions::from_values(obj.get("cost"), obj.get("now_ms"))?;
        let flag = |field: &str| -> Result<bool> {
            match obj.get(field) {
                None | Some(Value::Null) => Ok(false),
                Some(Value::Bool(b)) => Ok(*b),
                Some(other) => Err(Error::config(format!("request.{field}"), other, "is not true or false")),
            }
        };
        let grpc = match obj.get("kind") {
            None | Some(Value::Null) => false,
            Some(Value::String(k)) if k == "http" => false,
            Some(Value::String(k)) if k == "grpc" => true,
            Some(other) => return Err(Error::config("request.kind", other, "is not \"http\" or \"grpc\"")),
        };
        Ok(RequestInfo {
            grpc,
            method: text("method")?.unwrap_or_else(|| "GET".into()),
            case_insensitive: flag("case_insensitive")?,
            ignore_trailing_slash: flag("ignore_trailing_slash")?,
            path: text("path")?.unwrap_or_else(|| "/".into()),
            route: text("route")?,
            peer: text("peer")?,
            headers,
            user: text("user")?,
            api_key: text("api_key")?,
            key: text("key")?,
            cost: obj.get("cost").filter(|v| !v.is_null()).map(|_| options.cost),
            now_ms: options.now_ms,
        })
    }

    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}
