//! The HTTP listener: `/check` for nginx, Traefik and Caddy (see `check`),
//! `/healthz` (the process answers), `/readyz` (rules loaded and the store's
//! breaker not open, not shutting down), `/metrics` (the core's Prometheus
//! text and the server's counters). No log line per request: a summary of
//! the /check answers every minute there were some.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, State as Extract};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{any, get};
use axum::Router;
use futures_util::FutureExt;
use polylimit::{BreakerState, Error, Outcome};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::check::{self, BadRequest};
use crate::state::State;
use crate::{log, ops, shutdown};

#[derive(Clone)]
struct Http {
    state: Arc<State>,
    /// `POLYLIMIT_SERVER_TRUST_CLIENT_CLOCK=1` (tests only): `X-Polylimit-Now-Ms` sets `now_ms`.
    trust_clock: bool,
    stopping: watch::Receiver<bool>,
}

fn router(http: Http) -> Router {
    Router::new()
        .route("/check", any(check))
        .route("/healthz", get(|| async { text(StatusCode::OK, "ok\n") }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(http)
}

/// Serves HTTP on `listener` until `shutdown` turns true, then finishes the
/// requests in flight (for [`shutdown::GRACE`] at most).
pub async fn serve(
    listener: TcpListener,
    state: Arc<State>,
    trust_clock: bool,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let http = Http {
        state,
        trust_clock,
        stopping: shutdown.clone(),
    };
    tokio::spawn(ops::summaries());
    let service = router(http).into_make_service_with_connect_info::<SocketAddr>();
    let graceful = axum::serve(listener, service).with_graceful_shutdown(shutdown::requested(shutdown.clone()));
    shutdown::bounded("HTTP", graceful.into_future(), shutdown).await
}

async fn check(
    Extract(http): Extract<Http>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let _in_flight = ops::InFlight::check();
    let decided = AssertUnwindSafe(decide(&http, peer, &method, uri.query(), &headers))
        .catch_unwind()
        .await;
    // The panic hook (main) has logged it; the proxy gets a 500, the server goes on.
    let response = decided.unwrap_or_else(|_| error(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the check failed"));
    ops::count_check(response.status().as_u16());
    response
}

async fn decide(http: &Http, peer: SocketAddr, method: &Method, query: Option<&str>, headers: &HeaderMap) -> Response {
    let limiter = http.state.current();
    let request = check::params(query).and_then(|params| {
        check::request(limiter, method, headers, peer, &params, http.trust_clock).map(|r| (r, params))
    });
    let (request, params) = match request {
        Ok(r) => r,
        Err(BadRequest(message)) => return error(StatusCode::BAD_REQUEST, "bad_request", &message),
    };
    match limiter.check_request(&request).await {
        Ok(outcome) => {
            // As through gRPC: the proxy never says when the response ends, so a
            // concurrency rule's slot is given back at once (it limits
            // simultaneous checks); a `count` rule's completion stays unused.
            if !outcome.leases.is_empty() {
                let _ = match request.now_ms {
                    Some(now) => limiter.release_at(&outcome.leases, now).await,
                    None => limiter.release(&outcome.leases).await,
                };
            }
            answer(outcome, params.nginx).await
        }
        // The request's own values the core refuses (a key too long, …) name the field.
        Err(e @ Error::Config { .. }) => error(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
        Err(e) => {
            log::error("check failed", &[("error", e.to_string().into())]);
            error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e.to_string())
        }
    }
}

/// 200 with the outcome's headers (after its shaping delay), or its status
/// with its headers and JSON body (`nginx`: 403 carrying them, see `check`).
async fn answer(outcome: Outcome, nginx: bool) -> Response {
    let status = outcome.status.unwrap_or(200);
    let mut response = Response::builder().status(if nginx && status != 200 { 403 } else { status });
    for (name, value) in &outcome.headers {
        response = response.header(name, value);
    }
    let response = match outcome.body.filter(|_| outcome.status.is_some()) {
        Some(body) => {
            response = response.header(header::CONTENT_TYPE, "application/json");
            if nginx {
                response = response
                    .header(check::STATUS_HEADER, status)
                    .header(check::BODY_HEADER, &body);
            }
            response.body(Body::from(body))
        }
        None => {
            if outcome.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(outcome.delay_ms)).await;
            }
            response.body(Body::empty())
        }
    };
    response.unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, "internal", &e.to_string()))
}

async fn readyz(Extract(http): Extract<Http>) -> Response {
    let breaker = http.state.current().breaker_state();
    let (status, body) = if *http.stopping.borrow() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "reason": "shutting down"}),
        )
    } else if breaker == BreakerState::Open {
        let reason = "the store's circuit breaker is open: decisions come from each policy's on_store_error";
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "reason": reason}),
        )
    } else {
        (StatusCode::OK, json!({"ready": true, "breaker": breaker.as_str()}))
    };
    json_response(status, &body)
}

async fn metrics(Extract(http): Extract<Http>) -> Response {
    let mut body = http.state.current().metrics_text();
    body.push_str(&ops::metrics_text());
    let mut response = text(StatusCode::OK, body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

fn text(status: StatusCode, body: impl Into<Body>) -> Response {
    let mut response = Response::new(body.into());
    *response.status_mut() = status;
    response
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = text(status, body.to_string());
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error(status: StatusCode, error: &str, message: &str) -> Response {
    json_response(status, &json!({"error": error, "message": message}))
}
