//! Envoy's rate-limit service, `envoy.service.ratelimit.v3.RateLimitService`,
//! on tonic with Envoy's own protos as `envoy-types` generates them (see
//! `proto`: no protoc, no build script).
//!
//! Each descriptor is decided alone, like envoyproxy/ratelimit: every
//! descriptor is charged whether or not another is over its limit (each
//! descriptor's own rules are all-or-nothing, by the core). Envoy sends one
//! descriptor per `rate_limits` entry, and users configure them as
//! independent limits.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use crate::proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use crate::proto::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use futures_util::future::join_all;
use futures_util::FutureExt;
use polylimit::{Error, Limiter, Outcome};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use crate::state::State;
use crate::{descriptor, log, reply};

/// The metadata that sets a decision's time when the client's clock is trusted.
pub const NOW_MS_METADATA: &str = "x-polylimit-now-ms";

/// The service: the shared limiter and the one domain it answers.
pub struct RateLimit {
    state: Arc<State>,
    domain: String,
    /// `POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1` (tests only): a call's
    /// `x-polylimit-now-ms` metadata sets its decisions' time.
    trust_client_clock: bool,
}

#[tonic::async_trait]
impl RateLimitService for RateLimit {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let _in_flight = crate::ops::InFlight::grpc();
        guarded(self.decide(request)).await.map(Response::new)
    }
}

impl RateLimit {
    async fn decide(&self, request: Request<RateLimitRequest>) -> Result<RateLimitResponse, Status> {
        let now_ms = if self.trust_client_clock {
            now_ms(request.metadata())?
        } else {
            None
        };
        let req = request.into_inner();
        descriptor::check_request(&req, &self.domain).map_err(Status::invalid_argument)?;
        let infos = req
            .descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| descriptor::request_info(i, d, req.hits_addend, now_ms))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Status::invalid_argument)?;
        // Each check decides on the rules in force when it starts, whatever a
        // reload does meanwhile; `current_limit` names the policy as it is
        // when the reply is made (a reload in between shows the new rate).
        let limiter = self.state.current();
        let outcomes = join_all(infos.iter().map(|info| limiter.check_request(info))).await;
        let outcomes = outcomes
            .into_iter()
            .enumerate()
            .map(|(i, o)| o.map_err(|e| status_of(i, e)))
            .collect::<Result<Vec<Outcome>, Status>>()?;
        release_leases(limiter, &outcomes, now_ms).await;
        Ok(reply::response(limiter, outcomes))
    }
}

/// Envoy cannot tell the service when a request ends, so a concurrency
/// rule's slot is given back as soon as it is decided: through the gRPC
/// service such a rule limits simultaneous decisions, not requests in flight.
/// (A `count` rule's completion token is left unused: every request counts;
/// the core keeps a bounded number of tokens, forgetting the oldest.)
async fn release_leases(limiter: &Limiter, outcomes: &[Outcome], now_ms: Option<i64>) {
    for outcome in outcomes.iter().filter(|o| !o.leases.is_empty()) {
        // A store that is down ends the lease by its TTL; the core meters it.
        let _ = match now_ms {
            // At the decision's own time (a lease is live until then + lease).
            Some(now) => limiter.release_at(&outcome.leases, now).await,
            None => limiter.release(&outcome.leases).await,
        };
    }
}

/// The core's error for descriptor `index` as a gRPC status.
fn status_of(index: usize, error: Error) -> Status {
    match error {
        Error::Config { .. } => Status::invalid_argument(format!("descriptors[{index}]: {error}")),
        Error::Closed => Status::unavailable("the limiter is closed"),
        other => {
            log::error("check failed", &[("error", other.to_string().into())]);
            Status::internal(format!("descriptors[{index}]: {other}"))
        }
    }
}

/// The `x-polylimit-now-ms` metadata, if any.
fn now_ms(metadata: &MetadataMap) -> Result<Option<i64>, Status> {
    let Some(value) = metadata.get(NOW_MS_METADATA) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "{NOW_MS_METADATA}: {value:?} is not a time in ms since the epoch"
            ))
        })
}

/// Runs a call's handler; a panic in it (logged by the panic hook, see
/// main) answers `INTERNAL` instead of dropping the connection, and the
/// server keeps serving.
async fn guarded<T>(call: impl std::future::Future<Output = Result<T, Status>>) -> Result<T, Status> {
    AssertUnwindSafe(call)
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Err(Status::internal("internal error (logged by the server)")))
}

/// Serves gRPC on `listener` until `shutdown` turns true, then finishes the
/// calls in flight (for [`crate::shutdown::GRACE`] at most).
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    domain: String,
    trust_client_clock: bool,
    shutdown: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let service = RateLimit {
        state,
        domain,
        trust_client_clock,
    };
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let serving = tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(service))
        .serve_with_incoming_shutdown(incoming, crate::shutdown::requested(shutdown.clone()));
    crate::shutdown::bounded("gRPC", serving, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_in_a_call_answers_internal() {
        let answer = guarded(async {
            if NOW_MS_METADATA.len() > 1 {
                panic!("boom");
            }
            Ok(1)
        })
        .await;
        let status = answer.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(status.message(), "internal error (logged by the server)");
        assert_eq!(guarded(async { Ok::<_, Status>(2) }).await.unwrap(), 2);
    }

    #[test]
    fn the_clock_metadata_is_a_whole_number_of_ms() {
        let mut md = MetadataMap::new();
        assert_eq!(now_ms(&md).unwrap(), None);
        md.insert(NOW_MS_METADATA, "1700000000000".parse().unwrap());
        assert_eq!(now_ms(&md).unwrap(), Some(1_700_000_000_000));
        md.insert(NOW_MS_METADATA, "soon".parse().unwrap());
        let status = now_ms(&md).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "x-polylimit-now-ms: \"soon\" is not a time in ms since the epoch"
        );
    }
}
