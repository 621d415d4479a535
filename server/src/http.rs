//! The HTTP listener: /check for nginx, Traefik and Caddy, health,
//! readiness and metrics (placeholder: the edge helper fills the router).

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::state::State;

/// The HTTP routes.
fn router(_state: Arc<State>) -> Router {
    Router::new()
}

/// Serves HTTP on `listener` until `shutdown` turns true, then finishes the
/// requests in flight.
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await
}
