//! `jetsink pause` and `jetsink resume`: stop a sink's pulls for maintenance (a database
//! upgrade, a restore) without stopping its daemons, and start them again.
//!
//! Both go through JetStream consumer pause (nats-server 2.11+, [`crate::nats::pause`]):
//! the server delivers nothing to a paused consumer until its deadline and then resumes
//! it by itself, so the pause holds for every instance on the consumer and survives a
//! restart of any of them. A running `jetsink run` sees it in the consumer info it reads
//! every 5 s, stops pulling, shows `jetsink_paused` 1 and a `paused` line in `/readyz`,
//! and pulls again when the pause ends. A sink with several consumers (random subject
//! buckets, per-lane consumers) has each of them paused or resumed.
//!
//! On an older server both refuse before changing anything (exit 78, naming the version).

mod deadline;
mod error;

use std::path::{Path, PathBuf};

use async_nats::jetstream::{self, stream::Stream};

pub use deadline::deadline;
pub use error::PauseError;

use crate::config::{Config, LogFormat, SinkSpec};
use crate::exit;
use crate::metrics::Metrics;
use crate::nats::pause::{self, describe_until};
use crate::nats::server_version::ServerVersion;
use crate::nats::Links;

/// `jetsink pause`'s flags.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("deadline").args(["until", "for_"])))]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// The sink to pause.
    #[arg(long)]
    sink: String,
    /// Pause until this RFC 3339 time (for example 2026-03-01T12:00:00Z).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Pause for this long from now: 90s, 10m, 2h, 1h30m (units ms, s, m, h, d).
    #[arg(long = "for", value_name = "DURATION")]
    for_: Option<String>,
}

/// `jetsink resume`'s flags.
#[derive(clap::Args)]
pub struct ResumeArgs {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// The sink to resume.
    #[arg(long)]
    sink: String,
}

/// The config and its named sink.
fn load(path: &Path, sink: &str) -> Result<(Config, SinkSpec), PauseError> {
    let cfg = Config::load(path).map_err(|e| PauseError::Config(e.to_string()))?;
    let Some(spec) = cfg.sinks.iter().find(|s| s.name == sink).cloned() else {
        let names: Vec<&str> = cfg.sinks.iter().map(|s| s.name.as_str()).collect();
        return Err(PauseError::Config(format!(
            "--sink: {}: no sink named {sink:?} (it has {})",
            path.display(),
            names.join(", ")
        )));
    };
    Ok((cfg, spec))
}

/// Connects with the config's NATS settings, refuses a server without consumer pause, and
/// finds the sink's stream.
async fn connect(
    cfg: &Config,
    spec: &SinkSpec,
    command: &'static str,
) -> Result<Stream, PauseError> {
    let metrics = Metrics::new();
    let links = Links::new(&metrics);
    let label = command.trim_start_matches("jetsink ");
    let conn = crate::nats::connect(&cfg.nats, label, &links, &metrics)
        .await
        .map_err(|e| match e {
            crate::nats::ConnectError::Credentials { .. } => PauseError::Config(e.to_string()),
            _ => PauseError::Nats(e.to_string()),
        })?;
    // A one-shot command: the connection closes when it is done.
    links.closing();
    let version = conn.client.server_info().version;
    if !ServerVersion::parse(&version).is_some_and(ServerVersion::has_consumer_pause) {
        return Err(PauseError::ServerTooOld {
            sink: spec.name.clone(),
            command,
            version,
        });
    }
    let js = jetstream::ContextBuilder::new()
        .timeout(std::time::Duration::from_millis(
            cfg.nats.request_timeout_ms,
        ))
        .build(conn.client.clone());
    js.get_stream(&spec.source.stream).await.map_err(|e| {
        PauseError::Nats(format!(
            "sink {}: looking up stream {}: {e}",
            spec.name, spec.source.stream
        ))
    })
}

/// The sink's consumers, each checked to exist (a pause of a consumer `jetsink run` has
/// not created yet would be refused by the server anyway, less clearly), with the pause
/// each has now.
async fn consumers(
    stream: &Stream,
    spec: &SinkSpec,
) -> Result<Vec<(String, Option<pause::Paused>)>, PauseError> {
    let mut out = Vec::new();
    for (source, _) in spec.consumer_bindings() {
        let info = stream.consumer_info(&source.consumer).await.map_err(|e| {
            PauseError::Nats(format!(
                "sink {}: reading consumer {} of stream {}: {e} (`jetsink run` creates it at its first start)",
                spec.name, source.consumer, spec.source.stream
            ))
        })?;
        out.push((source.consumer.clone(), pause::paused(&info)));
    }
    Ok(out)
}

/// The error of a request that failed after `done` consumers were changed already.
fn partly(e: pause::PauseError, sink: &str, done: &[String], undo: &str) -> PauseError {
    let so_far = match done {
        [] => String::new(),
        d => format!(" (done already for {}: {undo})", d.join(", ")),
    };
    PauseError::Nats(format!("sink {sink}: {e}{so_far}"))
}

/// Pauses every consumer of the sink until the deadline; one line per consumer.
async fn pause_sink(args: Args) -> Result<Vec<String>, PauseError> {
    let until = deadline(
        args.until.as_deref(),
        args.for_.as_deref(),
        time::OffsetDateTime::now_utc(),
    )?;
    let (cfg, spec) = load(&args.config, &args.sink)?;
    let stream = connect(&cfg, &spec, "jetsink pause").await?;
    let mut lines = Vec::new();
    let mut done = Vec::new();
    for (consumer, _) in consumers(&stream, &spec).await? {
        let now = pause::pause(&stream, &consumer, until)
            .await
            .map_err(|e| partly(e, &spec.name, &done, "run `jetsink resume` to undo"))?;
        let state = match now {
            Some(p) => format!("until {}", describe_until(p.until)),
            None => "not paused: the server's clock is already past that time".into(),
        };
        lines.push(format!(
            "paused sink {}: consumer {consumer} of stream {} {state}",
            spec.name, spec.source.stream
        ));
        done.push(consumer);
    }
    Ok(lines)
}

/// Resumes every consumer of the sink; one line per consumer.
async fn resume_sink(args: ResumeArgs) -> Result<Vec<String>, PauseError> {
    let (cfg, spec) = load(&args.config, &args.sink)?;
    let stream = connect(&cfg, &spec, "jetsink resume").await?;
    let mut lines = Vec::new();
    let mut done = Vec::new();
    for (consumer, was) in consumers(&stream, &spec).await? {
        pause::resume(&stream, &consumer)
            .await
            .map_err(|e| partly(e, &spec.name, &done, "run `jetsink resume` again"))?;
        let was = match was {
            Some(p) => format!("it was paused until {}", describe_until(p.until)),
            None => "it was not paused".into(),
        };
        lines.push(format!(
            "resumed sink {}: consumer {consumer} of stream {} ({was})",
            spec.name, spec.source.stream
        ));
        done.push(consumer);
    }
    Ok(lines)
}

/// Prints the lines, or the error; the exit code.
fn finish(result: Result<Vec<String>, PauseError>) -> u8 {
    match result {
        Ok(lines) => {
            super::emit(&lines.join("\n"));
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}

/// `jetsink pause`: pauses the sink's consumers in the server and says until when; exit 2
/// for a wrong flag, 78 for a config problem, an unknown `--sink` or a server older than
/// 2.11, 69 when NATS, the stream or a consumer is unavailable.
pub async fn execute(args: Args) -> u8 {
    crate::logging::init("warn", LogFormat::Text);
    finish(pause_sink(args).await)
}

/// `jetsink resume`: resumes the sink's consumers at once and says whether each was
/// paused; exit codes as for `jetsink pause`.
pub async fn execute_resume(args: ResumeArgs) -> u8 {
    crate::logging::init("warn", LogFormat::Text);
    finish(resume_sink(args).await)
}
