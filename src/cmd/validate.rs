//! `jetsink validate`: loads a config file offline (no server, no destination) and prints
//! what it would do, so a config can be checked before a deploy; a problem is exit 78
//! with the JSON path of every issue. With `--online` it then checks the config against
//! the live servers and destinations without changing anything ([`super::online`]).

use std::path::PathBuf;

use super::emit;
use crate::config::Config;
use crate::exit;

/// Message rates (msg/s) for the randomizer's expected-window estimate when `--rate` is
/// not given: a quiet, a busy and a heavy stream.
const DEFAULT_RATES: [f64; 3] = [100.0, 1_000.0, 10_000.0];

/// `jetsink validate`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: PathBuf,
    /// Message rate (msg/s) for the randomizer's expected-window estimate; repeatable.
    #[arg(long = "rate")]
    rates: Vec<f64>,
    /// Also connect to NATS and the destinations and check the streams, consumers,
    /// dead-letter streams and destinations, changing nothing (exit 69 unreachable or
    /// missing, 78 config and server disagree).
    #[arg(long)]
    online: bool,
    /// With --online, check only this sink.
    #[arg(long, requires = "online")]
    sink: Option<String>,
}

/// Prints `<file> is valid` and the summary, or the error, then with `--online` one line
/// per online check; the exit code.
pub async fn execute(args: Args) -> u8 {
    let cfg = match Config::load(&args.config) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::CONFIG;
        }
    };
    for w in &cfg.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(name) = &args.sink {
        if !cfg.sinks.iter().any(|s| &s.name == name) {
            let names: Vec<&str> = cfg.sinks.iter().map(|s| s.name.as_str()).collect();
            eprintln!(
                "error: --sink {name}: {} has no such sink (sinks: {})",
                args.config.display(),
                names.join(", ")
            );
            return exit::USAGE;
        }
    }
    let rates = if args.rates.is_empty() {
        DEFAULT_RATES.to_vec()
    } else {
        args.rates
    };
    emit(&format!(
        "{} is valid\n{}",
        args.config.display(),
        cfg.summary(&rates).trim_end()
    ));
    if !args.online {
        return exit::OK;
    }
    let report = super::online::check(&cfg, args.sink.as_deref()).await;
    for line in &report.0 {
        emit(&line.to_string());
    }
    emit(&report.totals());
    report.exit_code()
}
