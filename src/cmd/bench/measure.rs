//! The passes of `jetsink bench` and the report: a fresh stream per run, then per run the
//! ceiling (a bare pull consumer that ACKs), the destination alone (the same rows written
//! straight into it, no NATS), and the pipeline (the real runner and destination), each
//! with the CPU time it cost jetsink, nats-server and the database server; then the
//! verification that nothing was lost.
//!
//! A destination is handled only through the [`crate::sinks::Sink`] contract and its
//! settings: this file names no destination.

use async_nats::jetstream;
use serde::Serialize;
use time::OffsetDateTime;

use super::cpu::Watched;
use super::error::BenchError;
use super::options::{describe, plan, Options, Server, Target};
use super::stats::{median, Pass};
use super::{ceiling, direct, pipeline};
use crate::cmd::publish::publish;

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
    /// With `rate`: whether a separate `jetsink publish` process published it (its CPU is
    /// then not in jetsink's), or this one.
    pub publisher_separate: Option<bool>,
    /// The pipeline pass's linger (`delivery.linger_ms`, in effect).
    pub linger_ms: u64,
    /// Prefill publish rate (messages per second), when prefilled.
    pub publish_rate: Option<f64>,
    /// Every pass in order: ceiling, destination (when there is one), pipeline, ...
    pub passes: Vec<Pass>,
    /// pipeline / ceiling per run.
    pub ratios: Vec<f64>,
    /// pipeline / destination-only per run (empty when nothing is stored).
    pub ratios_to_destination: Vec<f64>,
    /// Median ceiling rate.
    pub median_ceiling: f64,
    /// Median destination-only rate, when there is a destination.
    pub median_destination: Option<f64>,
    /// Median pipeline rate.
    pub median_pipeline: f64,
    /// Median of the per-run pipeline / ceiling ratios.
    pub median_ratio: f64,
    /// Median of the per-run pipeline / destination-only ratios.
    pub median_ratio_to_destination: Option<f64>,
    /// Per run, the pipeline's rate over its CPU bound ([`super::cpu::CpuUse::bound`] on
    /// this machine's cores); empty when nats-server runs elsewhere.
    pub ratios_to_cpu_bound: Vec<f64>,
    /// The CPUs the bound counts.
    pub cores: usize,
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
    measure(&opts, &client, &js, &id).await
}

/// A fresh stream for one run: a destination that outlives the passes (a configured
/// table) then never receives a key an earlier run wrote, so every run writes new rows
/// instead of the later ones measuring redeliveries.
struct RunStream {
    name: String,
    prefix: String,
}

impl RunStream {
    async fn create(
        js: &jetstream::Context,
        id: &str,
        run: usize,
    ) -> Result<RunStream, BenchError> {
        let name = format!("JETSINK_BENCH_{id}_R{run}");
        let prefix = format!("jetsink.bench.{id}.r{run}");
        js.create_stream(jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{prefix}.>")],
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| BenchError::Nats(format!("creating stream {name}: {e}")))?;
        Ok(RunStream { name, prefix })
    }

    async fn delete(&self, js: &jetstream::Context) {
        if let Err(e) = js.delete_stream(&self.name).await {
            tracing::warn!(stream = %self.name, error = %e, "could not delete the benchmark stream");
        }
    }
}

/// The processes whose CPU time the passes report.
fn watched(opts: &Options, client: &async_nats::Client) -> Watched {
    let info = client.server_info();
    let host = client
        .connection_state()
        .eq(&async_nats::connection::State::Connected)
        .then(|| server_host(opts))
        .flatten()
        .unwrap_or_default();
    let database = match &opts.target {
        Target::Configured(spec) => spec.destination.server(),
        _ => None,
    };
    Watched::find(&host, info.port, database)
}

/// The host part of the server the bench connects to.
fn server_host(opts: &Options) -> Option<String> {
    let url = match &opts.server {
        Server::Url(u) => u.clone(),
        Server::Config(c) => c.servers.first()?.clone(),
    };
    let rest = url.split("://").nth(1).unwrap_or(&url);
    let host_port = rest.rsplit('@').next()?;
    let host = match host_port.rsplit_once(':') {
        Some((h, _)) => h,
        None => host_port,
    };
    Some(host.to_string())
}

async fn measure(
    opts: &Options,
    client: &async_nats::Client,
    js: &jetstream::Context,
    id: &str,
) -> Result<Report, BenchError> {
    let server_version = client.server_info().version;
    let watched = watched(opts, client);
    let bar = progress_bar(opts);
    let mut publish_rates = Vec::new();
    let mut passes = Vec::new();
    let (mut ratios, mut to_destination) = (Vec::new(), Vec::new());
    let mut verified = Vec::new();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut to_cpu_bound = Vec::new();
    for run in 1..=opts.runs {
        let stream = RunStream::create(js, id, run).await?;
        let measured = one_run(opts, js, &stream, run, &watched, &bar).await;
        stream.delete(js).await;
        let (rate, ceiling, alone, (pipeline, check)) = measured?;
        publish_rates.extend(rate);
        ratios.push(pipeline.msgs_per_sec / ceiling.msgs_per_sec.max(1e-9));
        to_cpu_bound.extend(pipeline.cpu.bound(cores).map(|b| pipeline.msgs_per_sec / b));
        verified.push(check);
        passes.push(ceiling);
        if let Some(alone) = alone {
            to_destination.push(pipeline.msgs_per_sec / alone.msgs_per_sec.max(1e-9));
            passes.push(alone);
        }
        passes.push(pipeline);
    }
    let publish_rate = (!publish_rates.is_empty()).then(|| median(&publish_rates));
    bar.finish_and_clear();
    let rate_of = |kind: &str| -> Vec<f64> {
        passes
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.msgs_per_sec)
            .collect()
    };
    let destination_rates = rate_of("destination");
    Ok(Report {
        server_version,
        messages: opts.messages,
        size: opts.size,
        // The batch size the passes used: a configured sink's own, not the flag's default.
        batch_size: opts.delivery().batch_size,
        destination: describe(&opts.target),
        rate: opts.rate,
        publisher_separate: opts.rate.map(|_| super::feeder::separate(opts)),
        linger_ms: linger_ms(opts),
        publish_rate,
        median_ceiling: median(&rate_of("ceiling")),
        median_destination: (!destination_rates.is_empty()).then(|| median(&destination_rates)),
        median_pipeline: median(&rate_of("pipeline")),
        median_ratio: median(&ratios),
        median_ratio_to_destination: (!to_destination.is_empty()).then(|| median(&to_destination)),
        ratios,
        ratios_to_destination: to_destination,
        passes,
        ratios_to_cpu_bound: to_cpu_bound,
        cores,
        verified: verified.join("; "),
    })
}

/// The linger the pipeline pass runs with: the flag's, the configured sink's, or the
/// default for what the sink does (it reads one consumer in the bench).
fn linger_ms(opts: &Options) -> u64 {
    let configured = match &opts.target {
        Target::Configured(spec) => spec.as_ref().clone(),
        // A built-in file or SQLite destination writes each batch: the plain default.
        _ => {
            return opts
                .delivery()
                .linger_ms
                .unwrap_or(crate::pipeline::linger::DEFAULT_LINGER_MS)
        }
    };
    let spec = crate::config::SinkSpec {
        delivery: opts.delivery(),
        ..configured
    };
    crate::pipeline::linger::for_sink(&spec, true).as_millis() as u64
}

/// What one run measured: the prefill rate (none with `--rate`), the ceiling, the
/// destination alone (none for `discard`), the pipeline and its verification.
type RunResult = (Option<f64>, Pass, Option<Pass>, (Pass, String));

/// The passes of one run on its own stream: prefill (unless `--rate`), ceiling,
/// destination alone, pipeline.
async fn one_run(
    opts: &Options,
    js: &jetstream::Context,
    stream: &RunStream,
    run: usize,
    watched: &Watched,
    bar: &indicatif::ProgressBar,
) -> Result<RunResult, BenchError> {
    let prefix = &stream.prefix;
    let mut rate = None;
    if opts.rate.is_none() {
        bar.set_message(format!("run {run}/{}: prefilling", opts.runs));
        let r = publish(js, &plan(format!("{prefix}.data"), opts, None))
            .await
            .map_err(|e| BenchError::Nats(e.to_string()))?;
        rate = Some(r.rate());
    }
    let subject = |pass: &str| match opts.rate {
        Some(_) => format!("{prefix}.{pass}"),
        None => format!("{prefix}.data"),
    };
    let name = &stream.name;
    bar.set_message(format!("run {run}/{}: ceiling", opts.runs));
    let ceiling = ceiling::pass(opts, js, name, &subject("ceiling"), run, watched, bar).await?;
    bar.set_message(format!("run {run}/{}: destination", opts.runs));
    let alone = direct::pass(opts, name, run, watched, bar).await?;
    bar.set_message(format!("run {run}/{}: pipeline", opts.runs));
    let pipeline = pipeline::pass(opts, js, name, &subject("pipeline"), run, watched, bar).await?;
    Ok((rate, ceiling, alone, pipeline))
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

impl Report {
    /// The human-readable table.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "jetsink bench: {} messages x {} B, batch {}, linger {} ms, destination {}, nats-server {}\n",
            self.messages, self.size, self.batch_size, self.linger_ms, self.destination, self.server_version
        );
        match (self.publish_rate, self.rate) {
            (Some(r), _) => {
                out.push_str(&format!("prefill: {r:.0} msg/s (every PubAck awaited)\n"))
            }
            (None, Some(r)) => {
                let by = match self.publisher_separate {
                    Some(true) => "published by a separate `jetsink publish` process, whose CPU is not in jetsink's",
                    _ => "published by this process, whose CPU is in jetsink's",
                };
                out.push_str(&format!("offered load: {r} msg/s during each pass, {by}\n"))
            }
            _ => {}
        }
        out.push_str(
            "run  pass          msg/s     MiB/s   p50 ms   p99 ms   max ms  peak RSS MiB  ratio   CPU s per 100k msgs: jetsink  nats-server  database\n",
        );
        let mut run = 0;
        let mut pipelines = 0;
        for p in &self.passes {
            if p.kind == "ceiling" {
                run += 1;
            }
            let ratio = if p.kind == "pipeline" {
                pipelines += 1;
                format!(
                    "{:.3}",
                    self.ratios.get(pipelines - 1).copied().unwrap_or(0.0)
                )
            } else {
                String::new()
            };
            let secs = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{s:.2}"));
            out.push_str(&format!(
                "{run:<4} {:<11} {:>9.0} {:>9.2} {:>8.1} {:>8.1} {:>8.1} {:>13.1}  {ratio:<6}  {:>28.2} {:>12} {:>9}\n",
                p.kind,
                p.msgs_per_sec,
                p.mib_per_sec,
                p.latency.p50_ms,
                p.latency.p99_ms,
                p.latency.max_ms,
                p.peak_rss_mib,
                p.cpu.jetsink,
                secs(p.cpu.nats_server),
                secs(p.cpu.database),
            ));
        }
        out.push_str(&format!(
            "median: ceiling {:.0} msg/s, pipeline {:.0} msg/s, pipeline/ceiling {:.3}\n",
            self.median_ceiling, self.median_pipeline, self.median_ratio
        ));
        if let (Some(d), Some(r)) = (self.median_destination, self.median_ratio_to_destination) {
            out.push_str(&format!(
                "destination alone (no NATS): {d:.0} msg/s; pipeline/destination {r:.3}\n"
            ));
        }
        if !self.ratios_to_cpu_bound.is_empty() {
            out.push_str(&format!(
                "pipeline / its CPU bound on {} cores (jetsink + nats-server + database CPU per message): {:.3}\n",
                self.cores,
                median(&self.ratios_to_cpu_bound)
            ));
        }
        out.push_str(&format!("verified: {}\n", self.verified));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_host_is_read_from_a_url_with_or_without_credentials_and_port() {
        let opts = |u: &str| Options {
            server: Server::Url(u.into()),
            messages: 1,
            size: 1,
            batch_size: 1,
            runs: 1,
            rate: None,
            linger_ms: None,
            target: Target::Discard,
            progress: false,
            traceparent: false,
            telemetry: None,
        };
        assert_eq!(
            server_host(&opts("nats://127.0.0.1:4222")).as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            server_host(&opts("nats://u:p@db.example:4222")).as_deref(),
            Some("db.example")
        );
        assert_eq!(
            server_host(&opts("localhost")).as_deref(),
            Some("localhost")
        );
    }
}
