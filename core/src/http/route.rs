//! One spelling of a route template for every framework, so the `route` key
//! dimension and `match: { route }` agree across languages: Express and
//! Fastify write `/users/:id`, Starlette `/users/{user_id:int}`, Go's
//! ServeMux `GET /users/{id}`; all become `/users/{}`. Parameter names are
//! dropped: they do not change which requests a route takes, and two
//! services seldom name them alike.

use std::borrow::Cow;

/// The canonical form of a framework's route template.
pub(crate) fn canonical(template: &str) -> Cow<'_, str> {
    // Go patterns may start with "METHOD " and a host: the path begins at the first '/'.
    let path = template.find('/').map_or(template, |i| &template[i..]);
    if !path.contains([':', '{']) {
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
    match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        // Go `{rest...}` and Starlette `{rest:path}` take the rest of the path.
        Some(inner) if inner.ends_with("...") || inner.ends_with(":path") => "{...}",
        Some(_) => "{}", // Go `{id}`, Starlette `{id}`, `{id:int}`
        None => segment,
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

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
        ] {
            assert_eq!(canonical(template), "/api/payments/{}", "{template}");
        }
        assert_eq!(canonical("GET /files/{path...}"), "/files/{...}");
        assert_eq!(canonical("/files/{path:path}"), "/files/{...}");
        assert_eq!(canonical("GET /api/{$}"), "/api/");
        assert_eq!(canonical("/plain/path"), "/plain/path");
        assert_eq!(canonical("/"), "/");
    }
}
