//! The daemon `jetsink run` starts, in the order it happens: connect, bind the endpoints,
//! assemble every sink (bind, check, open), serve, supervise, stop.
//!
//! Start-up is all-or-nothing, except for a destination that is merely late: a sink that
//! cannot bind, or whose destination refuses its settings, stops the daemon with a
//! [`DaemonError`] naming the sink and the setting, whose kind says whether the config
//! (exit 78) or a dependency (exit 69) is at fault, before any message is fetched. A
//! destination that cannot be opened yet (connection refused, a database starting up) is
//! waited for by its sink while the others run, unless `run --fail-fast`.
//!
//! While it runs, the sinks are a [`fleet`]: a reload (SIGHUP, or a changed file) stops,
//! starts or restarts single sinks and leaves the unchanged ones untouched.

mod assemble;
mod connect;
mod endpoints;
mod error;
mod fleet;
mod late;
mod plan;
mod reload;
mod supervise;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// How long the listeners and consumer watchers may take to end once the sinks stopped.
/// Their shutdown began with the signal, beside the sinks' (the listeners give open HTTP
/// connections 5 s from then), and with the final flush's 5 s this stays inside the bound
/// of [`serve`].
const WIND_DOWN: Duration = Duration::from_secs(4);

pub use error::{DaemonError, Kind};
pub use fleet::Reloads;
pub use reload::ReloadMetrics;

/// How `jetsink run` runs the daemon beyond its config.
#[derive(Default)]
pub struct Options {
    /// `--fail-fast`: a destination that cannot be opened at start fails start-up (exit 69)
    /// instead of being waited for.
    pub fail_fast: bool,
    /// Where reload requests come from; `None` ignores none (there are none).
    pub reloads: Option<Reloads>,
}

use crate::config::Config;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::Links;

/// Runs the daemon until `stop` turns true and every runner has settled its batch. The
/// daemon turns `stop` true itself when a sink's loop panics or a client stops
/// reconnecting.
/// `grace` is raised to the largest `shutdown_timeout_ms` of each reloaded config.
pub async fn run(
    config: Config,
    stop: Arc<watch::Sender<bool>>,
    options: Options,
    grace: Arc<AtomicU64>,
) -> Result<(), DaemonError> {
    let shutdown = stop.subscribe();
    let metrics = Metrics::new();
    let links = Links::new(&metrics);
    let connections = connect::open_all(&config, &metrics, &links).await?;
    // Declared after the connections so it drops first: a start-up refusal below (exit 78,
    // 69) closes them as jetsink's own doing, not as a client that gave up.
    let _quiet_close = links.closing_on_drop();
    connect::stop_when_gone(&links, &stop);
    let health = Health::exporting(&metrics);
    let endpoints = endpoints::bind(&config, &metrics).await?;
    let telemetry = match &config.telemetry.otlp {
        Some(otlp) => Some(crate::telemetry::Telemetry::start(otlp, &metrics)?),
        None => None,
    };
    let snapshot = config.metrics.clone();
    let base = fleet::Base {
        metrics: &metrics,
        health: &health,
        links: &links,
        telemetry: telemetry.as_ref(),
        stop: stop.clone(),
        fail_fast: options.fail_fast,
        grace,
    };
    let mut fleet = fleet::Fleet::new(base, config.clone(), connections)?;
    // The fleet holds the connections now and is declared after the guard above, so it
    // would drop first: this guard, declared after it, marks the closes as jetsink's own
    // before a start-up refusal drops the fleet.
    let _quiet_close_fleet = links.closing_on_drop();
    fleet.start_all().await?;
    let served = endpoints::serve(
        endpoints,
        endpoints::Served {
            config: &config,
            connections: fleet.connections(),
            watched: fleet.watched(),
            metrics: &metrics,
            health: &health,
        },
        &shutdown,
    );
    let snapshots = snapshot
        .as_ref()
        .map(|m| crate::metrics_snapshot::start(m.path(), m.interval(), &metrics, &shutdown));
    // systemd (Type=notify): READY=1 once every sink runs or waits for its destination,
    // the watchdog fed from the sinks' heartbeats, STOPPING=1 when shutdown starts.
    let notifier = tokio::spawn(crate::notify::serve(
        crate::notify::Systemd::from_env(),
        health.clone(),
        shutdown.clone(),
    ));
    let mut failure = fleet.supervise(options.reloads).await;
    let connections = fleet.into_connections();
    if let Some(label) = links.gone().borrow().clone() {
        failure.get_or_insert(DaemonError::ConnectionGone { label });
    }
    // From here on, closing a connection is jetsink's own doing.
    links.closing();
    // The final flush, the listeners' drains and the watchers' ends at once: each is
    // bounded on its own (5 s), and one after another they added up past the daemon's
    // own shutdown bound on a loaded machine, turning a clean stop into exit 1.
    let tasks = served
        .into_iter()
        .chain(Some(notifier))
        .map(|task| async move {
            let _ = task.await;
        });
    let ended = futures::future::join_all(tasks);
    // The spans of the last batches go out beside the rest (bounded on their own, 3 s).
    let traces = async {
        if let Some(t) = telemetry {
            t.finish().await;
        }
    };
    let ((), ended, ()) = tokio::join!(
        connect::flush_all(&connections),
        tokio::time::timeout(WIND_DOWN, ended),
        traces
    );
    if ended.is_err() {
        tracing::warn!(
            "listeners or consumer watchers still running {} s after the sinks stopped; exiting without them",
            WIND_DOWN.as_secs()
        );
    }
    // The last snapshot, once every sink has settled: it holds the final counts.
    if let Some(writer) = snapshots {
        writer.finish().await;
    }
    failure.map_or(Ok(()), Err)
}

/// Runs the daemon until `stop` turns true (a signal, or the caller) and answers the exit
/// code; once stopping, the wind-down is bounded by the largest `shutdown_timeout_ms` plus
/// 5 s. `jetsink run` is this on the signals; `jetsink quickstart` feeds test messages
/// beside it.
pub async fn serve(config: Config, stop: Arc<watch::Sender<bool>>, options: Options) -> u8 {
    // Raised by a reload that starts a sink with a longer `shutdown_timeout_ms`.
    let grace = Arc::new(AtomicU64::new(fleet::largest_grace(&config)));
    let mut rx = stop.subscribe();
    let daemon = run(config, stop, options, grace.clone());
    tokio::pin!(daemon);
    let result = tokio::select! {
        r = &mut daemon => r,
        _ = async {
            // Once a signal arrived (or a sink panicked), bound the wait for the runners
            // to settle.
            let _ = rx.wait_for(|stop| *stop).await;
            let grace = grace.load(Ordering::Acquire);
            tokio::time::sleep(Duration::from_millis(grace) + Duration::from_secs(5)).await;
        } => Err(DaemonError::ShutdownTimeout),
    };
    match result {
        Ok(()) => {
            tracing::info!("stopped cleanly");
            crate::exit::OK
        }
        Err(e) => {
            tracing::error!(error = %e, sink = e.sink(), setting = e.setting().as_deref(), "jetsink stopped with an error");
            e.exit_code()
        }
    }
}
