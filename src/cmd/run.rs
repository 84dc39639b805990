//! `jetsink run`: connect, bind every sink, open every destination, start one runner per
//! sink and the HTTP endpoint, then wait for shutdown.
//!
//! Start-up is all-or-nothing: a sink that cannot bind or open stops the daemon with a
//! clear error and an exit code that says whether the config (78) or a dependency (69) is
//! at fault, before any message is fetched.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::config::SinkSpec;
use crate::dlq::{advisory, DeadLetters, Reason};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::{bind, connect, Bound, Connection, Links, Needs};
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

/// Runs the daemon until `stop` turns true and every runner has settled its batch. The
/// daemon turns `stop` true itself when a sink's loop panics, so the other sinks settle
/// their batches and the process exits non-zero for the service manager to restart it,
/// instead of running on with one sink dead.
pub async fn run(config: Config, stop: Arc<watch::Sender<bool>>) -> Result<(), AppError> {
    let shutdown = stop.subscribe();
    let metrics = Metrics::new();
    let links = Links::new(&metrics);
    let connections = open_connections(&config, &metrics, &links).await?;
    // Declared after the connections so it drops first: a start-up refusal below (exit 78,
    // 69) closes them as jetsink's own doing, not as a client that gave up.
    let _quiet_close = links.closing_on_drop();
    // A client that stops reconnecting (`nats.max_reconnects`) leaves its sinks unable to
    // pull or acknowledge: stop them all, and exit 69 so the service manager restarts.
    let mut gone = links.gone();
    let stop_on_gone = stop.clone();
    tokio::spawn(async move {
        if gone.wait_for(Option::is_some).await.is_ok() {
            stop_on_gone.send_replace(true);
        }
    });
    let health = Health::default();

    let listeners = crate::listener::start_up(&config, metrics.registry());
    let listener = if config.http.enabled {
        let l = server::bind(&config.http.listen, config.http.accept_backlog).map_err(|e| {
            AppError::Unavailable(format!(
                "http.listen: cannot listen on {}: {e}",
                config.http.listen
            ))
        })?;
        Some(l)
    } else {
        None
    };
    let api = match &config.api {
        Some(cfg) => Some(bind_api(cfg, &metrics).await?),
        None => None,
    };

    let backlog = crate::nats::backlog::BacklogGauges::register(metrics.registry())
        .map_err(|e| AppError::Other(e.to_string()))?;
    let mut runners = Vec::new();
    let mut advisories = Vec::new();
    let mut watchers = Vec::new();
    // Sinks that create their stream bind first, so another sink may read that stream
    // without repeating `create_stream`.
    let mut order: Vec<&SinkSpec> = config.sinks.iter().collect();
    order.sort_by_key(|s| s.source.create_stream.is_none());
    for spec in order {
        let conn = connection_of(&connections, spec)?;
        let js = jetstream_on(&conn.client, &config);
        let bound = bind_all(&js, spec).await?;
        check_randomizer(spec, &bound)?;
        check_buffer(spec, &bound)?;
        let sink_health = health.sink(&spec.name);
        sink_health.set_bound(true);
        let sink = open_destination(spec).await?;
        sink_health.destination_ok();
        tracing::info!(sink = %spec.name, destination = %spec.destination.describe(), "destination open");
        if let Some(enc) = &spec.encryption {
            // Ids and fingerprints only: key material never reaches a log.
            tracing::info!(
                sink = %spec.name,
                algorithm = "AES-256-GCM",
                active_key = %enc.ring().active_id(),
                active_fingerprint = %enc.ring().active_fingerprint(),
                keys = enc.ring().len(),
                rules = enc.rules().len(),
                sealed_headers = enc.sealed_headers().len(),
                subjects = %if enc.subjects().is_empty() { "all".to_string() } else { enc.subjects().join(",") },
                "payload encryption on"
            );
        }
        let stages = Stages::for_sink(spec);
        let sink_metrics = crate::pipeline::SinkMetrics::new(&metrics, &spec.name);
        let dead_letters = match &spec.dead_letter {
            Some(cfg) if cfg.enabled => {
                let dl = DeadLetters::new(&spec.name, cfg.clone(), js.clone())
                    .with_omitted_counter(sink_metrics.dlq.payload_omitted.clone());
                dl.ensure_stream().await.map_err(AppError::Unavailable)?;
                Some(dl)
            }
            _ => None,
        };
        let results = match &spec.results {
            Some(cfg) => {
                let r = crate::jobs::ResultPublisher::new(
                    &spec.name,
                    cfg.clone(),
                    js.clone(),
                    &sink_metrics.jobs,
                    spec.delivery.idempotency_key,
                );
                r.ensure_stream().await.map_err(AppError::Unavailable)?;
                Some(r)
            }
            None => None,
        };
        for b in &bound {
            advisories.push(tokio::spawn(advisory::listen(
                conn.client.clone(),
                b.stream.clone(),
                b.consumer.cached_info().name.clone(),
                dead_letters.clone(),
                results.clone(),
                advisory::Counters {
                    max_deliveries: sink_metrics.dlq.max_deliveries.clone(),
                    terminated: sink_metrics.dlq.terminated_advisories.clone(),
                    dlq_published: sink_metrics.dlq.published(Reason::MaxDeliveries),
                    dlq_failures: sink_metrics.dlq.failures.clone(),
                },
                shutdown.clone(),
            )));
        }
        let watched = bound
            .iter()
            .map(|b| {
                let name = &b.consumer.cached_info().name;
                (b.consumer.clone(), backlog.consumer(&spec.name, name))
            })
            .collect();
        watchers.push(tokio::spawn(crate::nats::backlog::watch(
            spec.name.clone(),
            watched,
            crate::nats::backlog::REFRESH,
            shutdown.clone(),
        )));
        runners.push(
            Runner::new(
                spec.clone(),
                Binding {
                    js: js.clone(),
                    consumers: bound.into_iter().map(|b| b.consumer).collect(),
                    drops: conn.drops.clone(),
                },
                sink,
                stages,
                dead_letters,
                Observers {
                    metrics: sink_metrics,
                    health: sink_health,
                },
                shutdown.clone(),
            )
            .with_results(results),
        );
    }

    let api_task = match (api, connections.get(API_CONNECTION)) {
        (Some((listener, token, api_metrics)), Some(conn)) => {
            let cfg = config.api.clone().unwrap_or_default();
            let state = crate::api::ApiState::new(
                cfg,
                &config.sinks,
                jetstream_on(&conn.client, &config),
                token,
                api_metrics,
                shutdown.clone(),
            );
            Some(tokio::spawn(crate::api::serve(
                listener,
                state,
                listeners.clone(),
                shutdown.clone(),
            )))
        }
        _ => None,
    };
    let http = listener.map(|l| {
        let state = ServerState {
            metrics: metrics.clone(),
            health: health.clone(),
            connections: connections.values().cloned().collect(),
        };
        let limits = config.http.limits();
        tokio::spawn(server::serve(l, state, limits, listeners, shutdown.clone()))
    });

    // systemd (Type=notify): READY=1 once every runner has started, the watchdog fed from
    // the sinks' heartbeats, STOPPING=1 when shutdown starts.
    let mut notifier = None;
    let mut failure = supervise(
        runners.into_iter().map(|r| (r.name().to_string(), r.run())),
        &stop,
        || {
            let systemd = crate::notify::Systemd::from_env();
            notifier = Some(tokio::spawn(crate::notify::serve(
                systemd,
                health.clone(),
                shutdown.clone(),
            )));
        },
    )
    .await;
    if let Some(label) = links.gone().borrow().clone() {
        failure.get_or_insert(AppError::Unavailable(format!(
            "NATS connection {label} closed for good: the client stopped reconnecting after nats.max_reconnects attempts"
        )));
    }
    // From here on, closing a connection is jetsink's own doing.
    links.closing();
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
    for h in http.into_iter().chain(api_task) {
        let _ = h.await;
    }
    for a in advisories.into_iter().chain(watchers).chain(notifier) {
        let _ = a.await;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Opens one connection per sink, or per `source.connection_group`, all at once, each
/// within `nats.connect_timeout_ms`, and refuses a server without JetStream.
async fn open_connections(
    config: &Config,
    metrics: &Metrics,
    links: &Links,
) -> Result<BTreeMap<String, Connection>, AppError> {
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
        let conn = result.map_err(|e| match e {
            crate::nats::ConnectError::Credentials { .. } => AppError::Config(e.to_string()),
            crate::nats::ConnectError::Unreachable { .. } => AppError::Unavailable(e.to_string()),
        })?;
        let info = conn.client.server_info();
        tracing::info!(connection = %conn.label, server = %info.server_name, version = %info.version, jetstream = info.jetstream, "connected to NATS");
        if !info.jetstream {
            return Err(AppError::Unavailable(format!(
                "NATS server {} ({}) has JetStream disabled; start it with -js",
                info.server_name, info.version
            )));
        }
        connections.insert(conn.label.clone(), conn);
    }
    Ok(connections)
}

/// The label of the job API's own NATS connection; `@` keeps it apart from every sink
/// and group name.
const API_CONNECTION: &str = "@api";

/// Reads the job API's token and binds its listener (exit 78 for the token, 69 for a
/// taken port), and registers its metrics.
async fn bind_api(
    cfg: &crate::config::api::ApiConfig,
    metrics: &Metrics,
) -> Result<
    (
        tokio::net::TcpListener,
        Option<[u8; 32]>,
        crate::api::ApiMetrics,
    ),
    AppError,
> {
    let token = match cfg.token() {
        Some(source) => {
            Some(crate::api::load_token(&source).map_err(|e| AppError::Config(e.to_string()))?)
        }
        None => None,
    };
    let listener = server::bind(&cfg.listen, cfg.accept_backlog).map_err(|e| {
        AppError::Unavailable(format!("api.listen: cannot listen on {}: {e}", cfg.listen))
    })?;
    let api_metrics = crate::api::ApiMetrics::register(metrics.registry())
        .map_err(|e| AppError::Other(e.to_string()))?;
    Ok((listener, token, api_metrics))
}

/// The connection a sink uses.
fn connection_of<'a>(
    connections: &'a BTreeMap<String, Connection>,
    spec: &SinkSpec,
) -> Result<&'a Connection, AppError> {
    connections.get(spec.connection_label()).ok_or_else(|| {
        AppError::Other(format!(
            "sink {}: no NATS connection {} was opened",
            spec.name,
            spec.connection_label()
        ))
    })
}

/// The JetStream context of one connection, with the configured request timeout.
fn jetstream_on(client: &async_nats::Client, config: &Config) -> async_nats::jetstream::Context {
    async_nats::jetstream::ContextBuilder::new()
        .timeout(Duration::from_millis(config.nats.request_timeout_ms))
        .build(client.clone())
}

/// Binds the sink's consumer, or one consumer per random subject bucket.
async fn bind_all(
    js: &async_nats::jetstream::Context,
    spec: &SinkSpec,
) -> Result<Vec<Bound>, AppError> {
    let mut bound = Vec::new();
    for (source, lane) in spec.consumer_bindings() {
        bound.push(
            bind(js, &spec.name, &source, &Needs::of(spec, lane))
                .await
                .map_err(|e| {
                    if e.is_config() {
                        AppError::Config(e.to_string())
                    } else {
                        AppError::Unavailable(e.to_string())
                    }
                })?,
        );
    }
    Ok(bound)
}

/// Refuses consumers that cannot carry the randomizer's window, as the live server has
/// them, unless the operator opted out.
fn check_randomizer(spec: &SinkSpec, bound: &[Bound]) -> Result<(), AppError> {
    let r = &spec.delivery.randomizer;
    if !r.enabled {
        return Ok(());
    }
    for b in bound {
        let info = b.consumer.cached_info();
        let live = &info.config;
        let problems = crate::config::randomizer::check_consumer(
            r,
            spec.delivery.batch_size,
            live.max_ack_pending,
            live.max_deliver,
            live.ack_wait.as_millis() as u64,
            spec.delivery.batch_timeout_ms,
        );
        if problems.is_empty() {
            continue;
        }
        if r.skip_startup_checks {
            for p in &problems {
                tracing::warn!(sink = %spec.name, consumer = %info.name, "randomizer start-up check skipped: {p}");
            }
        } else {
            return Err(AppError::Config(format!(
                "sink {}: consumer {} cannot carry the randomizer: {} (set delivery.randomizer.skip_startup_checks to run anyway)",
                spec.name,
                info.name,
                problems.join("; ")
            )));
        }
    }
    Ok(())
}

/// Refuses consumers whose live MaxAckPending cannot carry the buffer of pulled batches
/// (the shuffler's, or an s3 `rollover`) and the batch pulled ahead (exit 78, naming both
/// settings).
fn check_buffer(spec: &SinkSpec, bound: &[Bound]) -> Result<(), AppError> {
    let delivery = spec.lanes_path.trim_end_matches(".priority_lanes");
    let base = delivery.strip_suffix(".delivery");
    let (setting, size) = match (&spec.delivery.shuffle, spec.destination.accumulate()) {
        (Some(cfg), _) => (format!("{delivery}.shuffle.buffer"), cfg.buffer),
        (None, Some(a)) => {
            let dest = base.map_or("sink".to_string(), |b| format!("{b}.destination"));
            (format!("{dest}.{}.{}", a.key, a.messages_key), a.messages)
        }
        (None, None) => return Ok(()),
    };
    let source = base.map_or("nats".to_string(), |b| format!("{b}.source"));
    for b in bound {
        let info = b.consumer.cached_info();
        let live = info.config.max_ack_pending;
        let batch_size = spec.delivery.batch_size;
        if let Some(problem) =
            crate::config::shuffle::check_consumer(size, &setting, batch_size, live)
        {
            return Err(AppError::Config(format!(
                "{setting}: sink {}: consumer {} cannot carry the buffer: {problem} (the \
                 consumer's {source}.max_ack_pending, as the server has it)",
                spec.name, info.name
            )));
        }
    }
    Ok(())
}

/// Builds and opens the destination; a configuration problem is exit 78, anything else
/// exit 69.
async fn open_destination(spec: &SinkSpec) -> Result<Box<dyn sinks::Sink>, AppError> {
    let mut sink = sinks::build(&spec.destination);
    sink.attach(&sinks::Feed {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
    });
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
    Ok(sink)
}

/// `jetsink run`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: std::path::PathBuf,
}

/// Runs every sink loop to its end, calling `started` once all are spawned. The first
/// loop that panics is logged with its sink's name and turns `stop` true, so the others
/// settle their batches and stop; the panic is returned, and the process exits non-zero.
async fn supervise<F>(
    loops: impl IntoIterator<Item = (String, F)>,
    stop: &watch::Sender<bool>,
    started: impl FnOnce(),
) -> Option<AppError>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut set = JoinSet::new();
    let mut names = HashMap::new();
    for (name, sink_loop) in loops {
        names.insert(set.spawn(sink_loop).id(), name);
    }
    started();
    let mut failure = None;
    while let Some(res) = set.join_next().await {
        if let Err(e) = res {
            let sink = names.get(&e.id()).map_or("?", String::as_str);
            tracing::error!(sink = %sink, error = %e, "sink loop panicked; stopping every sink so the service manager restarts jetsink (unacked messages will be redelivered)");
            failure.get_or_insert_with(|| {
                AppError::Other(format!("sink {sink}: its loop panicked: {e}"))
            });
            stop.send_replace(true);
        }
    }
    failure
}

/// `jetsink run`: loads the config, sets up logging and the shutdown signal, runs the
/// daemon, and bounds the wait after a signal by the largest `shutdown_timeout_ms` plus
/// 5 s; the exit code.
pub async fn execute(args: Args) -> u8 {
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::CONFIG;
        }
    };
    crate::logging::init(&config.logging.level, config.logging.format);
    crate::logging::config_warnings(&config.warnings);
    let (tx, _) = watch::channel(false);
    let tx = Arc::new(tx);
    super::signals::stop_on(tx.clone());
    serve(config, tx).await
}

/// Runs the daemon until `stop` turns true (a signal, or the caller) and answers the exit
/// code; once stopping, the wind-down is bounded by the largest `shutdown_timeout_ms` plus
/// 5 s. `jetsink run` is this on the signals (`signals::stop_on`); `jetsink quickstart`
/// feeds test messages beside it.
pub async fn serve(config: Config, stop: Arc<watch::Sender<bool>>) -> u8 {
    let grace = config
        .sinks
        .iter()
        .map(|s| s.delivery.shutdown_timeout_ms)
        .max()
        .unwrap_or(0);
    let mut rx = stop.subscribe();
    let daemon = run(config, stop);
    tokio::pin!(daemon);
    let result = tokio::select! {
        r = &mut daemon => r,
        _ = async {
            // Once a signal arrived (or a sink panicked), bound the wait for the runners
            // to settle.
            let _ = rx.wait_for(|stop| *stop).await;
            tokio::time::sleep(Duration::from_millis(grace) + Duration::from_secs(5)).await;
        } => Err(AppError::Other("shutdown did not finish in time; unacked messages will be redelivered".into())),
    };
    match result {
        Ok(()) => {
            tracing::info!("stopped cleanly");
            crate::exit::OK
        }
        Err(e) => {
            tracing::error!(error = %e, "jetsink stopped with an error");
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type SinkLoop = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

    /// A sink loop that runs until `stop` turns true, like a runner.
    async fn until_stopped(
        mut rx: watch::Receiver<bool>,
        stopped: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let _ = rx.wait_for(|s| *s).await;
        stopped.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    #[tokio::test]
    async fn a_panicking_sink_stops_the_others_and_fails_the_process_naming_the_sink() {
        let (tx, rx) = watch::channel(false);
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let healthy = Box::pin(until_stopped(rx, stopped.clone()));
        let broken = Box::pin(async { panic!("boom") });
        let loops: Vec<(String, SinkLoop)> =
            vec![("orders".into(), healthy), ("audit".into(), broken)];
        // A failure guard only: without the stop, the healthy loop would wait forever.
        let failure = tokio::time::timeout(Duration::from_secs(60), supervise(loops, &tx, || {}))
            .await
            .expect("the healthy sink was told to stop");
        let e = failure.expect("the panic is returned");
        assert!(e.to_string().contains("sink audit"), "{e}");
        assert_eq!(e.exit_code(), crate::exit::FAILURE);
        assert!(*tx.borrow(), "stop was signalled");
        assert!(
            stopped.load(std::sync::atomic::Ordering::SeqCst),
            "the healthy sink settled and stopped"
        );
    }

    #[tokio::test]
    async fn sinks_that_end_normally_are_no_failure() {
        let (tx, _rx) = watch::channel(false);
        let loops = ["orders", "audit"].map(|n| (n.to_string(), async {}));
        assert!(supervise(loops, &tx, || {}).await.is_none());
        assert!(!*tx.borrow());
    }
}
