//! `jetsink bench`: measures the real pipeline against the bare-consumer ceiling of the
//! same server and machine, in one run, and checks that nothing was lost.
//!
//! Each run gets a fresh, uniquely named file-storage stream, prefilled (or, with `--rate`,
//! fed at a fixed offered load during each pass), so a table that outlives the runs
//! receives new keys in every run; a configured database destination writes each pass
//! into a scratch table (jetsink's layout, or a copy of the user's table) it drops after,
//! so every pass starts from an empty table and the configured one is never written;
//! files and SQLite go to a temporary directory the bench creates, S3 to a scratch
//! prefix, and a sink whose writes have side effects (exec, http, nats, job-queue) is
//! refused before anything runs ([`scratch`]).
//! The **ceiling** pass is a bare pull consumer that
//! fetches the same batch size and ACKs each message, flushing once per batch. The
//! **destination** pass writes the same rows straight into the destination, with no NATS
//! (its own limit on this machine). The **pipeline** pass runs
//! [`crate::pipeline::Runner`] with the chosen destination: the code path of `jetsink run`,
//! not a special fast path. Passes alternate `runs` times because the machine is noisy; the
//! report gives medians, each run's ratios and the CPU seconds per 100,000 messages spent by
//! jetsink, nats-server and the database server. Each run's stream is deleted after it,
//! whatever happened.
//!
//! This file is the command (its flags, the destination they describe, the printing of
//! the report); the measurement in `measure.rs` takes plain [`Options`], so it does not
//! depend on how they were typed.

mod ceiling;
pub mod cpu;
mod direct;
mod error;
mod feeder;
mod measure;
mod options;
mod pipeline;
pub mod probe;
mod scratch;
pub mod stats;
pub mod verify;

pub use error::BenchError;
pub use measure::{run, Report};
pub use options::{Options, Server, Target};

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::config::telemetry::OtlpConfig;
use crate::config::{Config, LogFormat, NatsConfig};
use crate::exit;

/// `jetsink bench`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// NATS server URL. Default: with --config, that file's `nats` section (servers,
    /// credentials, TLS); without it, nats://127.0.0.1:4222.
    #[arg(long)]
    server: Option<String>,
    /// Messages per pass.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 200)]
    size: usize,
    /// Destination of the pipeline pass.
    #[arg(long, value_enum, default_value_t = BenchDestination::File)]
    destination: BenchDestination,
    /// Batch size of both passes (with --config, the sink's own `delivery.batch_size`).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=10_000), conflicts_with = "config")]
    batch_size: u64,
    /// File destination: fdatasync each batch.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    fsync: bool,
    /// SQLite destination: synchronous pragma.
    #[arg(long, value_enum, default_value_t = BenchSync::Full)]
    synchronous: BenchSync,
    /// Use this config file's sink (its destination and delivery settings) instead.
    #[arg(long, requires = "sink")]
    config: Option<PathBuf>,
    /// The sink of --config to measure.
    #[arg(long, requires = "config")]
    sink: Option<String>,
    /// Ceiling/pipeline pairs; medians are reported.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    runs: u64,
    /// Offered load (msg/s) published during each pass instead of a prefilled backlog.
    #[arg(long)]
    rate: Option<u64>,
    /// The pipeline pass's delivery.linger_ms (default: the sink's, or jetsink's default).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    linger_ms: Option<u64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Give every published message a random W3C traceparent header, as traced producers
    /// do; with --config, that file's telemetry.otlp traces the pipeline pass.
    #[arg(long)]
    traceparent: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchDestination {
    /// Store nothing (the pipeline's own cost).
    None,
    /// JSON Lines files in a temporary directory.
    File,
    /// SQLite in a temporary directory.
    Sqlite,
}

// No doc comments on the variants: clap would print them as help for each value and
// change `jetsink bench --help`.
#[derive(Clone, Copy, clap::ValueEnum)]
enum BenchSync {
    Off,
    Normal,
    Full,
    Extra,
}

/// `jetsink bench`: measures and prints the report (a table, or one JSON object with
/// `--json`); an unusable `--config`/`--sink` is exit 78, NATS trouble exit 69.
pub async fn execute(args: Args) -> u8 {
    crate::logging::init("warn", LogFormat::Text);
    let (target, nats, telemetry) = match target(&args) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let server = match (args.server.clone(), nats) {
        (Some(url), _) => Server::Url(url),
        (None, Some(cfg)) => Server::Config(Box::new(cfg)),
        (None, None) => Server::Url("nats://127.0.0.1:4222".into()),
    };
    let opts = Options {
        server,
        messages: args.messages,
        size: args.size,
        batch_size: args.batch_size as usize,
        runs: args.runs as usize,
        rate: args.rate,
        linger_ms: args.linger_ms,
        target,
        progress: !args.json && std::io::stderr().is_terminal(),
        traceparent: args.traceparent,
        telemetry,
    };
    match run(opts).await {
        Ok(report) => {
            if args.json {
                match serde_json::to_string(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return exit::FAILURE;
                    }
                }
            } else {
                print!("{}", report.to_text());
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            match e {
                BenchError::Nats(_) => exit::UNAVAILABLE,
                BenchError::Refused(_) => exit::CONFIG,
                _ => exit::FAILURE,
            }
        }
    }
}

/// The destination the flags name — a configured sink, or a built-in one with the bench's
/// defaults — and, with `--config`, that file's `nats` section. A config that does not
/// load or lacks the sink is printed and exit 78.
type Configured = (Target, Option<NatsConfig>, Option<OtlpConfig>);

fn target(args: &Args) -> Result<Configured, u8> {
    if let (Some(path), Some(name)) = (&args.config, &args.sink) {
        let cfg = Config::load(path).map_err(|e| {
            eprintln!("error: {e}");
            exit::CONFIG
        })?;
        let nats = cfg.nats;
        let otlp = cfg.telemetry.otlp;
        return match cfg.sinks.into_iter().find(|s| &s.name == name) {
            Some(s) => match scratch::refusal(&s) {
                // Nothing connected, nothing run: exit 78, as replay refuses a sink.
                Some(why) => {
                    eprintln!("error: {}: {why}", path.display());
                    Err(exit::CONFIG)
                }
                None => Ok((Target::Configured(Box::new(s)), Some(nats), otlp)),
            },
            None => {
                eprintln!("error: {}: no sink named {name:?}", path.display());
                Err(exit::CONFIG)
            }
        };
    }
    let sync = match args.synchronous {
        BenchSync::Off => "off",
        BenchSync::Normal => "normal",
        BenchSync::Full => "full",
        BenchSync::Extra => "extra",
    };
    Ok((
        match args.destination {
            BenchDestination::None => Target::Discard,
            BenchDestination::File => Target::Builtin {
                settings: serde_json::json!({
                    "type": "file", "directory": "{dir}/events", "prefix": "events",
                    "fsync": args.fsync, "rotate_bytes": 128u64 * 1024 * 1024,
                }),
                describe: format!("file in a temporary directory (fsync={})", args.fsync),
            },
            BenchDestination::Sqlite => Target::Builtin {
                settings: serde_json::json!({
                    "type": "sqlite", "path": "{dir}/bench.db", "table": "jetsink_events",
                    "synchronous": sync, "busy_timeout_ms": 5000,
                }),
                describe: format!("sqlite in a temporary directory (synchronous={sync})"),
            },
        },
        None,
        None,
    ))
}
