//! Opens the one NATS connection every sink shares.
//!
//! The first connect must succeed within `connect_timeout_ms` or start-up fails with exit
//! 69; after that the client reconnects by itself, with a capped delay, and the
//! `jetsink_nats_connected` gauge and the log follow the connection state.

use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event};

use crate::config::NatsConfig;
use crate::metrics::Metrics;

/// Why the first connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// An environment variable or file named by the config is missing.
    #[error("nats.{key}: {message}")]
    Credentials {
        /// The config key that names the secret.
        key: &'static str,
        /// What is missing (never the secret itself).
        message: String,
    },
    /// The servers did not accept a connection.
    #[error("cannot connect to NATS at {servers}: {source}")]
    Unreachable {
        /// The configured server list.
        servers: String,
        /// The client's reason.
        source: async_nats::ConnectError,
    },
}

fn secret_from_env(key: &'static str, var: &str) -> Result<String, ConnectError> {
    std::env::var(var).map_err(|_| ConnectError::Credentials {
        key,
        message: format!("environment variable {var} is not set"),
    })
}

/// Connects with the configured identity, timeouts and reconnect policy.
pub async fn connect(cfg: &NatsConfig, metrics: &Metrics) -> Result<Client, ConnectError> {
    let mut opts = match &cfg.creds_file {
        Some(path) => ConnectOptions::with_credentials_file(path.clone())
            .await
            .map_err(|e| ConnectError::Credentials {
                key: "creds_file",
                message: format!("cannot read {}: {e}", path.display()),
            })?,
        None => ConnectOptions::new(),
    };
    if let (Some(user), Some(var)) = (&cfg.user, &cfg.password_env) {
        opts = opts.user_and_password(user.clone(), secret_from_env("password_env", var)?);
    }
    if let Some(var) = &cfg.token_env {
        opts = opts.token(secret_from_env("token_env", var)?);
    }
    let max_delay = Duration::from_millis(cfg.reconnect_delay_max_ms);
    let m = metrics.clone();
    opts = opts
        .name(&cfg.name)
        .connection_timeout(Duration::from_millis(cfg.connect_timeout_ms))
        .request_timeout(Some(Duration::from_millis(cfg.request_timeout_ms)))
        .max_reconnects(cfg.max_reconnects)
        .reconnect_delay_callback(move |attempts| {
            let exp = 2u64
                .saturating_pow(attempts.min(16) as u32)
                .saturating_mul(50);
            Duration::from_millis(exp).min(max_delay)
        })
        .event_callback(move |event| {
            let m = m.clone();
            async move {
                match event {
                    Event::Connected => {
                        m.set_nats_connected(true);
                        tracing::info!("NATS connection (re)established");
                    }
                    Event::Disconnected => {
                        m.set_nats_connected(false);
                        tracing::warn!("NATS connection lost; reconnecting");
                    }
                    Event::Closed => {
                        // Also emitted when jetsink itself drops the client at shutdown.
                        m.set_nats_connected(false);
                        tracing::warn!("NATS connection closed");
                    }
                    Event::SlowConsumer(sid) => {
                        tracing::warn!(sid, "NATS slow consumer: a subscription dropped messages")
                    }
                    other => tracing::info!(event = %other, "NATS event"),
                }
            }
        });
    let client =
        opts.connect(cfg.servers.clone())
            .await
            .map_err(|source| ConnectError::Unreachable {
                servers: cfg.servers.join(","),
                source,
            })?;
    metrics.set_nats_connected(true);
    Ok(client)
}
