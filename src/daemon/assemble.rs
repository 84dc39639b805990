//! One sink's assembly, in three steps: [`prepare`] binds its consumers, checks that each
//! live consumer can carry what the sink holds unacknowledged and creates its dead-letter
//! and results streams; [`open`] opens its destination (once; a caller that waits for a
//! late destination calls it again); [`run`] builds the [`Runner`], starts the tasks that
//! watch its consumers and runs until the sink's own stop signal.
//!
//! Everything a sink needs is owned by its [`SinkCtx`], so a sink can be started,
//! stopped and started again by a reload while the others run.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::DaemonError;
use crate::config::SinkSpec;
use crate::dlq::{advisory, DeadLetters, Reason};
use crate::health::{Health, SinkHealth};
use crate::jobs::ResultPublisher;
use crate::metrics::Metrics;
use crate::nats::backlog::{self, BacklogGauges};
use crate::nats::{bind, capacity::capacity, Bound, Connection, Needs};
use crate::pipeline::outstanding::Outstanding;
use crate::pipeline::pause::Pause;
use crate::pipeline::{Binding, Observers, Runner, SinkMetrics, Stages};
use crate::sinks::{self, Sink, SinkError};

/// How long a stopped sink's consumer watchers may take to end after its runner.
const WATCHERS_END: Duration = Duration::from_secs(4);

/// What one sink runs with, owned, so its task outlives the reload that started it.
pub struct SinkCtx {
    /// The sink's settings.
    pub spec: SinkSpec,
    /// Its NATS connection.
    pub conn: Connection,
    /// JetStream on that connection.
    pub js: async_nats::jetstream::Context,
    /// The registry.
    pub metrics: Metrics,
    /// Health, per sink.
    pub health: Health,
    /// The backlog gauges, registered once per process.
    pub backlog: BacklogGauges,
    /// Its tracer, with `telemetry.otlp`.
    pub tracer: Option<crate::telemetry::SinkTracer>,
    /// Turns true when this sink is to stop (shutdown, or a reload that removes or
    /// changes it).
    pub shutdown: watch::Receiver<bool>,
}

/// A bound sink whose destination is not open yet.
pub struct Prepared {
    bound: Vec<Bound>,
    created: SystemTime,
    health: SinkHealth,
    metrics: SinkMetrics,
    dead_letters: Option<DeadLetters>,
    results: Option<ResultPublisher>,
}

impl Prepared {
    /// The sink's health entry.
    pub fn health(&self) -> &SinkHealth {
        &self.health
    }
}

/// A sink's opened destination, and its second writer with `batches_in_flight` 2.
pub struct Opened {
    sink: Box<dyn Sink>,
    second: Option<Box<dyn Sink>>,
}

/// Binds the sink's consumers, checks them and creates its own streams.
pub async fn prepare(ctx: &SinkCtx) -> Result<Prepared, DaemonError> {
    let spec = &ctx.spec;
    let bound = bind_all(&ctx.js, spec).await?;
    check_capacity(spec, &bound)?;
    let health = ctx.health.sink(&spec.name);
    health.set_bound(true);
    let metrics = SinkMetrics::new(&ctx.metrics, &spec.name);
    let dead_letters = dead_letters(spec, &ctx.js, &metrics).await?;
    let results = results(spec, &ctx.js, &metrics).await?;
    Ok(Prepared {
        created: stream_created(&bound),
        bound,
        health,
        metrics,
        dead_letters,
        results,
    })
}

/// Opens the destination, and its second writer, once.
pub async fn open(spec: &SinkSpec, prepared: &Prepared) -> Result<Opened, DaemonError> {
    let sink = open_destination(spec, prepared.created).await?;
    let any_order = sink.commits_in_any_order();
    let second = second_writer(spec, any_order, prepared.created).await?;
    Ok(Opened { sink, second })
}

/// Runs the sink until its stop signal, then waits (bounded) for its consumer watchers.
pub async fn run(ctx: SinkCtx, prepared: Prepared, opened: Opened) {
    let spec = &ctx.spec;
    let Prepared {
        bound,
        health,
        metrics,
        dead_letters,
        results,
        ..
    } = prepared;
    health.destination_ok();
    tracing::info!(sink = %spec.name, destination = %spec.destination.describe(), "destination open");
    log_encryption(spec);
    let watch = Watch {
        conn: &ctx.conn,
        spec,
        metrics: &metrics,
        shutdown: &ctx.shutdown,
    };
    let mut background = watch.advisories(&bound, &dead_letters, &results);
    let runner = Runner::new(
        spec.clone(),
        Binding {
            js: ctx.js.clone(),
            consumers: bound.iter().map(|b| b.consumer.clone()).collect(),
            drops: ctx.conn.drops.clone(),
        },
        opened.sink,
        Stages::for_sink(spec),
        dead_letters,
        Observers {
            metrics: metrics.clone(),
            health,
        },
        ctx.shutdown.clone(),
    )
    .with_results(results)
    .with_tracer(ctx.tracer.clone())
    .with_second_writer(opened.second);
    background.push(watch.backlog(&bound, &ctx.backlog, runner.pause(), runner.outstanding()));
    runner.run().await;
    let ended = futures::future::join_all(background);
    if tokio::time::timeout(WATCHERS_END, ended).await.is_err() {
        tracing::warn!(sink = %spec.name, "consumer watchers still running {} s after the sink stopped; leaving them", WATCHERS_END.as_secs());
    }
}

/// Binds the sink's consumer, or one consumer per random subject bucket or lane.
async fn bind_all(
    js: &async_nats::jetstream::Context,
    spec: &SinkSpec,
) -> Result<Vec<Bound>, DaemonError> {
    let mut bound = Vec::new();
    for (source, lane) in spec.consumer_bindings() {
        let b = bind(js, &spec.name, &source, &Needs::of(spec, lane))
            .await
            .map_err(DaemonError::Bind)?;
        bound.push(b);
    }
    Ok(bound)
}

/// [`crate::nats::capacity`] on every bound consumer, as the server has it: a refusal
/// stops start-up (exit 78), what the operator let through is logged.
fn check_capacity(spec: &SinkSpec, bound: &[Bound]) -> Result<(), DaemonError> {
    for b in bound {
        let info = b.consumer.cached_info();
        let found = capacity(spec, &info.name, &info.config);
        for w in &found.warnings {
            tracing::warn!(sink = %spec.name, consumer = %info.name, "{w}");
        }
        if !found.refusals.is_empty() {
            return Err(DaemonError::Capacity {
                sink: spec.name.clone(),
                refusals: found.refusals,
            });
        }
    }
    Ok(())
}

/// When the sink's stream was created, as the server reported it at binding (every
/// consumer of a sink reads the same stream).
fn stream_created(bound: &[Bound]) -> SystemTime {
    bound.first().map_or(SystemTime::UNIX_EPOCH, |b| {
        b.stream.cached_info().created.into()
    })
}

/// Builds and opens the destination, whose source stream was created at `created`.
async fn open_destination(
    spec: &SinkSpec,
    created: SystemTime,
) -> Result<Box<dyn Sink>, DaemonError> {
    let mut sink = sinks::build(&spec.destination);
    sink.attach(&sinks::Feed {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
    });
    sink.stream_created(created);
    sink.open().await.map_err(|source| DaemonError::Open {
        sink: spec.name.clone(),
        destination: spec.destination.describe(),
        setting: spec.paths.destination.clone(),
        source,
    })?;
    Ok(sink)
}

/// With `delivery.batches_in_flight` 2: a second writer of the destination, opened, once
/// the first showed that batches may commit in either order (`any_order`).
async fn second_writer(
    spec: &SinkSpec,
    any_order: bool,
    created: SystemTime,
) -> Result<Option<Box<dyn Sink>>, DaemonError> {
    if spec.delivery.batches_in_flight < 2 {
        return Ok(None);
    }
    if !any_order {
        let setting = format!("{}.batches_in_flight", spec.paths.delivery);
        return Err(DaemonError::Open {
            sink: spec.name.clone(),
            destination: spec.destination.describe(),
            source: SinkError::Misconfigured {
                message: format!(
                    "{setting}: 2 needs a table keyed by the message (its key from \
                     $idempotency_key, or $stream and $stream_sequence) or an upsert with \
                     an order, so two batches committing in either order never overwrite \
                     a newer row; this table's key comes from elsewhere and the last write \
                     wins: keep 1"
                ),
            },
            setting,
        });
    }
    open_destination(spec, created).await.map(Some)
}

/// Says which keys encrypt the sink's payloads: ids and fingerprints only, key material
/// never reaches a log.
fn log_encryption(spec: &SinkSpec) {
    let Some(enc) = &spec.encryption else {
        return;
    };
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

async fn dead_letters(
    spec: &SinkSpec,
    js: &async_nats::jetstream::Context,
    metrics: &SinkMetrics,
) -> Result<Option<DeadLetters>, DaemonError> {
    let Some(cfg) = spec.dead_letter.as_ref().filter(|c| c.enabled) else {
        return Ok(None);
    };
    let dl = DeadLetters::new(&spec.name, cfg.clone(), js.clone())
        .with_omitted_counter(metrics.dlq.payload_omitted.clone());
    dl.ensure_stream(spec.paths.key("dead_letter.create_stream"))
        .await
        .map_err(|e| DaemonError::OwnStream(Box::new(e)))?;
    Ok(Some(dl))
}

async fn results(
    spec: &SinkSpec,
    js: &async_nats::jetstream::Context,
    metrics: &SinkMetrics,
) -> Result<Option<ResultPublisher>, DaemonError> {
    let Some(cfg) = &spec.results else {
        return Ok(None);
    };
    let r = ResultPublisher::new(
        &spec.name,
        cfg.clone(),
        js.clone(),
        &metrics.jobs,
        spec.delivery.idempotency_key,
    );
    r.ensure_stream(spec.paths.key("results.create_stream"))
        .await
        .map_err(|e| DaemonError::OwnStream(Box::new(e)))?;
    Ok(Some(r))
}

/// The tasks that watch one sink's consumers until shutdown.
struct Watch<'a> {
    conn: &'a Connection,
    spec: &'a SinkSpec,
    metrics: &'a SinkMetrics,
    shutdown: &'a watch::Receiver<bool>,
}

impl Watch<'_> {
    /// One listener per consumer for the server's max-deliveries and terminated
    /// advisories: the message behind each is dead-lettered (and its job answered).
    fn advisories(
        &self,
        bound: &[Bound],
        dead_letters: &Option<DeadLetters>,
        results: &Option<ResultPublisher>,
    ) -> Vec<JoinHandle<()>> {
        let dlq = &self.metrics.dlq;
        bound
            .iter()
            .map(|b| {
                tokio::spawn(advisory::listen(
                    self.conn.client.clone(),
                    b.stream.clone(),
                    b.consumer.cached_info().name.clone(),
                    dead_letters.clone(),
                    results.clone(),
                    advisory::Counters {
                        max_deliveries: dlq.max_deliveries.clone(),
                        terminated: dlq.terminated_advisories.clone(),
                        dlq_published: dlq.published(Reason::MaxDeliveries),
                        dlq_failures: dlq.failures.clone(),
                    },
                    self.shutdown.clone(),
                ))
            })
            .collect()
    }

    /// The backlog gauges of the sink's consumers, refreshed from consumer info, which
    /// also tells the sink's pause state whether they are paused and, with a server-fed
    /// randomizer, its outstanding count: seeded from the info read at binding, before the
    /// first pull, and then read every second instead of every five.
    fn backlog(
        &self,
        bound: &[Bound],
        gauges: &BacklogGauges,
        pause: Pause,
        outstanding: Option<Outstanding>,
    ) -> JoinHandle<()> {
        if let Some(o) = &outstanding {
            for b in bound {
                o.observe(b.consumer.cached_info());
            }
        }
        let every = match outstanding {
            Some(_) => backlog::SERVER_FED_REFRESH,
            None => backlog::REFRESH,
        };
        let watched = bound
            .iter()
            .map(|b| {
                let name = &b.consumer.cached_info().name;
                (b.consumer.clone(), gauges.consumer(&self.spec.name, name))
            })
            .collect();
        tokio::spawn(backlog::watch(
            self.spec.name.clone(),
            watched,
            every,
            self.shutdown.clone(),
            move |info| {
                pause.observe(info);
                if let Some(o) = &outstanding {
                    o.observe(info);
                }
            },
        ))
    }
}
