//! How a middleware reads the one object of options it is given (Express's
//! `rateLimit(options)`, the Fastify plugin's options, a Fastify route's
//! `config.rateLimit`): which fields are the middleware's own, and whether the
//! object builds a limiter, names a route rule of an existing one, or leaves
//! the decision to that limiter's rules. One rule for every such middleware;
//! `tests/conformance/middleware/plan.json` pins it. (Python's decorators and
//! Go's middleware take typed arguments, not an options object: they always
//! ask for a route rule, or never.)

use super::Naming;

/// A field's names: (snake, camel).
type Names = (&'static str, &'static str);

/// An existing limiter the middleware checks through.
const LIMITER: Names = ("limiter", "limiter");
/// A function whose result is the request's `key` dimension.
const KEY_GENERATOR: Names = ("key_generator", "keyGenerator");
/// The request's cost: a whole number, or a function giving it per request
/// (checked by the core as a check's `cost`, then against the rules' `max_cost`).
const COST: Names = ("cost", "cost");

/// The fields only a middleware takes, never a limiter.
const MIDDLEWARE_ONLY: &[Names] = &[
    LIMITER,
    KEY_GENERATOR,
    ("user", "user"),
    ("api_key", "apiKey"),
    ("skip", "skip"),
    ("handler", "handler"),
    ("request_property_name", "requestPropertyName"),
    ("per_route", "perRoute"),
    COST,
];

/// The fields that say what is limited: options giving any of them replace
/// all of them of the enclosing middleware (a route's own policy does not mix
/// with the plugin's key or window). `windowMs`, `limit` and `max` are
/// express-rate-limit's, camel only.
const LIMIT_FIELDS: &[Names] = &[
    ("policy", "policy"),
    ("policies", "policies"),
    ("key", "key"),
    ("count", "count"),
    ("", "windowMs"),
    ("", "limit"),
    ("", "max"),
];

/// The fields of a route rule's shorthand ([`crate::RouteShorthand`]), the same in every naming.
const ROUTE_RULE_FIELDS: [&str; 3] = ["key", "policy", "count"];

/// What a given field holds, as far as the plan cares (a field whose value is
/// `undefined`, or the language's "not given", is left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// A function (a key generator, a skip or handler callback, ...).
    Function,
    /// Text: a `policy` given as text is a policy *name*.
    Text,
    /// Any other value (null included).
    Other,
}

/// What a middleware checks each request by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MiddlewareCheck {
    /// A limiter it builds from [`MiddlewarePlan::limiter_fields`].
    Build,
    /// The route rule `key`, `policy`, `count` name, of the `limiter` given,
    /// else of the enclosing one.
    RouteRule,
    /// The rules of the `limiter` given, else of the enclosing one.
    Rules,
}

impl MiddlewareCheck {
    /// `build`, `route_rule`, `rules`: the name bindings and vectors use.
    pub fn as_str(self) -> &'static str {
        match self {
            MiddlewareCheck::Build => "build",
            MiddlewareCheck::RouteRule => "route_rule",
            MiddlewareCheck::Rules => "rules",
        }
    }
}

/// What a middleware's options ask for: [`middleware_plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiddlewarePlan {
    /// What each request is checked by.
    pub check: MiddlewareCheck,
    /// The fields a limiter built from these options takes, in the order
    /// given: all but the middleware's own and functions.
    pub limiter_fields: Vec<String>,
    /// A key generator is given: a built limiter's `key_function`, and a route rule's.
    pub key_function: bool,
    /// The enclosing middleware's fields a limiter built from these options
    /// and the enclosing one's does not take from the enclosing one: every
    /// field that says what is limited (policy, policies, key, count, and in
    /// camel naming windowMs, limit, max) when these options give any of
    /// them, else none.
    pub replaces: Vec<String>,
}

/// A field's name in `naming`.
fn spelled(naming: Naming, (snake, camel): Names) -> &'static str {
    if naming == Naming::Camel {
        camel
    } else {
        snake
    }
}

/// Whether `name` is one of the middleware's own fields in `naming`.
fn middleware_only(naming: Naming, name: &str) -> bool {
    MIDDLEWARE_ONLY.iter().any(|&names| spelled(naming, names) == name)
}

/// The plan for a middleware's `fields` (name and what it holds, as given).
/// `enclosing`: the middleware sits inside one that has a limiter (a Fastify
/// route inside the plugin), whose limiter it uses unless it gives a limit of
/// its own.
///
/// - A `limiter` given: its route rule when `key`, `policy` or `count` is
///   given (a `policy` that is not a name is then a config error naming
///   `policy`), else its rules.
/// - Inside an enclosing middleware, no `limiter`: a limiter of its own when
///   any field gives a limit (anything but the middleware's own fields,
///   functions, `key`, `count` and a `policy` name), else as with a `limiter`.
/// - Otherwise: a limiter built from the options.
pub fn middleware_plan(naming: Naming, fields: &[(&str, Given)], enclosing: bool) -> MiddlewarePlan {
    let has = |name: &str| fields.iter().any(|&(n, _)| n == name);
    let names_rule = ROUTE_RULE_FIELDS.iter().any(|f| has(f));
    let key_generator = spelled(naming, KEY_GENERATOR);
    let limiter_fields: Vec<String> = fields
        .iter()
        .filter(|&&(name, given)| given != Given::Function && !middleware_only(naming, name))
        .map(|&(name, _)| name.to_string())
        .collect();
    let gives_limit = fields.iter().any(|&(name, given)| {
        given != Given::Function
            && !middleware_only(naming, name)
            && name != "key"
            && name != "count"
            && !(name == "policy" && given == Given::Text)
    });
    let check = if has(spelled(naming, LIMITER)) || (enclosing && !gives_limit) {
        if names_rule {
            MiddlewareCheck::RouteRule
        } else {
            MiddlewareCheck::Rules
        }
    } else {
        MiddlewareCheck::Build
    };
    let limit_fields = LIMIT_FIELDS
        .iter()
        .map(|&names| spelled(naming, names))
        .filter(|name| !name.is_empty());
    let replaces = if limit_fields.clone().any(has) {
        limit_fields.map(str::to_string).collect()
    } else {
        Vec::new()
    };
    MiddlewarePlan {
        check,
        limiter_fields,
        key_function: fields.iter().any(|&(n, g)| n == key_generator && g == Given::Function),
        replaces,
    }
}
