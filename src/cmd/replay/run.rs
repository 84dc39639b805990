//! The replay itself: the sink's destination opened (refused while a running instance
//! holds one that takes a single writer), its own consumer created at the start of the
//! range, the runner of `jetsink run` driven over it until the server reports everything
//! up to the stop bound acknowledged, then the consumer deleted and the counts taken.

use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::error::ReplayError;
use super::range::Range;
use super::resolve::Session;
use super::summary::{already_present, Summary};
use crate::config::SinkSpec;
use crate::dlq::DeadLetters;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::replay_consumer::{self, replay_consumer_config};
use crate::pipeline::{Binding, Observers, Runner, SinkMetrics, Stages};
use crate::sinks::{self, Sink};

/// How often the replay reads its consumer's state (and moves the progress bar).
const POLL: Duration = Duration::from_millis(200);

/// Everything one replay needs: the sink as configured, the sink as the replay runs it,
/// and the filters of its consumer.
pub struct Job<'a> {
    /// The sink as configured (its durable consumer is only read, never changed).
    pub spec: &'a SinkSpec,
    /// The sink as the replay runs it ([`super::range::replay_spec`]).
    pub replay: SinkSpec,
    /// The replay consumer's filter subjects.
    pub filters: Vec<String>,
    /// The range.
    pub range: Range,
}

/// Builds the sink's destination, told its sink and stream, and when that stream was
/// created (the archive destinations count only what was stored since).
fn destination(spec: &SinkSpec, created: SystemTime) -> Box<dyn Sink> {
    let mut sink = sinks::build(&spec.destination);
    sink.attach(&sinks::Feed {
        sink: spec.name.clone(),
        stream: spec.source.stream.clone(),
    });
    sink.stream_created(created);
    sink
}

/// Opens the destination; a file directory another process holds locked is refused as
/// a race with a running instance, which a file destination cannot take (one writer per
/// directory and prefix), rather than reported as an outage.
async fn open(spec: &SinkSpec, created: SystemTime) -> Result<Box<dyn Sink>, ReplayError> {
    let mut sink = destination(spec, created);
    match sink.open().await {
        Ok(()) => Ok(sink),
        Err(e) if sinks::file::is_lock_busy(&e) => Err(ReplayError::Busy {
            sink: spec.name.clone(),
            destination: spec.destination.describe(),
            message: format!("{e}; a file destination takes one writer at a time, so stop that instance, replay, and start it again"),
        }),
        Err(source) => Err(ReplayError::Destination {
            sink: spec.name.clone(),
            destination: spec.destination.describe(),
            source,
        }),
    }
}

/// The distinct keys of the sink's stream the destination holds, through an instance of
/// its own; `None` when it cannot count them (or counting failed, which is logged).
async fn stored_keys(counter: &mut dyn Sink, spec: &SinkSpec) -> Option<u64> {
    match counter.stored_keys(&spec.source.stream).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(sink = %spec.name, error = %e, "cannot count the destination's stored keys");
            None
        }
    }
}

/// Where the sink's own durable consumers stand: (delivered, ack floor, ack pending) of
/// each, `None` for one that does not exist. Equal before and after with nothing pending
/// means no running instance wrote the sink during the replay.
async fn durable_marks(session: &Session, spec: &SinkSpec) -> Vec<Option<(u64, u64, usize)>> {
    let mut marks = Vec::new();
    for (source, _) in spec.consumer_bindings() {
        let info = session.stream.consumer_info(&source.consumer).await.ok();
        marks.push(info.map(|i| {
            (
                i.delivered.stream_sequence,
                i.ack_floor.stream_sequence,
                i.num_ack_pending,
            )
        }));
    }
    marks
}

/// The dead-letter publisher of the sink, its stream created when the config asks.
async fn dead_letters(
    spec: &SinkSpec,
    session: &Session,
    metrics: &SinkMetrics,
) -> Result<Option<DeadLetters>, ReplayError> {
    let Some(cfg) = spec.dead_letter.as_ref().filter(|c| c.enabled) else {
        return Ok(None);
    };
    let dl = DeadLetters::new(&spec.name, cfg.clone(), session.js.clone())
        .with_omitted_counter(metrics.dlq.payload_omitted.clone());
    dl.ensure_stream(spec.paths.key("dead_letter.create_stream"))
        .await
        .map_err(|e| ReplayError::Nats(e.to_string()))?;
    Ok(Some(dl))
}

/// Dead-letter copies stored so far, over every reason.
fn dead_lettered(metrics: &Metrics) -> u64 {
    metrics
        .registry()
        .gather()
        .iter()
        .filter(|f| f.name() == "jetsink_dlq_published_total")
        .flat_map(|f| f.get_metric().iter())
        .map(|m| m.get_counter().get_value() as u64)
        .sum()
}

/// Resolves when SIGINT or SIGTERM arrives.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// Replays the job's range into the destination; the summary of what happened.
pub async fn replay(
    job: &Job<'_>,
    mut session: Session,
    bar: &indicatif::ProgressBar,
) -> Result<Summary, ReplayError> {
    let spec = job.spec;
    let last = session.last_sequence().await?;
    let bound = session.bound(spec, &job.filters, &job.range, last).await?;
    let created = SystemTime::from(session.stream.cached_info().created);
    let sink = open(spec, created).await?;
    let mut counter = destination(spec, created);
    let before = stored_keys(counter.as_mut(), spec).await;
    let marks = durable_marks(&session, spec).await;
    let metrics = Metrics::new();
    let sink_metrics = SinkMetrics::new(&metrics, &spec.name);
    let dead_letters = dead_letters(spec, &session, &sink_metrics).await?;
    let name = job.replay.source.consumer.clone();
    let cfg = replay_consumer_config(&name, &job.replay.source, &job.filters, job.range.start);
    let consumer = replay_consumer::create(&session.stream, cfg)
        .await
        .map_err(|e| ReplayError::Nats(e.to_string()))?;
    let start = match replay_consumer::state(&session.stream, &name).await {
        Ok(s) => s,
        Err(e) => {
            let _ = replay_consumer::delete(&session.stream, &name).await;
            return Err(ReplayError::Nats(e.to_string()));
        }
    };
    let first = start.delivered + 1;
    bar.set_length(start.pending.min((bound + 1).saturating_sub(first)));
    let acked = sink_metrics.acked.clone();
    let fetched = sink_metrics.fetched.clone();
    let (tx, rx) = watch::channel(false);
    let runner = Runner::new(
        job.replay.clone(),
        Binding {
            js: session.js.clone(),
            consumers: vec![consumer],
            drops: session.conn.drops.clone(),
        },
        sink,
        Stages::for_sink(&job.replay).replaying_up_to(bound),
        dead_letters,
        Observers {
            metrics: sink_metrics,
            health: Health::default().sink(&spec.name),
        },
        rx,
    )
    .without_rebinding();
    let progress = || bar.set_position(acked.get() + dead_lettered(&metrics));
    let driven = drive(runner, tx, &session, &name, bound, progress).await;
    let _ = session.conn.client.flush().await;
    if let Err(e) = replay_consumer::delete(&session.stream, &name).await {
        tracing::warn!(error = %e, "could not delete the replay consumer; the server removes it after its inactive threshold");
    }
    driven?;
    bar.finish_and_clear();
    let after = stored_keys(counter.as_mut(), spec).await;
    let quiet = marks == durable_marks(&session, spec).await
        && marks.iter().flatten().all(|(_, _, pending)| *pending == 0);
    let written = acked.get();
    Ok(Summary {
        sink: spec.name.clone(),
        first,
        last: bound,
        read: fetched.get(),
        written,
        present: already_present(written, before, after, quiet),
        dead_lettered: dead_lettered(&metrics),
    })
}

/// Runs `runner` until the replay consumer reports everything up to `bound` settled, or
/// the runner ends, the consumer is gone, or the process is interrupted; then stops it
/// and waits for it to settle what it holds.
async fn drive(
    runner: Runner,
    stop: watch::Sender<bool>,
    session: &Session,
    name: &str,
    bound: u64,
    progress: impl Fn(),
) -> Result<(), ReplayError> {
    let mut handle = tokio::spawn(runner.run());
    let interrupt = interrupted();
    tokio::pin!(interrupt);
    let mut tick = tokio::time::interval(POLL);
    let mut ended = false;
    let outcome = loop {
        tokio::select! {
            _ = &mut handle => {
                ended = true;
                break Err(ReplayError::Stopped("the replay's pipeline stopped before its range was written".into()));
            }
            () = &mut interrupt => break Err(ReplayError::Stopped(
                "interrupted before the range was written; what was written stays (a replay is idempotent: run it again to finish)".into(),
            )),
            _ = tick.tick() => {
                progress();
                match replay_consumer::state(&session.stream, name).await {
                    Ok(s) if s.settled_up_to(bound) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(ReplayError::Stopped(format!(
                        "{e}; the replay consumer is gone (removed by someone, or idle past its inactive threshold), so the range was not finished: run the replay again"
                    ))),
                }
            }
        }
    };
    let _ = stop.send(true);
    if !ended {
        let _ = handle.await;
    }
    progress();
    outcome
}
