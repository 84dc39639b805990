//! The running sinks, each with a life of its own: its own stop signal (turned true by the
//! daemon's stop, or by a reload that removes or changes it), the fingerprint of the
//! settings it runs with, and its task. A sink's task waits for a late destination, then
//! runs; the fleet starts sinks at start-up and at reload, stops them one at a time or all
//! together, and keeps supervise's rule: a sink loop that panics stops the daemon, which
//! exits non-zero.
//!
//! Reloads are applied one at a time, in the order they were asked for (one asked for
//! during a reload runs after it). Once the daemon's stop turned true no reload starts; one
//! in progress starts no further sink, and every sink, including those it started, is
//! stopped with the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::{mpsc, watch};

use super::assemble::{self, SinkCtx};
use super::connect::{jetstream_on, Connections};
use super::error::DaemonError;
use super::late;
use super::plan;
use super::reload::{self, ReloadMetrics};
use super::supervise::{self, Ended};
use crate::config::{Config, SinkSpec};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::backlog::BacklogGauges;
use crate::nats::{Connection, Links};

/// Where reload requests come from: a SIGHUP or a changed file each send one.
pub struct Reloads {
    /// The config file, read again at each reload.
    pub path: PathBuf,
    /// One `()` per request.
    pub requests: mpsc::Receiver<()>,
}

/// What the fleet shares with the rest of the daemon.
pub struct Base<'a> {
    /// The registry.
    pub metrics: &'a Metrics,
    /// Health, per sink.
    pub health: &'a Health,
    /// The NATS connections' life signals, for a connection a reload opens.
    pub links: &'a Links,
    /// The trace exporter, with `telemetry.otlp`.
    pub telemetry: Option<&'a crate::telemetry::Telemetry>,
    /// The daemon's stop.
    pub stop: Arc<watch::Sender<bool>>,
    /// `run --fail-fast`: a destination that cannot be opened at start fails start-up
    /// (exit 69) instead of being waited for.
    pub fail_fast: bool,
    /// The largest `shutdown_timeout_ms` of every config run so far, which bounds the
    /// daemon's shutdown.
    pub grace: Arc<AtomicU64>,
}

/// One running sink.
struct Slot {
    fingerprint: String,
    stop: Arc<watch::Sender<bool>>,
    done: watch::Receiver<bool>,
}

/// A sink bound and checked, its destination open or waited for, not yet running.
struct Ready {
    ctx: SinkCtx,
    prepared: assemble::Prepared,
    first: Result<assemble::Opened, DaemonError>,
    stop: Arc<watch::Sender<bool>>,
}

/// Every sink of the daemon.
pub struct Fleet<'a> {
    base: Base<'a>,
    config: Config,
    connections: Connections,
    /// The connections `/readyz` checks: those of the start, and those a reload opened.
    watched: Arc<RwLock<Vec<Connection>>>,
    backlog: BacklogGauges,
    reloads: ReloadMetrics,
    slots: BTreeMap<String, Slot>,
    ended_tx: mpsc::UnboundedSender<Ended>,
    ended_rx: mpsc::UnboundedReceiver<Ended>,
    failure: Option<DaemonError>,
    /// Whether start-up is over: `--fail-fast` applies to start-up only, and a sink a
    /// reload starts waits for a late destination either way.
    started: bool,
}

impl<'a> Fleet<'a> {
    /// A fleet with no sink yet; registers the families every sink shares, once.
    pub fn new(
        base: Base<'a>,
        config: Config,
        connections: Connections,
    ) -> Result<Fleet<'a>, DaemonError> {
        let backlog = BacklogGauges::register(base.metrics.registry())?;
        let reloads = ReloadMetrics::new(base.metrics);
        let (ended_tx, ended_rx) = mpsc::unbounded_channel();
        let watched = Arc::new(RwLock::new(connections.values().cloned().collect()));
        Ok(Fleet {
            base,
            config,
            connections,
            watched,
            backlog,
            reloads,
            slots: BTreeMap::new(),
            ended_tx,
            ended_rx,
            failure: None,
            started: false,
        })
    }

    /// Every NATS connection, those a reload opened included.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// The connections `/readyz` checks, shared with the endpoint.
    pub fn watched(&self) -> Arc<RwLock<Vec<Connection>>> {
        self.watched.clone()
    }

    /// Every NATS connection, once the fleet has stopped, for the final flush.
    pub fn into_connections(self) -> Connections {
        self.connections
    }

    /// Starts every sink of the config, all-or-nothing: the first failure is returned
    /// (a destination that may still come up is waited for instead, unless fail-fast),
    /// and no sink is spawned, so nothing is fetched, until every one is ready.
    pub async fn start_all(&mut self) -> Result<(), DaemonError> {
        let mut ready = Vec::new();
        for spec in start_order(&self.config.sinks) {
            ready.push(self.ready(spec).await?);
        }
        for r in ready {
            self.spawn(r);
        }
        self.started = true;
        Ok(())
    }

    /// [`Fleet::ready`], then [`Fleet::spawn`]: a sink a reload starts.
    async fn start(&mut self, spec: SinkSpec) -> Result<(), DaemonError> {
        let ready = self.ready(spec).await?;
        self.spawn(ready);
        Ok(())
    }

    /// Binds, checks and tries to open one sink.
    async fn ready(&mut self, spec: SinkSpec) -> Result<Ready, DaemonError> {
        let conn = self.connection(&spec).await?;
        let (stop, shutdown) = watch::channel(false);
        let stop = Arc::new(stop);
        forward_stop(&self.base.stop, &stop);
        let ctx = SinkCtx {
            js: jetstream_on(&conn.client, &self.config),
            conn,
            metrics: self.base.metrics.clone(),
            health: self.base.health.clone(),
            backlog: self.backlog.clone(),
            tracer: self.base.telemetry.map(|t| t.tracer(&spec.name)),
            shutdown,
            spec,
        };
        let prepared = assemble::prepare(&ctx).await?;
        let first = match assemble::open(&ctx.spec, &prepared).await {
            Ok(opened) => Ok(opened),
            Err(e) if late::may_pass(&e) && (self.started || !self.base.fail_fast) => Err(e),
            Err(e) => return Err(e),
        };
        Ok(Ready {
            ctx,
            prepared,
            first,
            stop,
        })
    }

    /// Spawns a ready sink's task (which waits for a late destination first).
    fn spawn(&mut self, ready: Ready) {
        let Ready {
            ctx,
            prepared,
            first,
            stop,
        } = ready;
        let name = ctx.spec.name.clone();
        let fingerprint = reload::fingerprint(&ctx.spec);
        let task = late::sink_task(ctx, prepared, first);
        let done = supervise::spawn(name.clone(), task, self.ended_tx.clone());
        let slot = Slot {
            fingerprint,
            stop,
            done,
        };
        self.slots.insert(name, slot);
    }

    /// The connection `spec` uses, opened now if a reload added its label.
    async fn connection(&mut self, spec: &SinkSpec) -> Result<Connection, DaemonError> {
        let label = spec.connection_label();
        if let Some(c) = self.connections.get(label) {
            return Ok(c.clone());
        }
        let c = crate::nats::connect(&self.config.nats, label, self.base.links, self.base.metrics)
            .await
            .map_err(DaemonError::Connect)?;
        tracing::info!(connection = %label, "connected to NATS for a sink the reload added");
        self.connections.insert(label.to_string(), c.clone());
        if let Ok(mut watched) = self.watched.write() {
            watched.push(c.clone());
        }
        Ok(c)
    }

    /// Runs until the daemon's stop turns true, applying each reload asked for; then stops
    /// every sink and answers the first panic, if any.
    pub async fn supervise(&mut self, mut reloads: Option<Reloads>) -> Option<DaemonError> {
        let mut stop = self.base.stop.subscribe();
        while !*stop.borrow_and_update() {
            tokio::select! {
                changed = stop.changed() => if changed.is_err() { break },
                Some(ended) = self.ended_rx.recv() => self.ended(ended),
                Some(path) = next_request(&mut reloads) => self.reload(&path).await,
            }
        }
        self.stop_all().await;
        self.failure.take()
    }

    /// A sink task ended: a panic stops the daemon.
    fn ended(&mut self, ended: Ended) {
        let Some(message) = ended.panic else {
            return;
        };
        let sink = ended.name;
        self.failure
            .get_or_insert(DaemonError::Panicked { sink, message });
        self.base.stop.send_replace(true);
    }

    /// Stops every sink at once and waits for each to settle.
    async fn stop_all(&mut self) {
        for slot in self.slots.values() {
            slot.stop.send_replace(true);
        }
        for (_, mut slot) in std::mem::take(&mut self.slots) {
            let _ = slot.done.wait_for(|d| *d).await;
        }
        while let Ok(ended) = self.ended_rx.try_recv() {
            self.ended(ended);
        }
    }

    /// Stops one sink as at SIGTERM (its batch committed or handed back), waits for it,
    /// and drops its health entry.
    async fn stop_one(&mut self, name: &str) {
        if let Some(mut slot) = self.slots.remove(name) {
            slot.stop.send_replace(true);
            let _ = slot.done.wait_for(|d| *d).await;
        }
        self.base.health.remove(name);
        self.backlog.forget(name);
    }

    /// Reads the config file again and applies it, or changes nothing if it is invalid or
    /// changes a setting only a restart applies.
    async fn reload(&mut self, path: &Path) {
        if *self.base.stop.borrow() {
            return;
        }
        tracing::info!(config = %path.display(), "reloading the config");
        let new = match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(config = %path.display(), error = %e, "reload refused: the config is invalid; every sink keeps running as it was");
                self.reloads.reloaded(false);
                return;
            }
        };
        let restart = reload::restart_only_changes(&self.config, &new);
        if !restart.is_empty() {
            tracing::error!(config = %path.display(), settings = %restart.join(", "), "reload refused: these settings change only with a restart; nothing changed");
            self.reloads.reloaded(false);
            return;
        }
        crate::logging::config_warnings(&new.warnings);
        let running = self
            .slots
            .iter()
            .map(|(n, s)| (n.clone(), s.fingerprint.clone()))
            .collect();
        let plan = plan::plan(&running, &reload::fingerprints(&new));
        if plan.is_empty() {
            tracing::info!(unchanged = ?plan.unchanged, "the reloaded config changes no sink");
        } else {
            tracing::info!(unchanged = ?plan.unchanged, added = ?plan.added, removed = ?plan.removed, changed = ?plan.changed, "applying the reloaded config");
        }
        self.base
            .grace
            .fetch_max(largest_grace(&new), Ordering::AcqRel);
        self.config = new;
        let ok = self.apply(&plan).await;
        self.reloads.reloaded(ok);
    }

    /// Stops the removed and changed sinks, then starts the added and changed ones; false
    /// when one of them could not start (it is named in `/readyz`, the others run).
    async fn apply(&mut self, plan: &plan::Plan) -> bool {
        for name in plan.removed.iter().chain(&plan.changed) {
            self.stop_one(name).await;
            tracing::info!(sink = %name, "sink stopped by the reload");
        }
        let wanted: BTreeSet<&str> = self.config.sinks.iter().map(|s| s.name.as_str()).collect();
        for name in self.base.health.names() {
            if !wanted.contains(name.as_str()) {
                self.base.health.remove(&name);
            }
        }
        let starting: BTreeSet<&String> = plan.added.iter().chain(&plan.changed).collect();
        let specs: Vec<SinkSpec> = start_order(&self.config.sinks)
            .into_iter()
            .filter(|s| starting.contains(&s.name))
            .collect();
        let mut ok = true;
        for spec in specs {
            if *self.base.stop.borrow() {
                tracing::info!(sink = %spec.name, "shutdown began during the reload; the sink is not started");
                continue;
            }
            let name = spec.name.clone();
            if let Err(e) = self.start(spec).await {
                ok = false;
                tracing::error!(sink = %name, error = %e, setting = e.setting().as_deref(), "the reload could not start this sink; the others run (reload again to retry it)");
                self.base
                    .health
                    .sink(&name)
                    .destination_failed(&format!("not started: {e}"));
            } else {
                tracing::info!(sink = %name, "sink started by the reload");
            }
        }
        ok
    }
}

/// The largest `delivery.shutdown_timeout_ms` of `config`'s sinks.
pub fn largest_grace(config: &Config) -> u64 {
    config
        .sinks
        .iter()
        .map(|s| s.delivery.shutdown_timeout_ms)
        .max()
        .unwrap_or(0)
}

/// The sinks in start order: those that create their stream first, so another sink may
/// read that stream without repeating `create_stream`.
fn start_order(sinks: &[SinkSpec]) -> Vec<SinkSpec> {
    let mut order: Vec<SinkSpec> = sinks.to_vec();
    order.sort_by_key(|s| s.source.create_stream.is_none());
    order
}

/// Turns the sink's own stop true when the daemon's does; ends when the sink is gone.
fn forward_stop(daemon: &Arc<watch::Sender<bool>>, sink: &Arc<watch::Sender<bool>>) {
    let mut daemon = daemon.subscribe();
    let sink = sink.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = daemon.wait_for(|s| *s) => {
                sink.send_replace(true);
            }
            () = sink.closed() => {}
        }
    });
}

/// The next reload request's config path; never, without reloads.
async fn next_request(reloads: &mut Option<Reloads>) -> Option<PathBuf> {
    match reloads {
        Some(r) => {
            r.requests.recv().await?;
            Some(r.path.clone())
        }
        None => std::future::pending().await,
    }
}
