//! A call's arguments as the core takes them (options JSON, `cost`/`nowMs`,
//! a request, a status), each checked by the core's one rule. Shared by the
//! limiter, its leases and the direct calls, so none of them imports another.

use polylimit::{CheckOptions, RequestInfo};
use serde_json::Value;

use crate::errors::{config_error, PolylimitError};
use crate::types::HttpRequest;

type Result<T> = std::result::Result<T, PolylimitError>;

/// The options object, from its JSON text.
pub(crate) fn options(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| config_error("options", &format!("{text:?}"), &format!("is not JSON ({e})")))
}

/// `cost` and `nowMs` as given, checked by the core's one rule.
pub(crate) fn check_options(cost: Option<i64>, now_ms: Option<i64>) -> Result<CheckOptions> {
    let cost = cost.map(Value::from);
    let now_ms = now_ms.map(Value::from);
    CheckOptions::from_values(cost.as_ref(), now_ms.as_ref()).map_err(Into::into)
}

pub(crate) fn request_info(request: &HttpRequest) -> Result<RequestInfo> {
    RequestInfo::from_value(&request.to_value()).map_err(Into::into)
}

/// A response status (null or 0: no response).
pub(crate) fn status_code(status: Option<i32>) -> Result<Option<u16>> {
    status
        .map(|s| u16::try_from(s).map_err(|_| config_error("status", &s.to_string(), "is not an HTTP status")))
        .transpose()
}
