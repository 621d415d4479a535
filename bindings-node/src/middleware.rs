//! `middlewarePlan`: how a middleware reads its options object, asked of the
//! core (`polylimit::options::middleware`); `options.js` acts on the answer.

use napi::bindgen_prelude::{JsObjectValue, Object, Unknown};
use napi::{Env, Result, ValueType};
use napi_derive::napi;
use polylimit::options::middleware::{middleware_plan as plan, Given};
use polylimit::Naming;

use crate::errors::guard;
use crate::limiter::request_cost;

/// What a middleware's options ask for: `check` (`build`, `route_rule` or
/// `rules`), the fields a built limiter takes, whether a key generator is
/// given, the enclosing middleware's fields a limit of its own replaces.
#[napi(object)]
pub struct MiddlewarePlan {
    pub check: String,
    pub limiter_fields: Vec<String>,
    pub key_function: bool,
    pub replaces: Vec<String>,
}

/// The core's plan for `options` (a middleware's options object; fields
/// holding `undefined` are not given); `enclosing`: inside the Fastify plugin.
/// A `cost` given as a value (not a function) is checked here, by the core's
/// rule on a check's cost: a bad one throws a ConfigError naming `cost`.
#[napi]
#[cfg_attr(test, allow(dead_code))] // called from JavaScript only
pub fn middleware_plan(env: Env, options: Object<'_>, enclosing: bool) -> Result<MiddlewarePlan> {
    guard(&env, || {
        let names = options.get_property_names()?;
        let mut fields: Vec<(String, Given)> = Vec::new();
        for i in 0..names.get_array_length()? {
            let name: String = names.get_element(i)?;
            let value: Unknown<'_> = options.get_named_property(&name)?;
            let kind = value.get_type()?;
            if name == "cost" && !matches!(kind, ValueType::Function | ValueType::Undefined) {
                // A cost given as a value is checked now, when the middleware is built.
                request_cost(&env, Some(value))?;
            }
            let given = match kind {
                ValueType::Undefined => continue,
                ValueType::Function => Given::Function,
                ValueType::String => Given::Text,
                _ => Given::Other,
            };
            fields.push((name, given));
        }
        let fields: Vec<(&str, Given)> = fields.iter().map(|(n, g)| (n.as_str(), *g)).collect();
        let p = plan(Naming::Camel, &fields, enclosing);
        Ok(MiddlewarePlan {
            check: p.check.as_str().to_string(),
            limiter_fields: p.limiter_fields,
            key_function: p.key_function,
            replaces: p.replaces,
        })
    })
}
