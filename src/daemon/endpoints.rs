//! The HTTP endpoints: `/metrics` and health (`http`), and the job API (`api`). Their
//! addresses are bound before any sink is, so a taken port stops start-up (exit 69) before
//! a consumer is touched; they serve once every sink is assembled.

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::connect::{jetstream_on, Connections, API_CONNECTION};
use super::error::DaemonError;
use crate::api::ApiMetrics;
use crate::config::Config;
use crate::health::Health;
use crate::listener::ListenerMetrics;
use crate::metrics::Metrics;
use crate::server::{self, ServerState};

/// The bound, not yet serving, endpoints.
pub struct Endpoints {
    http: Option<TcpListener>,
    api: Option<Api>,
    connection_metrics: Option<ListenerMetrics>,
}

/// The job API's listener, token digest and metrics.
struct Api {
    listener: TcpListener,
    token: Option<[u8; 32]>,
    metrics: ApiMetrics,
}

/// Binds the configured endpoints; reads the job API's token (exit 78 when unreadable).
pub async fn bind(config: &Config, metrics: &Metrics) -> Result<Endpoints, DaemonError> {
    let connection_metrics = crate::listener::start_up(config, metrics.registry());
    let http = match config.http.enabled {
        true => Some(listen(
            "http.listen",
            &config.http.listen,
            config.http.accept_backlog,
        )?),
        false => None,
    };
    let api = match &config.api {
        Some(cfg) => {
            let token = match cfg.token() {
                Some(source) => {
                    Some(crate::api::load_token(&source).map_err(DaemonError::ApiToken)?)
                }
                None => None,
            };
            Some(Api {
                listener: listen("api.listen", &cfg.listen, cfg.accept_backlog)?,
                token,
                metrics: ApiMetrics::register(metrics.registry())?,
            })
        }
        None => None,
    };
    Ok(Endpoints {
        http,
        api,
        connection_metrics,
    })
}

fn listen(setting: &'static str, address: &str, backlog: u32) -> Result<TcpListener, DaemonError> {
    server::bind(address, backlog).map_err(|source| DaemonError::Listen {
        setting,
        address: address.to_string(),
        source,
    })
}

/// What the endpoints read while they serve.
pub struct Served<'a> {
    /// The daemon's config.
    pub config: &'a Config,
    /// Every NATS connection.
    pub connections: &'a Connections,
    /// The connections `/readyz` checks, which a reload adds to.
    pub watched: std::sync::Arc<std::sync::RwLock<Vec<crate::nats::Connection>>>,
    /// The registry `/metrics` renders.
    pub metrics: &'a Metrics,
    /// What `/healthz` and `/readyz` answer from.
    pub health: &'a Health,
}

/// Starts serving; each endpoint stops on `shutdown`.
pub fn serve(
    endpoints: Endpoints,
    with: Served<'_>,
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let Endpoints {
        http,
        api,
        connection_metrics,
    } = endpoints;
    let mut tasks = Vec::new();
    if let (Some(api), Some(conn)) = (api, with.connections.get(API_CONNECTION)) {
        let state = crate::api::ApiState::new(
            with.config.api.clone().unwrap_or_default(),
            &with.config.sinks,
            jetstream_on(&conn.client, with.config),
            api.token,
            api.metrics,
            shutdown.clone(),
        );
        tasks.push(tokio::spawn(crate::api::serve(
            api.listener,
            state,
            connection_metrics.clone(),
            shutdown.clone(),
        )));
    }
    if let Some(listener) = http {
        let state = ServerState {
            metrics: with.metrics.clone(),
            health: with.health.clone(),
            connections: with.watched,
        };
        tasks.push(tokio::spawn(server::serve(
            listener,
            state,
            with.config.http.limits(),
            connection_metrics,
            shutdown.clone(),
        )));
    }
    tasks
}
