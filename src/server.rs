//! The HTTP endpoint: `/metrics` for Prometheus, `/healthz` (the loops are alive) and
//! `/readyz` (every NATS connection up, every consumer bound, every destination usable).
//!
//! It shares nothing with the data path but the metrics registry and the health state, so
//! a slow scrape can never delay an ACK.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_nats::connection::State;
use axum::extract::State as AxumState;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::http::Limits;
use crate::listener::ListenerMetrics;

use crate::health::{Health, Report};
use crate::metrics::Metrics;
use crate::nats::Connection;

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    /// The registry rendered at `/metrics`.
    pub metrics: Metrics,
    /// Liveness and readiness of the sinks.
    pub health: Health,
    /// Every NATS connection, for its state; a reload adds those it opens.
    pub connections: Arc<RwLock<Vec<Connection>>>,
}

/// Binds the listener now, with `backlog` as its accept queue, so a taken port fails
/// start-up rather than later.
pub fn bind(listen: &str, backlog: u32) -> std::io::Result<TcpListener> {
    crate::listener::bind(listen, backlog)
}

/// Serves until `shutdown` turns true, within `limits` ([`crate::listener`]).
pub async fn serve(
    listener: TcpListener,
    state: ServerState,
    limits: Limits,
    connections: Option<ListenerMetrics>,
    shutdown: watch::Receiver<bool>,
) {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    if let Some(a) = addr {
        tracing::info!(listen = %a, max_connections = limits.max_connections, "http endpoint listening (/metrics, /healthz, /readyz)");
    }
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    crate::listener::serve(listener, app, limits, "http", connections, shutdown).await;
}

async fn metrics(AxumState(s): AxumState<ServerState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.render(),
    )
        .into_response()
}

fn answer(report: Report) -> Response {
    let code = if report.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(report)).into_response()
}

async fn healthz(AxumState(s): AxumState<ServerState>) -> Response {
    answer(s.health.liveness(Instant::now()))
}

async fn readyz(AxumState(s): AxumState<ServerState>) -> Response {
    let down: Vec<String> = s
        .connections
        .read()
        .map(|cs| {
            cs.iter()
                .filter(|c| c.client.connection_state() != State::Connected)
                .map(|c| c.label.clone())
                .collect()
        })
        .unwrap_or_default();
    let down: Vec<&str> = down.iter().map(String::as_str).collect();
    answer(s.health.readiness(&down))
}
