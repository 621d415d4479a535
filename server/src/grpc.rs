//! Envoy's rate-limit service, `envoy.service.ratelimit.v3.RateLimitService`,
//! on tonic with the protos of the `envoy-types` crate.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use crate::state::State;

/// The service: the shared limiter and the one domain it answers.
pub struct RateLimit {
    state: Arc<State>,
    domain: String,
}

#[tonic::async_trait]
impl RateLimitService for RateLimit {
    async fn should_rate_limit(
        &self,
        _request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let _ = (&self.state, &self.domain);
        Err(Status::unimplemented("ShouldRateLimit is not implemented yet"))
    }
}

/// Serves gRPC on `listener` until `shutdown` turns true, then finishes the
/// calls in flight.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    domain: String,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(RateLimit { state, domain }))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
}
