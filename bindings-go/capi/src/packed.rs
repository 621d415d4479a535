//! `polylimit_limiter_try_check_request`'s compact binary encodings: the
//! request the caller fills without a JSON encoder and the outcome it reads
//! without a JSON decoder. The core owns both, with their byte layout
//! (`polylimit::wire::packed`); this module adds the C constants and the
//! arguments that travel beside the buffer (cost, clock, flags).

use polylimit::wire::packed as core;
use polylimit::{CheckOptions, Outcome, RequestInfo};

use crate::errors::FfiError;

/// The length that marks an absent string in a request.
pub const POLYLIMIT_ABSENT: u32 = u32::MAX;

/// `flags` bit: put every policy's decision in the outcome.
pub const POLYLIMIT_WITH_DECISIONS: u32 = 1;
/// `flags` bit: the router matches paths case-insensitively.
pub const POLYLIMIT_CASE_INSENSITIVE: u32 = 2;
/// `flags` bit: the router ignores one trailing slash.
pub const POLYLIMIT_IGNORE_TRAILING_SLASH: u32 = 4;
/// `flags` bit: decide at `now_ms` instead of the store's clock.
pub const POLYLIMIT_HAS_NOW_MS: u32 = 8;
/// `flags` bit: peek (the outcome a check would give, nothing charged).
pub const POLYLIMIT_PEEK: u32 = 16;
/// `flags` bit: a gRPC call (`RequestInfo::grpc`): the path is its full
/// method name, the peer the gRPC library's peer string, and the outcome
/// answers with a gRPC status code and trailers.
pub const POLYLIMIT_GRPC: u32 = 32;

/// The request packed in `bytes`, with `cost` (0: the default), `now_ms`
/// and the router's `flags`; only the headers `keep` accepts are copied
/// (`Limiter::reads_header`: the others cannot change the outcome).
pub(crate) fn request(
    bytes: &[u8],
    cost: u64,
    now_ms: Option<i64>,
    flags: u32,
    keep: impl Fn(&str) -> bool,
) -> Result<RequestInfo, FfiError> {
    let request = core::read_request_keeping(bytes, keep).map_err(|e| FfiError::invalid(e.to_string()))?;
    // The core's own checks of cost, with its messages.
    let cost_value = (cost != 0).then(|| serde_json::Value::from(cost));
    let options = CheckOptions::from_values(cost_value.as_ref(), None)?;
    Ok(RequestInfo {
        case_insensitive: flags & POLYLIMIT_CASE_INSENSITIVE != 0,
        ignore_trailing_slash: flags & POLYLIMIT_IGNORE_TRAILING_SLASH != 0,
        grpc: flags & POLYLIMIT_GRPC != 0,
        cost: (cost != 0).then_some(options.cost),
        now_ms,
        ..request
    })
}

/// `outcome` packed, with its decisions when `with_decisions`.
pub(crate) fn outcome(outcome: &Outcome, with_decisions: bool) -> Vec<u8> {
    core::outcome(outcome, with_decisions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_request() -> Vec<u8> {
        let mut b = Vec::new();
        core::write_request(&RequestInfo::default(), &mut b);
        b
    }

    #[test]
    fn the_c_constant_is_the_cores() {
        assert_eq!(POLYLIMIT_ABSENT, core::ABSENT);
    }

    #[test]
    fn the_arguments_beside_the_buffer_are_set() {
        let mut b = Vec::new();
        let sent = RequestInfo {
            method: "GET".into(),
            path: "/x".into(),
            peer: Some("203.0.113.7".into()),
            ..RequestInfo::default()
        };
        core::write_request(&sent, &mut b);
        let r = request(&b, 3, Some(5), POLYLIMIT_CASE_INSENSITIVE, |_| true).unwrap();
        assert_eq!(
            r,
            RequestInfo {
                cost: Some(3),
                now_ms: Some(5),
                case_insensitive: true,
                ..sent.clone()
            }
        );
        let r = request(&b, 0, None, POLYLIMIT_IGNORE_TRAILING_SLASH, |_| true).unwrap();
        assert_eq!(
            r,
            RequestInfo {
                ignore_trailing_slash: true,
                ..sent
            }
        );
    }

    #[test]
    fn a_malformed_request_is_an_invalid_argument() {
        let mut b = empty_request();
        b.push(0);
        let err = request(&b, 0, None, 0, |_| true).unwrap_err();
        assert_eq!(
            err.status(),
            crate::errors::polylimit_status_t::POLYLIMIT_INVALID_ARGUMENT
        );
        assert!(request(&[1, 2], 0, None, 0, |_| true).is_err());
    }

    #[test]
    fn a_cost_out_of_range_is_the_cores_error() {
        let err = request(&empty_request(), u64::MAX, None, 0, |_| true).unwrap_err();
        assert_eq!(err.status(), crate::errors::polylimit_status_t::POLYLIMIT_CONFIG);
        assert!(format!("{err:?}").contains("cost"), "{err:?}");
    }
}
