//! One spelling of a route template for every framework, so the `route` key
//! dimension and `match: { route }` agree across languages: Express and
//! Fastify write `/users/:id`, Starlette `/users/{user_id:int}`, Go's
//! ServeMux `GET /users/{id}`, Django and Flask `/users/<int:id>`, Ktor
//! `/users/{id}`; all become `/users/{}`, and a rest-of-path parameter
//! (`{rest...}`, `{rest:path}`, `<path:rest>`, `*filepath`, `*`) `{...}`. Parameter names are
//! dropped: they do not change which requests a route takes, and two
//! services seldom name them alike.

use std::borrow::Cow;

/// The canonical form of a framework's route template.
pub(crate) fn canonical(template: &str) -> Cow<'_, str> {
    // Go patterns may start with "METHOD " and a host: the path begins at the first '/'.
    let path = template.find('/').map_or(template, |i| &template[i..]);
    if !path.contains([':', '{', '<', '*']) {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len() + 4);
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        out.push_str(canonical_segment(segment));
    }
    Cow::Owned(out)
}

fn canonical_segment(segment: &str) -> &str {
    if segment.starts_with(':') {
        return "{}"; // Express/Fastify `:id`, `:id?`, `:id(\d+)`
    }
    if segment == "{$}" {
        return ""; // Go: this path exactly
    }
    if segment.starts_with('*') {
        return "{...}"; // gin `*filepath`, echo, Hono and Koa `*`, Express 5 `*splat`: the rest of the path
    }
    // Django and Flask `<id>`, `<int:id>`; `<path:rest>` takes the rest of the path.
    if let Some(inner) = segment.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
        return if inner.starts_with("path:") { "{...}" } else { "{}" };
    }
    match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        // Go `{rest...}` and Starlette `{rest:path}` take the rest of the path.
        Some(inner) if inner.ends_with("...") || inner.ends_with(":path") => "{...}",
        Some(_) => "{}", // Go `{id}`, Starlette `{id}`, `{id:int}`
        None => segment,
    }
}

/// The path a router matches, from the request target a framework gives:
/// an absolute-form target (`http://host/p`) reduced to its path, the query
/// and fragment dropped, and percent-escapes of unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) decoded — never `%2F` or any other reserved or
/// non-ASCII byte, whose escapes keep their meaning (hex digits in upper case).
/// `case_insensitive` lowercases it (ASCII); `ignore_trailing_slash` drops one
/// trailing `/` (never the root's).
pub(crate) fn normalize_path(target: &str, case_insensitive: bool, ignore_trailing_slash: bool) -> Cow<'_, str> {
    let mut path = target;
    if let Some(scheme_end) = path.find("://") {
        let scheme = &path[..scheme_end];
        if !scheme.is_empty()
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
        {
            let rest = &path[scheme_end + 3..];
            path = rest.find(['/', '?', '#']).map_or("", |i| &rest[i..]);
        }
    }
    if let Some(i) = path.find(['?', '#']) {
        path = &path[..i];
    }
    let trimmed = ignore_trailing_slash && path.len() > 1 && path.ends_with('/');
    if trimmed {
        path = &path[..path.len() - 1];
    }
    if path.is_empty() {
        return Cow::Borrowed("/");
    }
    let folds = case_insensitive && path.bytes().any(|b| b.is_ascii_uppercase());
    if !path.contains('%') && !folds {
        return Cow::Borrowed(path);
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = (bytes[i] == b'%')
            .then(|| Some((hex(*bytes.get(i + 1)?)?, hex(*bytes.get(i + 2)?)?)))
            .flatten();
        if let Some((hi, lo)) = escape {
            let decoded = hi << 4 | lo;
            if decoded.is_ascii_alphanumeric() || b"-._~".contains(&decoded) {
                out.push(char::from(decoded));
            } else {
                out.push('%');
                out.push(char::from(bytes[i + 1].to_ascii_uppercase()));
                out.push(char::from(bytes[i + 2].to_ascii_uppercase()));
            }
            i += 3;
            continue;
        }
        let len = utf8_len(bytes[i]).min(bytes.len() - i);
        out.push_str(path.get(i..i + len).unwrap_or_default());
        i += len;
    }
    if case_insensitive {
        out.make_ascii_lowercase();
    }
    Cow::Owned(out)
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// The length of the UTF-8 sequence starting with `first` (1 for a continuation byte: never split).
fn utf8_len(first: u8) -> usize {
    match first {
        0xF0..=0xF7 => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::{canonical, normalize_path};

    #[test]
    fn paths_are_normalised_as_routers_see_them() {
        let n = |p| normalize_path(p, false, false).into_owned();
        assert_eq!(n("/api/x"), "/api/x");
        assert_eq!(n("http://evil.example/api/x"), "/api/x");
        assert_eq!(n("https://evil.example:8443/api/x?q=1#f"), "/api/x");
        assert_eq!(n("http://evil.example"), "/");
        assert_eq!(n("http://evil.example?x"), "/");
        assert_eq!(n("/api/x#f"), "/api/x");
        assert_eq!(n("/api/x?next=/admin"), "/api/x");
        assert_eq!(n("/%61pi/%7Euser/%2d%2E%5f"), "/api/~user/-._");
        assert_eq!(n("/api%2Fx"), "/api%2Fx");
        assert_eq!(n("/api%2fx/%20/%c3%a9"), "/api%2Fx/%20/%C3%A9");
        assert_eq!(n("/bad%zz/%4"), "/bad%zz/%4");
        assert_eq!(n("/é/%41"), "/é/A");
        assert_eq!(n(""), "/");
        assert_eq!(n("*"), "*");
        assert_eq!(n("//evil.example/api/x"), "//evil.example/api/x");
        assert_eq!(n("/api/x/"), "/api/x/");
        assert_eq!(normalize_path("/API/%41b/", true, true), "/api/ab");
        assert_eq!(normalize_path("/", true, true), "/");
        assert_eq!(normalize_path("/API/X/", false, true), "/API/X");
    }

    #[test]
    fn every_framework_spells_a_route_the_same_way() {
        for template in [
            "/api/payments/{id}",
            "/api/payments/:id",
            "/api/payments/{payment_id:int}",
            "POST /api/payments/{id}",
            "POST example.com/api/payments/{id}",
            "/api/payments/:id?",
            "/api/payments/:id(\\d+)",
            "/api/payments/<payment_id>",
            "/api/payments/<int:payment_id>",
        ] {
            assert_eq!(canonical(template), "/api/payments/{}", "{template}");
        }
        assert_eq!(canonical("GET /files/{path...}"), "/files/{...}");
        assert_eq!(canonical("/files/{path:path}"), "/files/{...}");
        assert_eq!(canonical("/files/<path:rest>"), "/files/{...}");
        for rest in [
            "/files/*filepath",
            "/files/*",
            "/files/*splat",
            "/files/{...}",
            "/files/{rest...}",
        ] {
            assert_eq!(canonical(rest), "/files/{...}", "{rest}");
        }
        assert_eq!(canonical("GET /api/{$}"), "/api/");
        assert_eq!(canonical("/plain/path"), "/plain/path");
        assert_eq!(canonical("/"), "/");
    }
}
