//! The HTTP layer every middleware shares: a framework request becomes a
//! [`RequestInfo`], the rules decide, and an [`Outcome`] says what to answer.
//! No binding computes a key, a client address, a header or a body itself.

pub(crate) mod client_ip;
#[cfg(test)]
mod client_ip_fuzz;
pub(crate) mod completion;
pub mod grpc;
mod header_list;
pub(crate) mod headers;
mod outcome;
mod plan;
mod request;
mod requests;
pub(crate) mod route;
mod route_rule;
pub(crate) mod rules;
mod sans_io;

pub use completion::{ended_status, CompleteOptions};
pub use header_list::{Headers, HeadersIter};
pub use headers::{HeaderDraft, HeaderMode};
pub use outcome::{Outcome, RuleDecision};
pub use request::RequestInfo;
pub(crate) use requests::Requests;
pub use route_rule::{RouteRule, RouteShorthand};
pub use sans_io::SansIoRequest;
