//! polylimit: a distributed rate limiter with one core for Rust, Python,
//! Node.js and Go.
//!
//! ```no_run
//! # async fn demo() -> polylimit::Result<()> {
//! use polylimit::{Limiter, LimiterConfig, Policy};
//! let policy = Policy::parse(r#"{"algorithm": "gcra", "rate": "10/s", "burst": 20}"#)?;
//! let limiter = Limiter::new(LimiterConfig::new(policy).with_store("redis://127.0.0.1:6379"))?;
//! let decision = limiter.check("user:42").await?;
//! if !decision.allowed {
//!     println!("retry in {:?} ms", decision.retry_after_ms);
//! }
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod adaptive;
mod algorithm;
mod anomaly;
mod background;
pub mod breaker;
pub mod bridge;
pub mod client;
mod config;
mod decision;
mod document;
pub mod duration;
mod engine;
mod env;
mod error;
mod http;
mod limiter;
mod limits;
mod metrics;
pub mod options;
mod overrides;
mod pid;
pub mod policy;
pub mod reference;
mod resilience;
mod runtime;
mod store;
pub mod wire;

pub use algorithm::adaptive::{AdaptiveReport, Transition};
pub use algorithm::Verdict;
pub use breaker::{BreakerConfig, BreakerInput, BreakerState, CallError, CircuitBreaker, DurationInput};
pub use config::effective_config;
#[doc(hidden)]
pub use config::effective_config_with;
pub use decision::{CheckResult, Decision, Lease, Source};
pub use document::{parse as parse_document, parse_rules};
#[doc(hidden)]
pub use engine::RefundProbe;
pub use engine::{CheckOptions, LimiterConfig};
pub use env::expand_document;
pub use error::{Error, ErrorKind, Result};
pub use http::{
    ended_status, CompleteOptions, HeaderDraft, HeaderMode, Headers, HeadersIter, Outcome, RequestInfo, RouteRule,
    RouteShorthand, RuleDecision, SansIoRequest,
};
pub use limiter::{sans_io_reply_len, LeaseGuard, Limiter, SansIoCall};
pub use limits::{PolicyLimit, CLUSTER_REFRESH_MS};
pub use metrics::{HistogramValue, MetricFamily, MetricKind, MetricPoint, MetricValue, MetricsSnapshot};
pub use options::Naming;
pub use overrides::{Override, OverrideSpec};
pub use policy::{Algorithm, LeakyMode, OnStoreError, Penalty, Policy, Refill, SyncPolicy};
pub use runtime::build_runtime;
#[doc(hidden)]
pub use store::redis::general_check_only;
pub use store::redis::{library, script_sha, Library, SCRIPT};
