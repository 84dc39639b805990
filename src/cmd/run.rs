//! `jetsink run`: loads the config, sets up logging, the shutdown signals and the reload
//! triggers (SIGHUP, and with `--watch-config` a change of the file), and hands over to
//! [`crate::daemon`].

use std::sync::Arc;

use tokio::sync::{mpsc, watch};

use crate::config::Config;

/// `jetsink run`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: std::path::PathBuf,
    /// Reload the config when the file's content changes (read every 2 s; sees a
    /// Kubernetes ConfigMap update), as well as on SIGHUP.
    #[arg(long)]
    watch_config: bool,
    /// Exit 69 at start when a destination cannot be opened, instead of waiting for it
    /// while the other sinks run.
    #[arg(long)]
    fail_fast: bool,
}

/// `jetsink run`: the exit code.
pub async fn execute(args: Args) -> u8 {
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return crate::exit::CONFIG;
        }
    };
    crate::logging::init(&config.logging.level, config.logging.format);
    crate::logging::config_warnings(&config.warnings);
    let (tx, _) = watch::channel(false);
    let tx = Arc::new(tx);
    // One request waits while a reload runs; more are merged into it.
    let (reload_tx, requests) = mpsc::channel(1);
    if args.watch_config {
        super::signals::watch_file(args.config.clone(), reload_tx.clone());
    }
    super::signals::stop_on(tx.clone(), Some(reload_tx));
    let options = crate::daemon::Options {
        fail_fast: args.fail_fast,
        reloads: Some(crate::daemon::Reloads {
            path: args.config,
            requests,
        }),
    };
    crate::daemon::serve(config, tx, options).await
}
