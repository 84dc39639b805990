//! `jetsink replay`: writes a range of a sink's stream into its destination again,
//! through the sink's own pipeline (metadata, lanes, encryption, dead-letter rules), for
//! a destination that lost rows (a truncated table, a restored backup) or to check one.
//!
//! The replay reads through a consumer of its own (`<consumer>-replay-<pid>`), so the
//! sink's durable consumer does not move; every write is idempotent by key, so a replay
//! over rows that exist changes nothing. Nothing past the stop bound (`--to-seq`,
//! `--until`, or the stream's last sequence when the replay starts) is written; the run
//! ends when the server reports everything up to the bound acknowledged or dead-lettered.

mod error;
mod range;
mod resolve;
mod run;
mod summary;

use std::path::PathBuf;

pub use error::ReplayError;
pub use range::{parse_range, replay_filters, replay_spec, stop_bound, End, Range};
pub use summary::{already_present, Plan, Present, Summary};

use crate::config::{Config, LogFormat};
use crate::exit;
use crate::metrics::Metrics;
use crate::nats::replay_consumer::replay_consumer_name;

/// `jetsink replay`'s flags.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("start").required(true).args(["from_seq", "since"])))]
#[command(group(clap::ArgGroup::new("end").args(["to_seq", "until"])))]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// The sink whose stream to replay into its destination.
    #[arg(long)]
    sink: String,
    /// First stream sequence to replay.
    #[arg(long, value_name = "N")]
    from_seq: Option<u64>,
    /// Replay from the first message stored at or after this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Last stream sequence to replay (at most, and by default, the stream's last when the
    /// replay starts).
    #[arg(long, value_name = "M")]
    to_seq: Option<u64>,
    /// Replay only messages stored before this RFC 3339 time.
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Resolve the range and say what would be replayed; write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// The progress bar on stderr (drawn only on a terminal).
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("replay [{bar:40}] {pos}/{len} ({per_sec}, {eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// The config and the named sink in it.
fn load(path: &std::path::Path, sink: &str) -> Result<(Config, usize), ReplayError> {
    let cfg = Config::load(path).map_err(|e| ReplayError::Config(e.to_string()))?;
    let Some(i) = cfg.sinks.iter().position(|s| s.name == sink) else {
        let names: Vec<&str> = cfg.sinks.iter().map(|s| s.name.as_str()).collect();
        return Err(ReplayError::Config(format!(
            "--sink: {}: no sink named {sink:?} (it has {})",
            path.display(),
            names.join(", ")
        )));
    };
    Ok((cfg, i))
}

/// Runs the replay (or the dry run) the flags ask for; the line to print.
async fn replay(args: Args) -> Result<String, ReplayError> {
    let range = parse_range(
        args.from_seq,
        args.since.as_deref(),
        args.to_seq,
        args.until.as_deref(),
    )?;
    let (cfg, i) = load(&args.config, &args.sink)?;
    let spec = &cfg.sinks[i];
    let filters = replay_filters(spec);
    let name = replay_consumer_name(&spec.source.consumer, std::process::id(), "");
    let replay = replay_spec(spec, name, filters.clone())?;
    let metrics = Metrics::new();
    let mut session = resolve::connect(&cfg, spec, &metrics).await?;
    if args.dry_run {
        return Ok(session.plan(spec, &filters, &range).await?.to_string());
    }
    let job = run::Job {
        spec,
        replay,
        filters,
        range,
    };
    let bar = progress_bar();
    let summary = run::replay(&job, session, &bar).await;
    bar.finish_and_clear();
    Ok(summary?.to_string())
}

/// `jetsink replay`: prints the summary (or the dry run's plan); a wrong flag is exit 2,
/// a config problem (an unknown `--sink` too, as for the other commands) 78, NATS or the destination unavailable 69, a destination a running
/// instance holds 75, an interrupted replay 1.
pub async fn execute(args: Args) -> u8 {
    crate::logging::init("warn", LogFormat::Text);
    match replay(args).await {
        Ok(line) => {
            super::emit(&line);
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}
