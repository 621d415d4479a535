//! Node.js binding of polylimit: a napi-rs addon that converts types and maps
//! errors; every decision, key, header and body comes from the Rust core.
#![deny(clippy::all)]

mod breaker;
mod bridge;
mod client;
mod decision;
mod errors;
mod lease;
mod limiter;
mod middleware;

pub use breaker::NativeCircuitBreaker;
pub use bridge::NativeBridge;
pub use limiter::{effective_config, NativeLimiter, NativeRouteRule};

/// Requests are allocated on the JS thread and freed on the runtime's, and
/// outcomes the other way round; glibc's malloc serializes such frees on an
/// arena lock (a futex call every other request under load), mimalloc does not.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// JS numbers arrive as f64; the core reads integers (`as_u64`/`as_i64`), so
/// whole numbers become integers again, recursively.
pub(crate) fn integral(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_991.0 => {
                if f >= 0.0 {
                    Value::from(f as u64)
                } else {
                    Value::from(f as i64)
                }
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(integral).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, integral(v))).collect()),
        other => other,
    }
}

/// The tokio runtime every check runs on (napi's runtime, built here so its
/// size can be chosen): `POLYLIMIT_WORKER_THREADS` workers, default 1. A
/// check is a few µs of Rust around a Redis round trip on one multiplexed
/// connection, so more workers mostly compete with the event loop for cores.
#[napi_derive::module_init]
fn init() {
    if let Ok(rt) = polylimit::build_runtime(Some(1)) {
        napi::bindgen_prelude::create_custom_tokio_runtime(rt);
    }
}
