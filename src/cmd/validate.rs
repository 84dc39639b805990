//! `jetsink validate`: loads a config file offline (no server, no destination) and prints
//! what it would do, so a config can be checked before a deploy; a problem is exit 78
//! with the JSON path of every issue.

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
}

/// Prints `<file> is valid` and the summary, or the error; the exit code.
pub fn execute(args: Args) -> u8 {
    match Config::load(&args.config) {
        Ok(cfg) => {
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
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::CONFIG
        }
    }
}
