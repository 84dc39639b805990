//! The two passes of `jetsink bench` and the report: a fresh stream per run, the ceiling
//! (a bare pull consumer that ACKs) and the pipeline (the real runner and destination),
//! alternated, then the verification that nothing was lost.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use serde::Serialize;
use time::OffsetDateTime;
use tokio::sync::watch;

use super::error::BenchError;
use super::stats::{median, Pass};
use super::{probe, verify};
use crate::cmd::publish::{publish, PublishPlan};
use crate::config::{DeliveryConfig, DestinationConfig, SinkSpec, SourceConfig};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::nats::{bind, fetch_batch, FetchLimits, Needs};
use crate::pipeline::{Binding, Observers, Runner};
use crate::sinks;
use crate::sinks::file::FileConfig;
use crate::sinks::sqlite::{SqliteConfig, SqliteSynchronous};

/// Where the pipeline pass writes.
#[derive(Debug, Clone)]
pub enum Target {
    /// Nothing is stored: the pipeline's own cost.
    Discard,
    /// A built-in destination in a fresh temporary directory per run.
    Builtin(Box<DestinationConfig>),
    /// A configured sink's destination and delivery settings (`--config`, `--sink`).
    Configured(Box<SinkSpec>),
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to connect.
    pub server: Server,
    /// Messages per pass.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Fetch and write batch size.
    pub batch_size: usize,
    /// Ceiling/pipeline pairs.
    pub runs: usize,
    /// Offered load in messages per second; `None` drains a prefilled backlog.
    pub rate: Option<u64>,
    /// Where the pipeline writes.
    pub target: Target,
    /// Draw a progress bar.
    pub progress: bool,
}

/// The NATS server a bench talks to.
#[derive(Debug, Clone)]
pub enum Server {
    /// `--server URL`, with no credentials.
    Url(String),
    /// The `nats` section of `--config` (servers, credentials, TLS), when `--server` is not
    /// given: the bench then measures against the server the sink really uses.
    Config(Box<crate::config::NatsConfig>),
}

impl Server {
    async fn connect(&self) -> Result<async_nats::Client, BenchError> {
        match self {
            Server::Url(url) => async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(5))
                .connect(url.as_str())
                .await
                .map_err(|e| BenchError::Nats(format!("cannot connect to NATS at {url}: {e}"))),
            Server::Config(cfg) => {
                let metrics = crate::metrics::Metrics::new();
                let links = crate::nats::Links::new(&metrics);
                // A one-shot command: the connection closes when it is done.
                links.closing();
                crate::nats::connect(cfg, "bench", &links, &metrics)
                    .await
                    .map(|c| c.client)
                    .map_err(|e| BenchError::Nats(e.to_string()))
            }
        }
    }
}

/// The whole result, printed as a table or as one JSON object.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// nats-server version.
    pub server_version: String,
    /// Messages per pass.
    pub messages: u64,
    /// Payload bytes.
    pub size: usize,
    /// Batch size.
    pub batch_size: usize,
    /// Destination description.
    pub destination: String,
    /// Offered load, when fixed.
    pub rate: Option<u64>,
    /// Prefill publish rate (messages per second), when prefilled.
    pub publish_rate: Option<f64>,
    /// Every pass in order: ceiling, pipeline, ceiling, pipeline, ...
    pub passes: Vec<Pass>,
    /// pipeline / ceiling per run.
    pub ratios: Vec<f64>,
    /// Median ceiling rate.
    pub median_ceiling: f64,
    /// Median pipeline rate.
    pub median_pipeline: f64,
    /// Median of the per-run ratios.
    pub median_ratio: f64,
    /// What the verification found.
    pub verified: String,
}

/// Runs the benchmark.
pub async fn run(opts: Options) -> Result<Report, BenchError> {
    let client = opts.server.connect().await?;
    let js = jetstream::new(client.clone());
    let id = format!(
        "{}_{}",
        std::process::id(),
        OffsetDateTime::now_utc().unix_timestamp_nanos() % 1_000_000_000_000
    );
    let stream_name = format!("JETSINK_BENCH_{id}");
    let prefix = format!("jetsink.bench.{id}");
    js.create_stream(jetstream::stream::Config {
        name: stream_name.clone(),
        subjects: vec![format!("{prefix}.>")],
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| BenchError::Nats(format!("creating stream {stream_name}: {e}")))?;
    let result = measure(&opts, &client, &js, &stream_name, &prefix).await;
    if let Err(e) = js.delete_stream(&stream_name).await {
        tracing::warn!(stream = %stream_name, error = %e, "could not delete the benchmark stream");
    }
    result
}

async fn measure(
    opts: &Options,
    client: &async_nats::Client,
    js: &jetstream::Context,
    stream: &str,
    prefix: &str,
) -> Result<Report, BenchError> {
    let server_version = client.server_info().version;
    let bar = progress_bar(opts);
    let mut publish_rate = None;
    if opts.rate.is_none() {
        bar.set_message("prefilling");
        let r = publish(js, &plan(format!("{prefix}.data"), opts, None))
            .await
            .map_err(|e| BenchError::Nats(e.to_string()))?;
        publish_rate = Some(r.rate());
    }
    let mut passes = Vec::new();
    let mut ratios = Vec::new();
    let mut verified = Vec::new();
    for run in 1..=opts.runs {
        let subject = match opts.rate {
            Some(_) => format!("{prefix}.run{run}.ceiling"),
            None => format!("{prefix}.data"),
        };
        bar.set_message(format!("run {run}/{}: ceiling", opts.runs));
        let ceiling = ceiling_pass(opts, js, stream, &subject, run, &bar).await?;
        let subject = match opts.rate {
            Some(_) => format!("{prefix}.run{run}.pipeline"),
            None => format!("{prefix}.data"),
        };
        bar.set_message(format!("run {run}/{}: pipeline", opts.runs));
        let (pipeline, check) = pipeline_pass(opts, js, stream, &subject, run, &bar).await?;
        ratios.push(pipeline.msgs_per_sec / ceiling.msgs_per_sec.max(1e-9));
        verified.push(check);
        passes.push(ceiling);
        passes.push(pipeline);
    }
    bar.finish_and_clear();
    let rate_of = |kind: &str| -> Vec<f64> {
        passes
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.msgs_per_sec)
            .collect()
    };
    Ok(Report {
        server_version,
        messages: opts.messages,
        size: opts.size,
        // The batch size the passes used: a configured sink's own, not the flag's default.
        batch_size: delivery_of(opts).batch_size,
        destination: describe(&opts.target),
        rate: opts.rate,
        publish_rate,
        median_ceiling: median(&rate_of("ceiling")),
        median_pipeline: median(&rate_of("pipeline")),
        median_ratio: median(&ratios),
        ratios,
        passes,
        verified: verified.join("; "),
    })
}

fn plan(subject: String, opts: &Options, rate: Option<u64>) -> PublishPlan {
    PublishPlan {
        subject,
        count: opts.messages,
        size: opts.size,
        rate,
        window: 256,
        buckets: None,
    }
}

fn progress_bar(opts: &Options) -> indicatif::ProgressBar {
    if !opts.progress {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(opts.messages);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg:22} [{bar:40}] {pos}/{len} ({per_sec}, {eta})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn describe(target: &Target) -> String {
    match target {
        Target::Discard => "none (discard)".into(),
        Target::Builtin(d) => match d.as_ref() {
            DestinationConfig::File(c) => {
                format!("file in a temporary directory (fsync={})", c.fsync)
            }
            DestinationConfig::Sqlite(c) => format!(
                "sqlite in a temporary directory (synchronous={})",
                c.synchronous.pragma()
            ),
            other => other.describe(),
        },
        Target::Configured(s) => format!("sink {}: {}", s.name, s.destination.describe()),
    }
}

/// Starts the offered load for one pass, when `--rate` is set.
fn feed(
    opts: &Options,
    js: &jetstream::Context,
    subject: &str,
) -> Option<tokio::task::JoinHandle<()>> {
    let rate = opts.rate?;
    let js = js.clone();
    let plan = plan(subject.to_string(), opts, Some(rate));
    Some(tokio::spawn(async move {
        if let Err(e) = publish(&js, &plan).await {
            tracing::error!(error = %e, "benchmark publisher failed");
        }
    }))
}

fn limits(d: &DeliveryConfig) -> FetchLimits {
    FetchLimits {
        max_messages: d.batch_size,
        max_bytes: d.max_batch_bytes,
        wait: Duration::from_millis(d.batch_timeout_ms),
    }
}

async fn ceiling_pass(
    opts: &Options,
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    run: usize,
    bar: &indicatif::ProgressBar,
) -> Result<Pass, BenchError> {
    let delivery = delivery_of(opts);
    let consumer = js
        .get_stream(stream)
        .await
        .map_err(|e| BenchError::Nats(e.to_string()))?
        .create_consumer(pull::Config {
            durable_name: Some(format!("ceiling-{run}")),
            filter_subject: subject.to_string(),
            ack_policy: AckPolicy::Explicit,
            max_ack_pending: 10_000,
            ..Default::default()
        })
        .await
        .map_err(|e| BenchError::Nats(format!("creating the ceiling consumer: {e}")))?;
    let lim = limits(&delivery);
    let mut lags = Vec::with_capacity(opts.messages as usize);
    let mut done = 0u64;
    let mut bytes = 0u64;
    probe::reset_peak_rss();
    bar.set_position(0);
    let feeder = feed(opts, js, subject);
    let started = Instant::now();
    while done < opts.messages {
        let batch = fetch_batch(js, &consumer, lim, &Default::default(), None)
            .await
            .map_err(|e| BenchError::Nats(format!("ceiling pull: {e}")))?;
        let now = OffsetDateTime::now_utc();
        // A bare consumer as the client hands it out: each message with its context.
        let batch: Vec<async_nats::jetstream::Message> = batch
            .into_iter()
            .map(|message| async_nats::jetstream::Message {
                message,
                context: js.clone(),
            })
            .collect();
        for m in &batch {
            if let Ok(info) = m.info() {
                lags.push((now - info.published).as_seconds_f64().max(0.0));
            }
            bytes += m.payload.len() as u64;
            m.ack()
                .await
                .map_err(|e| BenchError::Nats(format!("ceiling ack: {e}")))?;
        }
        js.client()
            .flush()
            .await
            .map_err(|e| BenchError::Nats(format!("ceiling flush: {e}")))?;
        done += batch.len() as u64;
        bar.set_position(done);
    }
    let elapsed = started.elapsed();
    if let Some(f) = feeder {
        let _ = f.await;
    }
    Ok(Pass::new(
        "ceiling",
        done,
        bytes,
        elapsed.as_secs_f64(),
        &mut lags,
        probe::peak_rss_kib(),
    ))
}

fn delivery_of(opts: &Options) -> DeliveryConfig {
    match &opts.target {
        Target::Configured(spec) => spec.delivery.clone(),
        _ => DeliveryConfig {
            batch_size: opts.batch_size,
            ..DeliveryConfig::default()
        },
    }
}

/// The destination of run `run`, and the directory to remove afterwards.
/// The pipeline consumer's MaxAckPending: 10,000, or more when the sink holds a buffer of
/// pulled batches (the shuffler's, or a destination's rollover) — the buffer and the batch
/// pulled ahead must fit, or the buffer could only ever be flushed by its timer, and the
/// pass would measure the timer instead of the pipeline.
fn pipeline_max_ack_pending(
    delivery: &DeliveryConfig,
    destination: Option<&DestinationConfig>,
) -> i64 {
    let buffer = match (&delivery.shuffle, destination.and_then(|d| d.accumulate())) {
        (Some(cfg), _) => cfg.buffer,
        (None, Some(a)) => a.messages,
        (None, None) => 0,
    };
    let needed = buffer.saturating_add(delivery.batch_size);
    i64::try_from(needed).unwrap_or(i64::MAX).max(10_000)
}

fn destination_of(
    opts: &Options,
    stream: &str,
    run: usize,
) -> (Option<DestinationConfig>, Option<PathBuf>) {
    match &opts.target {
        Target::Discard => (None, None),
        Target::Configured(spec) => (Some(spec.destination.clone()), None),
        Target::Builtin(d) => {
            let dir = std::env::temp_dir().join(format!("jetsink-bench-{stream}-{run}"));
            let d = match d.as_ref() {
                DestinationConfig::File(c) => DestinationConfig::File(FileConfig {
                    directory: dir.join("events").to_string_lossy().into_owned(),
                    ..c.clone()
                }),
                DestinationConfig::Sqlite(c) => DestinationConfig::Sqlite(SqliteConfig {
                    path: dir.join("bench.db").to_string_lossy().into_owned(),
                    ..c.clone()
                }),
                #[allow(unreachable_patterns)]
                other => other.clone(),
            };
            (Some(d), Some(dir))
        }
    }
}

async fn pipeline_pass(
    opts: &Options,
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
    run: usize,
    bar: &indicatif::ProgressBar,
) -> Result<(Pass, String), BenchError> {
    let (destination, scratch) = destination_of(opts, stream, run);
    let delivery = delivery_of(opts);
    let max_ack_pending = pipeline_max_ack_pending(&delivery, destination.as_ref());
    let spec = SinkSpec {
        name: "bench".into(),
        source: SourceConfig {
            stream: stream.to_string(),
            subjects: vec![subject.to_string()],
            consumer: format!("pipeline-{run}"),
            ack_wait_ms: 30_000,
            max_deliver: -1,
            max_ack_pending,
            backoff_ms: Vec::new(),
            deliver_policy: Default::default(),
            create_stream: None,
            buckets: None,
            connection_group: None,
            pinned: None,
        },
        delivery,
        metadata: match &opts.target {
            Target::Configured(s) => s.metadata.clone(),
            _ => None,
        },
        dead_letter: None,
        encryption: match &opts.target {
            Target::Configured(s) => s.encryption.clone(),
            _ => None,
        },
        destination: destination
            .clone()
            .unwrap_or(DestinationConfig::Sqlite(SqliteConfig {
                path: String::new(),
                table: "unused".into(),
                synchronous: SqliteSynchronous::Off,
                busy_timeout_ms: 0,
            })),
        results: None,
        subjects_path: "source.subjects".into(),
        lanes_path: "delivery.priority_lanes".into(),
    };
    let bound = bind(js, &spec.name, &spec.source, &Needs::of(&spec, None))
        .await
        .map_err(|e| BenchError::Nats(e.to_string()))?;
    let lags = Arc::new(Mutex::new(Vec::with_capacity(opts.messages as usize)));
    let inner: Box<dyn sinks::Sink> = match &destination {
        Some(d) => {
            let mut s = sinks::build(d);
            s.attach(&sinks::Feed {
                sink: spec.name.clone(),
                stream: spec.source.stream.clone(),
                job_id: None,
            });
            s
        }
        None => Box::new(probe::Discard),
    };
    let mut sink = probe::Timed::new(inner, lags.clone());
    use crate::sinks::Sink as _;
    sink.open()
        .await
        .map_err(|e| BenchError::Destination(format!("opening {}: {e}", describe(&opts.target))))?;
    let metrics = Metrics::new();
    let sink_metrics = metrics.sink("bench");
    let acked = sink_metrics.acked.clone();
    let write_seconds = sink_metrics.write_seconds.clone();
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
    probe::reset_peak_rss();
    bar.set_position(0);
    let feeder = feed(opts, js, subject);
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
    let peak = probe::peak_rss_kib();
    let _ = tx.send(true);
    let _ = handle.await;
    if let Some(f) = feeder {
        let _ = f.await;
    }
    let mut lags = lags.lock().map(|l| l.clone()).unwrap_or_default();
    let pass = Pass::new(
        "pipeline",
        acked.get(),
        acked.get() * opts.size as u64,
        elapsed.as_secs_f64(),
        &mut lags,
        peak,
    );
    tracing::info!(
        write_seconds = write_seconds.get_sample_sum(),
        writes = write_seconds.get_sample_count(),
        elapsed = elapsed.as_secs_f64(),
        "time spent in write_batch"
    );
    let check = verify::run(js, stream, &spec, destination.as_ref(), opts.messages).await;
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok((pass, check?))
}

impl Report {
    /// The human-readable table.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "jetsink bench: {} messages x {} B, batch {}, destination {}, nats-server {}\n",
            self.messages, self.size, self.batch_size, self.destination, self.server_version
        );
        match (self.publish_rate, self.rate) {
            (Some(r), _) => {
                out.push_str(&format!("prefill: {r:.0} msg/s (every PubAck awaited)\n"))
            }
            (None, Some(r)) => out.push_str(&format!("offered load: {r} msg/s during each pass\n")),
            _ => {}
        }
        out.push_str(
            "run  pass        msg/s     MiB/s   p50 ms   p99 ms   max ms  peak RSS MiB  ratio\n",
        );
        for (i, p) in self.passes.iter().enumerate() {
            let run = i / 2 + 1;
            let ratio = if p.kind == "pipeline" {
                format!("{:.3}", self.ratios.get(i / 2).copied().unwrap_or(0.0))
            } else {
                String::new()
            };
            out.push_str(&format!(
                "{run:<4} {:<9} {:>9.0} {:>9.2} {:>8.1} {:>8.1} {:>8.1} {:>13.1}  {ratio}\n",
                p.kind,
                p.msgs_per_sec,
                p.mib_per_sec,
                p.latency.p50_ms,
                p.latency.p99_ms,
                p.latency.max_ms,
                p.peak_rss_mib
            ));
        }
        out.push_str(&format!(
            "median: ceiling {:.0} msg/s, pipeline {:.0} msg/s, pipeline/ceiling {:.3}\nverified: {}\n",
            self.median_ceiling, self.median_pipeline, self.median_ratio, self.verified
        ));
        out
    }
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
        assert_eq!(pipeline_max_ack_pending(&delivery, None), 10_000);
        let s3: DestinationConfig = crate::config::destination::parse(
            "d",
            serde_json::json!({"type": "s3", "bucket": "b", "rollover": {"max_messages": 20000}}),
        )
        .expect("s3 config");
        assert_eq!(pipeline_max_ack_pending(&delivery, Some(&s3)), 21_000);
        let shuffled = DeliveryConfig {
            shuffle: Some(crate::config::shuffle::ShuffleConfig {
                buffer: 30_000,
                flush_ms: 2_000,
            }),
            ..delivery
        };
        assert_eq!(pipeline_max_ack_pending(&shuffled, None), 31_000);
    }
}
