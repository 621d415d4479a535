//! One spelling of a route template for every framework, so the `route` key
//! dimension and `match: { route }` agree across languages: Express and
//! Fastify write `/users/:id`, Starlette `/users/{id:int}`, Go's ServeMux
//! `GET /users/{id}`; all become `/users/{id}`.

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
        out.push_str(&canonical_segment(segment));
    }
    Cow::Owned(out)
}

fn canonical_segment(segment: &str) -> Cow<'_, str> {
    if let Some(name) = segment.strip_prefix(':') {
        // Express/Fastify `:id`, `:id?`, `:id(\d+)`: the name is the leading identifier.
        let end = name
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(name.len());
        return Cow::Owned(format!("{{{}}}", &name[..end]));
    }
    if segment == "{$}" {
        return Cow::Borrowed("");
    }
    if let Some(inner) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        // Starlette `{id:int}` → `{id}`; Go `{rest...}` → `{rest}`.
        let name = inner.split(':').next().unwrap_or(inner).trim_end_matches("...");
        return Cow::Owned(format!("{{{name}}}"));
    }
    Cow::Borrowed(segment)
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn every_framework_spells_a_route_the_same_way() {
        for template in [
            "/api/payments/{id}",
            "/api/payments/:id",
            "/api/payments/{id:int}",
            "POST /api/payments/{id}",
            "POST example.com/api/payments/{id}",
            "/api/payments/:id?",
            "/api/payments/:id(\\d+)",
        ] {
            assert_eq!(canonical(template), "/api/payments/{id}", "{template}");
        }
        assert_eq!(canonical("GET /files/{path...}"), "/files/{path}");
        assert_eq!(canonical("GET /api/{$}"), "/api/");
        assert_eq!(canonical("/plain/path"), "/plain/path");
        assert_eq!(canonical("/"), "/");
    }
}
