//! What a bench measures and where: the options the command's flags become, the target
//! destination, the server, and the small helpers every pass shares (the pull bounds, the
//! publish plan; the offered load is `feeder.rs`). Every pass module imports this one;
//! none imports another pass.

use std::time::Duration;

use super::error::BenchError;
use super::scratch::{self, Place};
use crate::cmd::publish::PublishPlan;
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
    /// `delivery.linger_ms` of the pipeline pass (`--linger-ms`), over the default or the
    /// configured sink's.
    pub linger_ms: Option<u64>,
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
        let mut d = match &self.target {
            Target::Configured(spec) => spec.delivery.clone(),
            _ => DeliveryConfig {
                batch_size: self.batch_size,
                ..DeliveryConfig::default()
            },
        };
        d.linger_ms = self.linger_ms.or(d.linger_ms);
        d
    }

    /// The destination of pass `tag` of run `run` (`None` to discard), and the scratch
    /// directory, table or prefix it writes instead of the configured one.
    ///
    /// A configured database destination gets a scratch table per pass, named for the
    /// run's stream and the pass (jetsink's layout, or a copy of the user's own table):
    /// every pass then starts from an empty table, as the first run of a command does,
    /// instead of each writing into a table the earlier ones grew (whose index maintenance
    /// made MariaDB's CPU per message nearly triple over three commands), and the
    /// configured table never receives a bench row. Files and SQLite go to a directory
    /// the bench creates, S3 to a scratch prefix; a destination with side effects is
    /// refused ([`super::scratch`]).
    pub fn destination(
        &self,
        stream: &str,
        run: usize,
        tag: &str,
    ) -> Result<(Option<DestinationConfig>, Place), BenchError> {
        match &self.target {
            Target::Discard => Ok((None, Place::Nothing)),
            Target::Configured(spec) => {
                let table = scratch_table(stream, tag);
                let (d, place) = scratch::place(spec, stream, run, tag, &table)?;
                Ok((Some(d), place))
            }
            Target::Builtin { settings, .. } => {
                let dir = scratch::own_directory(stream, run, tag)?;
                let d = crate::config::destination::parse(
                    "bench.destination",
                    with_dir(settings, &dir.to_string_lossy()),
                );
                let d = match d {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = std::fs::remove_dir(&dir);
                        return Err(BenchError::Destination(e.to_string()));
                    }
                };
                Ok((Some(d), Place::Directory(dir)))
            }
        }
    }
}

/// The scratch table of pass `tag` on the run stream `stream` (`JETSINK_BENCH_<pid>_<ns>_R<run>`):
/// unique to the command and the pass, a plain SQL identifier of at most 51 characters,
/// within every engine's limit (PostgreSQL's 63).
fn scratch_table(stream: &str, tag: &str) -> String {
    format!("{}_{tag}", stream.to_lowercase())
}

impl Place {
    /// Removes it; a failure is a warning (the measurement stands), naming what is left.
    pub async fn remove(self) {
        match self {
            Place::Nothing => {}
            Place::Directory(dir) => {
                // Not there: the pass failed before its destination made it.
                match std::fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        tracing::warn!(directory = %dir.display(), error = %e, "could not remove the benchmark directory");
                    }
                    _ => {}
                }
            }
            Place::Table(d) => {
                if let Err(e) = crate::sinks::build(&d).drop_table().await {
                    tracing::warn!(table = %d.target(), error = %e, "could not drop the benchmark's scratch table");
                }
            }
            Place::Prefix(bucket, prefix) => {
                tracing::warn!(bucket = %bucket, prefix = %prefix, "the benchmark's objects are left under this scratch prefix; delete them with your S3 tools");
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
                .map_err(|e| {
                    BenchError::Nats(format!(
                        "cannot connect to NATS at {}: {e}",
                        crate::shared::server_url::redacted(url)
                    ))
                }),
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
        Target::Configured(s) => {
            // The configured table, directory or prefix is named, but the rows go beside it.
            let beside = match &s.destination {
                DestinationConfig::File(_) | DestinationConfig::Sqlite(_) => {
                    "; each pass writes into a temporary directory of its own, removed after"
                }
                DestinationConfig::S3(_) => {
                    "; each pass writes under the scratch prefix jetsink-bench/ of the configured one, left for you to delete"
                }
                d if d.with_scratch_table("jetsink_bench").is_some() => {
                    "; each pass writes a scratch table beside it, dropped after"
                }
                _ => "",
            };
            format!("sink {}: {}{beside}", s.name, s.destination.describe())
        }
    }
}

/// The pull bounds of `d`.
pub fn limits(d: &DeliveryConfig) -> FetchLimits {
    FetchLimits {
        max_messages: d.batch_size,
        max_bytes: d.max_batch_bytes,
        wait: Duration::from_millis(d.batch_timeout_ms),
        // The bare consumer takes what is ready, as it always did: the ceiling stays the
        // same figure whatever the pipeline's linger.
        linger: Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scratch_table_is_a_short_identifier_of_its_run_and_pass() {
        let stream = format!("JETSINK_BENCH_{}_{}_R100", 4_194_304, 999_999_999_999u64);
        let table = scratch_table(&stream, "destination");
        assert_eq!(table, "jetsink_bench_4194304_999999999999_r100_destination");
        assert!(crate::sinks::database::config::is_sql_identifier(&table));
        assert!(table.len() <= 63, "{} characters", table.len());
    }

    #[test]
    fn a_database_sink_writes_a_scratch_table_a_mapped_one_copied_from_the_users_and_a_file_sink_a_directory_of_its_own(
    ) {
        let spec = |destination: serde_json::Value| {
            let cfg = serde_json::json!({
                "nats": {"servers": ["nats://127.0.0.1:4222"]},
                "sinks": {"a": {
                    "source": {"stream": "S", "consumer": "c"},
                    "destination": destination
                }}
            });
            let mut c = crate::config::Config::from_json_str(&cfg.to_string()).expect("valid");
            let opts = Options {
                server: Server::Url("nats://127.0.0.1:4222".into()),
                messages: 1,
                size: 1,
                batch_size: 1,
                runs: 1,
                rate: None,
                linger_ms: None,
                target: Target::Configured(Box::new(c.sinks.remove(0))),
                progress: false,
                traceparent: false,
                telemetry: None,
            };
            opts.destination("JETSINK_BENCH_1_2_R1", 1, "pipeline")
                .expect("destination")
        };
        let (d, scratch) = spec(
            serde_json::json!({"type": "postgres", "url": "postgres://u@h/db", "table": "events"}),
        );
        assert!(d
            .expect("destination")
            .target()
            .contains("jetsink_bench_1_2_r1_pipeline"));
        assert!(matches!(scratch, Place::Table(_)));
        let (d, scratch) = spec(serde_json::json!({
            "type": "mysql", "url": "mysql://u@h/db", "table": "events",
            "columns": {"k": "$idempotency_key", "p": "/id"}
        }));
        assert!(d
            .expect("destination")
            .target()
            .ends_with("jetsink_bench_1_2_r1_pipeline"));
        match scratch {
            Place::Table(d) => match *d {
                DestinationConfig::Mysql(c) => assert_eq!(c.copy_of.as_deref(), Some("events")),
                other => panic!("not mysql: {other:?}"),
            },
            other => panic!("no scratch table: {other:?}"),
        }
        let (d, scratch) = spec(serde_json::json!({"type": "file", "directory": "out"}));
        let Place::Directory(dir) = scratch else {
            panic!("no directory of its own: {scratch:?}")
        };
        let target = d.expect("destination").target();
        assert!(target.contains(&*dir.to_string_lossy()), "{target}");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn a_builtin_destination_gets_its_directory_everywhere_it_is_named() {
        let s = serde_json::json!({"type": "sqlite", "path": "{dir}/bench.db", "n": 3});
        let got = with_dir(&s, "/tmp/x");
        assert_eq!(got["path"], "/tmp/x/bench.db");
        assert_eq!(got["type"], "sqlite");
        assert_eq!(got["n"], 3);
    }
}
