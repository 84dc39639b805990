//! The pipeline pass: the real runner of `jetsink run` — its puller, stages, settler,
//! keeper and acknowledger — writing into the chosen destination through the `Sink`
//! contract, timed from its start until the last message is ACKed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use tokio::sync::watch;

use super::cpu::Watched;
use super::error::BenchError;
use super::feeder;
use super::options::{describe, Options};
use super::stats::Pass;
use super::{probe, verify};
use crate::config::{DeliveryConfig, DestinationConfig, SinkSpec, SourceConfig};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::{bind, Needs};
use crate::pipeline::{Binding, Observers, Runner};
use crate::sinks;

/// The pipeline consumer's MaxAckPending: 10,000, or more when the sink holds a buffer of
/// pulled batches (the shuffler's, or a destination's rollover) — the buffer and the batch
/// pulled ahead must fit, or the buffer could only ever be flushed by its timer, and the
/// pass would measure the timer instead of the pipeline.
pub fn max_ack_pending(delivery: &DeliveryConfig, destination: Option<&DestinationConfig>) -> i64 {
    let buffer = match (&delivery.shuffle, destination.and_then(|d| d.accumulate())) {
        (Some(cfg), _) => cfg.buffer,
        (None, Some(a)) => a.messages,
        (None, None) => 0,
    };
    let needed = buffer.saturating_add(delivery.batch_size);
    i64::try_from(needed).unwrap_or(i64::MAX).max(10_000)
}

/// The sink the pass runs: the bench's stream and consumer, the target's delivery,
/// metadata and encryption, and `destination` (a placeholder that is never opened when
/// the pass discards).
pub fn spec(
    opts: &Options,
    stream: &str,
    subject: &str,
    consumer: String,
    destination: DestinationConfig,
) -> SinkSpec {
    let delivery = opts.delivery();
    let max_ack_pending = max_ack_pending(&delivery, Some(&destination));
    let configured = match &opts.target {
        super::options::Target::Configured(s) => Some(s),
        _ => None,
    };
    SinkSpec {
        name: "bench".into(),
        source: SourceConfig {
            stream: stream.to_string(),
            subjects: vec![subject.to_string()],
            consumer,
            ack_wait_ms: Some(30_000),
            max_deliver: Some(-1),
            max_ack_pending,
            backoff_ms: Vec::new(),
            deliver_policy: Default::default(),
            create_stream: None,
            buckets: None,
            connection_group: None,
            pinned: None,
        },
        delivery,
        metadata: configured.and_then(|s| s.metadata.clone()),
        dead_letter: None,
        encryption: configured.and_then(|s| s.encryption.clone()),
        destination,
        results: None,
        job_defaults: Default::default(),
        subjects_path: "source.subjects".into(),
        lanes_path: "delivery.priority_lanes".into(),
        paths: Default::default(),
    }
}

/// The pass's destination (or the discarding one), timed, attached, told when the pass's
/// stream was created (what a directory holds from before does not count) and opened.
async fn open_timed(
    opts: &Options,
    spec: &SinkSpec,
    destination: Option<&DestinationConfig>,
    created: std::time::SystemTime,
    lags: &Arc<Mutex<Vec<f64>>>,
) -> Result<probe::Timed, BenchError> {
    let inner: Box<dyn sinks::Sink> = match destination {
        Some(d) => {
            let mut s = sinks::build(d);
            s.attach(&sinks::Feed {
                sink: spec.name.clone(),
                stream: spec.source.stream.clone(),
            });
            s.stream_created(created);
            s
        }
        None => Box::new(probe::Discard),
    };
    let mut sink = probe::Timed::new(inner, lags.clone());
    use crate::sinks::Sink as _;
    sink.open()
        .await
        .map_err(|e| BenchError::Destination(format!("opening {}: {e}", describe(&opts.target))))?;
    Ok(sink)
}

/// A destination that is never opened, for a spec whose pass discards.
fn placeholder() -> Result<DestinationConfig, BenchError> {
    crate::config::destination::parse(
        "bench.destination",
        serde_json::json!({"type": "file", "directory": "jetsink-bench-unused"}),
    )
    .map_err(|e| BenchError::Destination(e.to_string()))
}

/// Runs the pipeline over `subject` until every message is ACKed, then verifies.
pub async fn pass(
    opts: &Options,
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    run: usize,
    watched: &Watched,
    bar: &indicatif::ProgressBar,
) -> Result<(Pass, String), BenchError> {
    let (destination, scratch) = opts.destination(stream, run, "pipeline")?;
    let on = On {
        stream,
        subject,
        run,
    };
    let measured = drain(opts, js, on, watched, bar, destination.as_ref()).await;
    scratch.remove().await;
    measured
}

/// Where a pipeline pass reads: the run's stream, its subject, the run's number.
struct On<'a> {
    stream: &'a str,
    subject: &'a str,
    run: usize,
}

/// The pipeline pass of [`pass`], into `destination`.
async fn drain(
    opts: &Options,
    js: &jetstream::Context,
    on: On<'_>,
    watched: &Watched,
    bar: &indicatif::ProgressBar,
    destination: Option<&DestinationConfig>,
) -> Result<(Pass, String), BenchError> {
    let On {
        stream,
        subject,
        run,
    } = on;
    let spec = spec(
        opts,
        stream,
        subject,
        format!("pipeline-{run}"),
        match destination {
            Some(d) => d.clone(),
            None => placeholder()?,
        },
    );
    let bound = bind(js, &spec.name, &spec.source, &Needs::of(&spec, None))
        .await
        .map_err(|e| BenchError::Nats(e.to_string()))?;
    let lags = Arc::new(Mutex::new(Vec::with_capacity(opts.messages as usize)));
    let created = bound.stream.cached_info().created.into();
    let sink = open_timed(opts, &spec, destination, created, &lags).await?;
    // `delivery.batches_in_flight` 2: a second writer, as the daemon opens one.
    let second = match (destination, spec.delivery.batches_in_flight > 1) {
        (Some(_), true) => Some(Box::new(
            open_timed(opts, &spec, destination, created, &lags).await?,
        ) as Box<dyn sinks::Sink>),
        _ => None,
    };
    let metrics = Metrics::new();
    let sink_metrics = crate::pipeline::SinkMetrics::new(&metrics, "bench");
    let acked = sink_metrics.acked.clone();
    let health = Health::default();
    let (tx, rx) = watch::channel(false);
    let stages = crate::pipeline::Stages::for_sink(&spec);
    let runner = Runner::new(
        spec.clone(),
        Binding {
            js: js.clone(),
            consumers: vec![bound.consumer],
            // The bench's own connection: its drops are not tracked.
            drops: Default::default(),
        },
        Box::new(sink),
        stages,
        None,
        Observers {
            metrics: sink_metrics,
            health: health.sink("bench"),
        },
        rx,
    );
    let telemetry = match &opts.telemetry {
        Some(otlp) => Some(
            crate::telemetry::Telemetry::start(otlp, &metrics)
                .map_err(|e| BenchError::Destination(e.to_string()))?,
        ),
        None => None,
    };
    let runner = runner
        .with_tracer(telemetry.as_ref().map(|t| t.tracer("bench")))
        .with_second_writer(second);
    probe::reset_peak_rss();
    bar.set_position(0);
    let feeder = feeder::start(opts, js, subject);
    let cpu = watched.read();
    let started = Instant::now();
    let handle = tokio::spawn(runner.run());
    while acked.get() < opts.messages {
        if handle.is_finished() {
            return Err(BenchError::Lost(
                "the pipeline stopped before draining the stream".into(),
            ));
        }
        bar.set_position(acked.get());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let cpu = cpu.until(&watched.read(), acked.get());
    let peak = probe::peak_rss_kib();
    let _ = tx.send(true);
    let _ = handle.await;
    if let Some(t) = telemetry {
        t.finish().await;
    }
    if let Some(f) = feeder {
        f.finish().await;
    }
    let mut lags = lags.lock().map(|l| l.clone()).unwrap_or_default();
    let pass = Pass::new(
        "pipeline",
        acked.get(),
        acked.get() * opts.size as u64,
        elapsed.as_secs_f64(),
        &mut lags,
        peak,
    )
    .with_cpu(cpu);
    let check = verify::run(js, stream, &spec, destination, opts.messages).await?;
    Ok((pass, check))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_consumer_carries_a_shuffle_or_rollover_buffer_and_a_batch() {
        let delivery = DeliveryConfig {
            batch_size: 1_000,
            ..DeliveryConfig::default()
        };
        assert_eq!(max_ack_pending(&delivery, None), 10_000);
        let s3 = crate::config::destination::parse(
            "d",
            serde_json::json!({"type": "s3", "bucket": "b", "rollover": {"max_messages": 20000}}),
        )
        .expect("s3 config");
        assert_eq!(max_ack_pending(&delivery, Some(&s3)), 21_000);
        let shuffled = DeliveryConfig {
            shuffle: Some(crate::config::shuffle::ShuffleConfig {
                buffer: 30_000,
                flush_ms: 2_000,
            }),
            ..delivery
        };
        assert_eq!(max_ack_pending(&shuffled, None), 31_000);
    }
}
