//! The connect phase: one NATS connection per sink, or per `source.connection_group`, and
//! one for the job API, all opened at once; a server without JetStream is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::error::DaemonError;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::nats::{connect, Connection, Links};

/// The label of the job API's own NATS connection; `@` keeps it apart from every sink
/// and group name.
pub const API_CONNECTION: &str = "@api";

/// Every connection the config needs, by label.
pub type Connections = BTreeMap<String, Connection>;

/// Opens every connection, each within `nats.connect_timeout_ms`.
pub async fn open_all(
    config: &Config,
    metrics: &Metrics,
    links: &Links,
) -> Result<Connections, DaemonError> {
    let mut labels: BTreeSet<&str> = config.sinks.iter().map(|s| s.connection_label()).collect();
    if config.api.is_some() {
        labels.insert(API_CONNECTION);
    }
    let opened = futures::future::join_all(
        labels
            .iter()
            .map(|label| connect(&config.nats, label, links, metrics)),
    )
    .await;
    let mut connections = BTreeMap::new();
    for result in opened {
        let conn = result.map_err(DaemonError::Connect)?;
        let info = conn.client.server_info();
        tracing::info!(connection = %conn.label, server = %info.server_name, version = %info.version, jetstream = info.jetstream, "connected to NATS");
        if !info.jetstream {
            return Err(DaemonError::NoJetStream {
                server: info.server_name.clone(),
                version: info.version.clone(),
            });
        }
        connections.insert(conn.label.clone(), conn);
    }
    Ok(connections)
}

/// Turns `stop` true once a client stops reconnecting (`nats.max_reconnects`): its sinks
/// can no longer pull or acknowledge, so all stop and the daemon exits 69 for the service
/// manager to restart it.
pub fn stop_when_gone(links: &Links, stop: &Arc<watch::Sender<bool>>) {
    let mut gone = links.gone();
    let stop = stop.clone();
    tokio::spawn(async move {
        if gone.wait_for(Option::is_some).await.is_ok() {
            stop.send_replace(true);
        }
    });
}

/// The JetStream context of one connection, with the configured request timeout.
pub fn jetstream_on(
    client: &async_nats::Client,
    config: &Config,
) -> async_nats::jetstream::Context {
    async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(config.nats.request_timeout_ms))
        .build(client.clone())
}

/// Flushes every connection before the process exits, each within 5 s: ACKs still in a
/// client's buffer reach the server, or are redelivered (idempotently) if they cannot.
pub async fn flush_all(connections: &Connections) {
    let flushes = connections.values().map(|c| async move {
        match tokio::time::timeout(Duration::from_secs(5), c.client.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(connection = %c.label, error = %e, "final flush failed; unsent ACKs lead to idempotent redelivery")
            }
            Err(_) => tracing::warn!(
                connection = %c.label,
                "final flush timed out (NATS unreachable); unsent ACKs lead to idempotent redelivery"
            ),
        }
    });
    futures::future::join_all(flushes).await;
}
