//! `jetsink run`: connect, bind every sink, open every destination, start one runner per
//! sink and the HTTP endpoint, then wait for shutdown.
//!
//! Start-up is all-or-nothing: a sink that cannot bind or open stops the daemon with a
//! clear error and an exit code that says whether the config (78) or a dependency (69) is
//! at fault, before any message is fetched.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::dlq::{advisory, DeadLetters, Reason};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::{bind, connect};
use crate::pipeline::{Binding, Observers, Runner, Stages};
use crate::server::{self, ServerState};
use crate::sinks::{self, SinkError};

/// Why the daemon stopped with an error; each kind has its exit code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The configuration cannot work (exit 78).
    #[error("{0}")]
    Config(String),
    /// NATS or a destination is not reachable at start-up (exit 69).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (exit 1).
    #[error("{0}")]
    Other(String),
}

impl AppError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            AppError::Config(_) => crate::exit::CONFIG,
            AppError::Unavailable(_) => crate::exit::UNAVAILABLE,
            AppError::Other(_) => crate::exit::FAILURE,
        }
    }
}

/// Runs the daemon until `shutdown` turns true and every runner has settled its batch.
pub async fn run(config: Config, shutdown: watch::Receiver<bool>) -> Result<(), AppError> {
    let metrics = Metrics::new();
    let client = connect(&config.nats, &metrics).await.map_err(|e| match e {
        crate::nats::ConnectError::Credentials { .. } => AppError::Config(e.to_string()),
        crate::nats::ConnectError::Unreachable { .. } => AppError::Unavailable(e.to_string()),
    })?;
    let info = client.server_info();
    tracing::info!(server = %info.server_name, version = %info.version, jetstream = info.jetstream, "connected to NATS");
    if !info.jetstream {
        return Err(AppError::Unavailable(format!(
            "NATS server {} ({}) has JetStream disabled; start it with -js",
            info.server_name, info.version
        )));
    }
    let js = async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(config.nats.request_timeout_ms))
        .build(client.clone());
    let health = Health::default();

    let listener = if config.http.enabled {
        let l = server::bind(&config.http.listen).await.map_err(|e| {
            AppError::Unavailable(format!(
                "http.listen: cannot listen on {}: {e}",
                config.http.listen
            ))
        })?;
        Some(l)
    } else {
        None
    };

    let mut runners = Vec::new();
    let mut advisories = Vec::new();
    // Sinks that create their stream bind first, so another sink may read that stream
    // without repeating `create_stream`.
    let mut order: Vec<&crate::config::SinkSpec> = config.sinks.iter().collect();
    order.sort_by_key(|s| s.source.create_stream.is_none());
    for spec in order {
        let bound = bind(&js, &spec.name, &spec.source).await.map_err(|e| {
            if e.is_config() {
                AppError::Config(e.to_string())
            } else {
                AppError::Unavailable(e.to_string())
            }
        })?;
        if spec.delivery.randomizer.enabled {
            let live = &bound.consumer.cached_info().config;
            let problems = crate::config::randomizer::check_consumer(
                &spec.delivery.randomizer,
                spec.delivery.batch_size,
                live.max_ack_pending,
                live.max_deliver,
                live.ack_wait.as_millis() as u64,
                spec.delivery.batch_timeout_ms,
            );
            if !problems.is_empty() {
                if spec.delivery.randomizer.skip_startup_checks {
                    for p in &problems {
                        tracing::warn!(sink = %spec.name, "randomizer start-up check skipped: {p}");
                    }
                } else {
                    return Err(AppError::Config(format!(
                        "sink {}: consumer {} cannot carry the randomizer: {} (set delivery.randomizer.skip_startup_checks to run anyway)",
                        spec.name,
                        spec.source.consumer,
                        problems.join("; ")
                    )));
                }
            }
        }
        let sink_health = health.sink(&spec.name);
        sink_health.set_bound(true);
        let mut sink = sinks::build(&spec.destination);
        sink.open().await.map_err(|e| {
            let text = format!(
                "sink {}: cannot open destination {}: {e}",
                spec.name,
                spec.destination.describe()
            );
            match e {
                SinkError::Misconfigured { .. } => AppError::Config(text),
                _ => AppError::Unavailable(text),
            }
        })?;
        sink_health.destination_ok();
        tracing::info!(sink = %spec.name, destination = %spec.destination.describe(), "destination open");
        let stages = Stages::for_sink(spec).map_err(|issues| {
            AppError::Config(format!(
                "sink {}: {}",
                spec.name,
                issues
                    .iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        })?;
        let dead_letters = match &spec.dead_letter {
            Some(cfg) if cfg.enabled => {
                let dl = DeadLetters::new(&spec.name, cfg.clone(), js.clone());
                dl.ensure_stream().await.map_err(AppError::Unavailable)?;
                Some(dl)
            }
            _ => None,
        };
        let sink_metrics = metrics.sink(&spec.name);
        advisories.push(tokio::spawn(advisory::listen(
            client.clone(),
            bound.stream.clone(),
            spec.source.consumer.clone(),
            dead_letters.clone(),
            advisory::Counters {
                max_deliveries: sink_metrics.max_deliveries.clone(),
                terminated: sink_metrics.terminated_advisories.clone(),
                dlq_published: sink_metrics.dlq_published(Reason::MaxDeliveries),
                dlq_failures: sink_metrics.dlq_failures.clone(),
            },
            shutdown.clone(),
        )));
        runners.push(Runner::new(
            spec.clone(),
            Binding {
                js: js.clone(),
                consumer: bound.consumer,
            },
            sink,
            stages,
            dead_letters,
            Observers {
                metrics: sink_metrics,
                health: sink_health,
            },
            shutdown.clone(),
        ));
    }

    let http = listener.map(|l| {
        let state = ServerState {
            metrics: metrics.clone(),
            health: health.clone(),
            client: client.clone(),
        };
        tokio::spawn(server::serve(l, state, shutdown.clone()))
    });

    let mut set = JoinSet::new();
    for r in runners {
        set.spawn(r.run());
    }
    let mut failure = None;
    while let Some(res) = set.join_next().await {
        if let Err(e) = res {
            tracing::error!(error = %e, "a sink loop panicked; its unacked messages will be redelivered");
            failure = Some(AppError::Other(format!("a sink loop panicked: {e}")));
        }
    }
    match tokio::time::timeout(Duration::from_secs(5), client.flush()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "final flush failed; unsent ACKs lead to idempotent redelivery")
        }
        Err(_) => tracing::warn!(
            "final flush timed out (NATS unreachable); unsent ACKs lead to idempotent redelivery"
        ),
    }
    if let Some(h) = http {
        let _ = h.await;
    }
    for a in advisories {
        let _ = a.await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
