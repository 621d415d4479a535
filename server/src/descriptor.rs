//! An Envoy rate-limit request, checked against the hostile-input limits,
//! and each of its descriptors turned into the core's [`RequestInfo`].
//!
//! Entry keys: `remote_address` → the client's address (`peer`), `method` or
//! `:method` → method (default `GET`), `path` or `:path` → path (default
//! `/`), `route` → route template, `user`, `api_key`, `key` → those
//! dimensions; every other key → a request header of that name (so
//! `header:<name>` keys and `x-forwarded-for` work; a repeated one is several
//! field lines). The cost is the descriptor's `hits_addend` if set, else the
//! request's, 0 meaning 1 (Envoy's rule); the core bounds it.

use crate::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use crate::proto::envoy::service::ratelimit::v3::RateLimitRequest;
use polylimit::RequestInfo;

/// At most this many descriptors per request (Envoy sends one per matching
/// rate-limit action list: a handful).
pub const MAX_DESCRIPTORS: usize = 64;
/// At most this many entries per descriptor.
pub const MAX_ENTRIES: usize = 32;
/// At most this many bytes in an entry's key.
pub const MAX_KEY_BYTES: usize = 256;
/// At most this many bytes in an entry's value (a long path or header fits).
pub const MAX_VALUE_BYTES: usize = 8192;

/// Checks the request's domain and sizes: the message names the field, the
/// value or the limit.
pub fn check_request(req: &RateLimitRequest, domain: &str) -> Result<(), String> {
    if req.domain != domain {
        return Err(format!(
            "domain {:?} is not served here (this server's domain is {domain:?})",
            clip(&req.domain)
        ));
    }
    if req.descriptors.is_empty() {
        return Err("descriptors: the list is empty".into());
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(format!(
            "descriptors: {} descriptors, more than the limit of {MAX_DESCRIPTORS}",
            req.descriptors.len()
        ));
    }
    Ok(())
}

/// The core's request for descriptor `index` of a request whose own
/// `hits_addend` is `request_hits`, decided at `now_ms` when given.
pub fn request_info(
    index: usize,
    desc: &RateLimitDescriptor,
    request_hits: u32,
    now_ms: Option<i64>,
) -> Result<RequestInfo, String> {
    let at = |j: usize| format!("descriptors[{index}].entries[{j}]");
    if desc.entries.is_empty() {
        return Err(format!("descriptors[{index}]: has no entries"));
    }
    if desc.entries.len() > MAX_ENTRIES {
        return Err(format!(
            "descriptors[{index}]: {} entries, more than the limit of {MAX_ENTRIES}",
            desc.entries.len()
        ));
    }
    if desc.limit.is_some() {
        return Err(format!(
            "descriptors[{index}].limit: limit overrides are not supported (the limits live in the rules file)"
        ));
    }
    if desc.is_negative_hits {
        return Err(format!(
            "descriptors[{index}].is_negative_hits: negative hits are not supported"
        ));
    }
    let mut info = RequestInfo {
        method: "GET".into(),
        path: "/".into(),
        ..RequestInfo::default()
    };
    let (mut method, mut path) = (None, None);
    for (j, entry) in desc.entries.iter().enumerate() {
        let (key, value) = (entry.key.as_str(), entry.value.as_str());
        if key.is_empty() {
            return Err(format!("{}.key: is empty", at(j)));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "{}.key: {} bytes, more than the limit of {MAX_KEY_BYTES}",
                at(j),
                key.len()
            ));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(format!(
                "{}.value: {} bytes, more than the limit of {MAX_VALUE_BYTES}",
                at(j),
                value.len()
            ));
        }
        let slot = match key {
            "remote_address" => &mut info.peer,
            "method" | ":method" => &mut method,
            "path" | ":path" => &mut path,
            "route" => &mut info.route,
            "user" => &mut info.user,
            "api_key" => &mut info.api_key,
            "key" => &mut info.key,
            _ => {
                info.headers.push((key.to_string(), value.to_string()));
                continue;
            }
        };
        if slot.is_some() {
            return Err(format!("{}.key: {key:?} is repeated", at(j)));
        }
        *slot = Some(value.to_string());
    }
    // Empty values are absent, as in every binding.
    if let Some(m) = method.filter(|m| !m.is_empty()) {
        info.method = m;
    }
    if let Some(p) = path.filter(|p| !p.is_empty()) {
        info.path = p;
    }
    let hits = desc.hits_addend.map_or(u64::from(request_hits), |h| h.value);
    info.cost = Some(hits.max(1));
    info.now_ms = now_ms;
    Ok(info)
}

/// At most 64 characters of a client's value, for an error message.
fn clip(text: &str) -> String {
    match text.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{Entry, RateLimitOverride};
    use crate::proto::google::protobuf::UInt64Value;

    fn desc(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: k.to_string(),
                    value: v.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn entries_map_to_dimensions_and_headers() {
        let d = desc(&[
            ("remote_address", "203.0.113.7"),
            (":method", "POST"),
            (":path", "/api/payments/1"),
            ("route", "/api/payments/{id}"),
            ("user", "alice"),
            ("api_key", "k1"),
            ("key", "tenant-9"),
            ("x-forwarded-for", "198.51.100.1"),
            ("x-forwarded-for", "198.51.100.2"),
            ("X-Login-User", "bob"),
        ]);
        let info = request_info(0, &d, 0, Some(1_000)).unwrap();
        let expected = RequestInfo {
            method: "POST".into(),
            path: "/api/payments/1".into(),
            route: Some("/api/payments/{id}".into()),
            peer: Some("203.0.113.7".into()),
            headers: vec![
                ("x-forwarded-for".into(), "198.51.100.1".into()),
                ("x-forwarded-for".into(), "198.51.100.2".into()),
                ("X-Login-User".into(), "bob".into()),
            ],
            user: Some("alice".into()),
            api_key: Some("k1".into()),
            key: Some("tenant-9".into()),
            cost: Some(1),
            now_ms: Some(1_000),
            ..RequestInfo::default()
        };
        assert_eq!(info, expected);
    }

    #[test]
    fn method_and_path_default_and_empty_values_are_absent() {
        let info = request_info(0, &desc(&[("method", ""), ("generic_key", "slow")]), 0, None).unwrap();
        assert_eq!((info.method.as_str(), info.path.as_str()), ("GET", "/"));
        assert_eq!(info.headers, vec![("generic_key".to_string(), "slow".to_string())]);
        assert_eq!((info.peer, info.now_ms), (None, None));
    }

    #[test]
    fn cost_is_the_descriptors_hits_then_the_requests_zero_meaning_one() {
        let mut d = desc(&[("key", "a")]);
        assert_eq!(request_info(0, &d, 0, None).unwrap().cost, Some(1));
        assert_eq!(request_info(0, &d, 7, None).unwrap().cost, Some(7));
        d.hits_addend = Some(UInt64Value { value: 3 });
        assert_eq!(request_info(0, &d, 7, None).unwrap().cost, Some(3));
        d.hits_addend = Some(UInt64Value { value: 0 });
        assert_eq!(request_info(0, &d, 7, None).unwrap().cost, Some(1));
        // The core bounds the cost (its error names `cost`): passed as given.
        d.hits_addend = Some(UInt64Value { value: u64::MAX });
        assert_eq!(request_info(0, &d, 7, None).unwrap().cost, Some(u64::MAX));
    }

    #[test]
    fn bad_descriptors_name_the_field_and_the_limit() {
        let err = |d: &RateLimitDescriptor| request_info(2, d, 0, None).unwrap_err();
        assert_eq!(err(&desc(&[])), "descriptors[2]: has no entries");
        let many: Vec<(&str, &str)> = vec![("h", "v"); MAX_ENTRIES + 1];
        assert_eq!(
            err(&desc(&many)),
            "descriptors[2]: 33 entries, more than the limit of 32"
        );
        assert_eq!(
            err(&desc(&[("key", "a"), ("", "b")])),
            "descriptors[2].entries[1].key: is empty"
        );
        let long_key = "k".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            err(&desc(&[(&long_key, "v")])),
            "descriptors[2].entries[0].key: 257 bytes, more than the limit of 256"
        );
        let long_value = "v".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            err(&desc(&[("key", &long_value)])),
            "descriptors[2].entries[0].value: 8193 bytes, more than the limit of 8192"
        );
        assert_eq!(
            err(&desc(&[("user", "a"), ("user", "b")])),
            "descriptors[2].entries[1].key: \"user\" is repeated"
        );
        let mut d = desc(&[("key", "a")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 5,
            unit: 1,
        });
        assert_eq!(
            err(&d),
            "descriptors[2].limit: limit overrides are not supported (the limits live in the rules file)"
        );
        let mut d = desc(&[("key", "a")]);
        d.is_negative_hits = true;
        assert_eq!(
            err(&d),
            "descriptors[2].is_negative_hits: negative hits are not supported"
        );
    }

    #[test]
    fn requests_need_the_domain_and_a_bounded_list() {
        let req = |domain: &str, n: usize| RateLimitRequest {
            domain: domain.into(),
            descriptors: vec![desc(&[("key", "a")]); n],
            hits_addend: 0,
        };
        assert_eq!(check_request(&req("edge", 1), "edge"), Ok(()));
        assert_eq!(
            check_request(&req("other", 1), "edge"),
            Err("domain \"other\" is not served here (this server's domain is \"edge\")".into())
        );
        assert_eq!(
            check_request(&req("edge", 0), "edge"),
            Err("descriptors: the list is empty".into())
        );
        assert_eq!(check_request(&req("edge", MAX_DESCRIPTORS), "edge"), Ok(()));
        assert_eq!(
            check_request(&req("edge", MAX_DESCRIPTORS + 1), "edge"),
            Err("descriptors: 65 descriptors, more than the limit of 64".into())
        );
        let long = "d".repeat(100);
        assert_eq!(
            check_request(&req(&long, 1), "edge"),
            Err(format!(
                "domain \"{}…\" is not served here (this server's domain is \"edge\")",
                "d".repeat(64)
            ))
        );
    }
}
