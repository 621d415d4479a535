//! The native half of the JVM binding: the core's limiter exposed through
//! uniffi, whose generated Kotlin (`src/main/kotlin/dev/polylimit/`) Kotlin
//! and Java code call through JNA.
//!
//! Thin, as the other bindings: every method maps types, clones the core
//! limiter, runs the core call and maps the error. Options go to the core as
//! one JSON object under the rules-file (snake_case) names, read by
//! `Limiter::build` like every other binding's.
//!
//! No panic crosses the boundary: every body runs under `catch_unwind` (an
//! async one is spawned on the runtime and its `JoinError` is looked at) and a
//! panic becomes `PolylimitException.Internal`.

mod anomaly;
mod args;
mod breaker;
mod client;
mod direct;
mod errors;
mod http;
mod lease;
mod limiter;
mod overrides;
mod runtime;
mod types;

pub use anomaly::{AnomalyEvent, AnomalyListener};
pub use breaker::{CircuitBreaker, Permit};
pub use client::RetryPolicy;
pub use errors::PolylimitError;
pub use lease::{Acquired, Lease};
pub use limiter::NativeLimiter;
pub use types::{Decision, Header, HttpRequest, Outcome, Override, RuleDecision};

uniffi::setup_scaffolding!();

/// The configuration `Limiter(optionsJson)` would be built from, in canonical
/// form (every option under its rules-file name with its effective value,
/// each policy with every field, the rules), as JSON text. Throws what
/// building the limiter throws.
#[uniffi::export]
pub fn effective_config(options_json: String) -> Result<String, PolylimitError> {
    errors::guard(|| {
        let options = args::options(&options_json)?;
        let config = polylimit::effective_config(polylimit::Naming::Snake, &options)?;
        Ok(config.to_string())
    })
}

/// The version of the native library (the workspace version).
#[uniffi::export]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
