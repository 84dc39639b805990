//! `jetsink run`: loads the config, sets up logging and the shutdown signals, and hands
//! over to [`crate::daemon`].

use std::sync::Arc;

use tokio::sync::watch;

use crate::config::Config;

/// `jetsink run`'s flags.
#[derive(clap::Args)]
pub struct Args {
    /// The JSON config file.
    #[arg(long, short)]
    config: std::path::PathBuf,
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
    super::signals::stop_on(tx.clone());
    crate::daemon::serve(config, tx).await
}
