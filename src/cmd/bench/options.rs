//! What a bench measures and where: the options the command's flags become, the target
//! destination, the server, and the small helpers every pass shares (the offered load, the
//! pull bounds, the publish plan). Every pass module imports this one; none imports
//! another pass.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;

use super::error::BenchError;
use crate::cmd::publish::{publish, PublishPlan};
use crate::config::{DeliveryConfig, DestinationConfig, SinkSpec};
use crate::nats::FetchLimits;

/// Where the pipeline pass writes.
#[derive(Debug, Clone)]
pub enum Target {
    /// Nothing is stored: the pipeline's own cost.
    Discard,
    /// A built-in destination, written in a fresh temporary directory per pass: its
    /// settings as a `destination` object, with `{dir}` standing for that directory, and
    /// what the report calls it.
    Builtin {
        /// The `destination` object.
        settings: serde_json::Value,
        /// For the report.
        describe: String,
    },
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
    /// Ceiling/destination/pipeline triples.
    pub runs: usize,
    /// Offered load in messages per second; `None` drains a prefilled backlog.
    pub rate: Option<u64>,
    /// Where the pipeline writes.
    pub target: Target,
    /// Draw a progress bar.
    pub progress: bool,
    /// Every published message carries a random `traceparent` (`--traceparent`).
    pub traceparent: bool,
    /// The configured file's `telemetry.otlp`: the pipeline pass traces its writes.
    pub telemetry: Option<crate::config::telemetry::OtlpConfig>,
}

impl Options {
    /// The delivery settings of both NATS passes: a configured sink's own, or the default
    /// ones with `--batch-size`.
    pub fn delivery(&self) -> DeliveryConfig {
        match &self.target {
            Target::Configured(spec) => spec.delivery.clone(),
            _ => DeliveryConfig {
                batch_size: self.batch_size,
                ..DeliveryConfig::default()
            },
        }
    }

    /// The destination of pass `tag` of run `run` (`None` to discard), and the scratch
    /// directory to remove after it.
    pub fn destination(
        &self,
        stream: &str,
        run: usize,
        tag: &str,
    ) -> Result<(Option<DestinationConfig>, Option<PathBuf>), BenchError> {
        match &self.target {
            Target::Discard => Ok((None, None)),
            Target::Configured(spec) => Ok((Some(spec.destination.clone()), None)),
            Target::Builtin { settings, .. } => {
                let dir = std::env::temp_dir().join(format!("jetsink-bench-{stream}-{run}-{tag}"));
                let d = crate::config::destination::parse(
                    "bench.destination",
                    with_dir(settings, &dir.to_string_lossy()),
                )
                .map_err(|e| BenchError::Destination(e.to_string()))?;
                Ok((Some(d), Some(dir)))
            }
        }
    }
}

/// `settings` with every `{dir}` in its strings replaced by `dir`.
fn with_dir(settings: &serde_json::Value, dir: &str) -> serde_json::Value {
    match settings {
        serde_json::Value::String(s) => serde_json::Value::String(s.replace("{dir}", dir)),
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| (k.clone(), with_dir(v, dir)))
            .collect::<serde_json::Map<_, _>>()
            .into(),
        other => other.clone(),
    }
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
    /// Connects to it.
    pub async fn connect(&self) -> Result<async_nats::Client, BenchError> {
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

/// The publish plan of a pass: `opts.messages` messages on `subject`, at `rate` or as fast
/// as PubAcks come.
pub fn plan(subject: String, opts: &Options, rate: Option<u64>) -> PublishPlan {
    PublishPlan {
        subject,
        count: opts.messages,
        size: opts.size,
        rate,
        window: 256,
        buckets: None,
        traceparent: opts.traceparent,
    }
}

/// What the report calls the destination.
pub fn describe(target: &Target) -> String {
    match target {
        Target::Discard => "none (discard)".into(),
        Target::Builtin { describe, .. } => describe.clone(),
        Target::Configured(s) => format!("sink {}: {}", s.name, s.destination.describe()),
    }
}

/// Starts the offered load for one pass, when `--rate` is set.
pub fn feed(
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

/// The pull bounds of `d`.
pub fn limits(d: &DeliveryConfig) -> FetchLimits {
    FetchLimits {
        max_messages: d.batch_size,
        max_bytes: d.max_batch_bytes,
        wait: Duration::from_millis(d.batch_timeout_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_builtin_destination_gets_its_directory_everywhere_it_is_named() {
        let s = serde_json::json!({"type": "sqlite", "path": "{dir}/bench.db", "n": 3});
        let got = with_dir(&s, "/tmp/x");
        assert_eq!(got["path"], "/tmp/x/bench.db");
        assert_eq!(got["type"], "sqlite");
        assert_eq!(got["n"], 3);
    }
}
