//! The arguments of the limiter's methods as the core's types, checked by
//! the core's rules (`Naming::Snake`: errors name what the user wrote).

use polylimit::{CheckOptions, Naming, OverrideSpec, RequestInfo};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use serde_json::{Map, Value};

use crate::convert::to_value;
use crate::errors::IntoPyResult;

/// `cost` and `now_ms` as Python gave them, checked by the core's one rule.
pub(crate) fn check_options(
    cost: Option<&Bound<'_, PyAny>>,
    now_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<CheckOptions> {
    let cost = cost.map(|c| to_value(c, "cost")).transpose()?;
    let now_ms = now_ms.map(|n| to_value(n, "now_ms")).transpose()?;
    CheckOptions::from_values(cost.as_ref(), now_ms.as_ref()).into_py_result()
}

/// A completion's `cost` and `now_ms` as the JSON values the core's
/// `complete_values` validates. A cost with no JSON form goes as its `repr`,
/// which the core refuses naming `cost` (after completing without it).
pub(crate) fn complete_values(
    cost: Option<&Bound<'_, PyAny>>,
    now_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Option<Value>, Option<Value>)> {
    let cost = cost.map(|c| {
        to_value(c, "cost").unwrap_or_else(|_| Value::String(c.repr().map(|r| r.to_string()).unwrap_or_default()))
    });
    let now_ms = now_ms.map(|n| to_value(n, "now_ms")).transpose()?;
    Ok((cost, now_ms))
}

/// Every argument of `Limiter(...)` / `effective_config(...)` as one options
/// object, under the names the user wrote (`Naming::Snake`).
pub(crate) fn options_value(
    policy: Option<&Bound<'_, PyAny>>,
    store: Option<&Bound<'_, PyAny>>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<Value> {
    let mut map = match options {
        Some(o) => match to_value(o.as_any(), "")? {
            Value::Object(map) => map,
            _ => Map::new(),
        },
        None => Map::new(),
    };
    // `policy` and `store` are the two positional options; left out (None), not given.
    for (name, arg) in [("policy", policy), ("store", store)] {
        if let Some(arg) = arg.filter(|a| !a.is_none()) {
            map.insert(name.to_string(), to_value(arg, name)?);
        }
    }
    Ok(Value::Object(map))
}

/// The arguments of `set_override` as the core's [`OverrideSpec`].
pub(crate) fn override_spec(
    policy: Option<&Bound<'_, PyAny>>,
    rate: Option<&Bound<'_, PyAny>>,
    burst: Option<&Bound<'_, PyAny>>,
    ttl: Option<&Bound<'_, PyAny>>,
    now_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<OverrideSpec> {
    let mut map = Map::new();
    for (name, arg) in [
        ("policy", policy),
        ("rate", rate),
        ("burst", burst),
        ("ttl", ttl),
        ("now_ms", now_ms),
    ] {
        if let Some(arg) = arg.filter(|a| !a.is_none()) {
            map.insert(name.to_string(), to_value(arg, name)?);
        }
    }
    OverrideSpec::from_value(&Value::Object(map), Naming::Snake).into_py_result()
}

pub(crate) fn request_info(request: &Bound<'_, PyAny>) -> PyResult<RequestInfo> {
    RequestInfo::from_value(&to_value(request, "request")?).into_py_result()
}
