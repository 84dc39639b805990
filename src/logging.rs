//! Log setup: text or JSON lines on stderr, level from the config unless `RUST_LOG` says
//! otherwise. Payloads and secrets are never logged anywhere in jetsink.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber; a second call is ignored.
pub fn init(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!("{level},async_nats=warn,axum=warn,hyper=warn"))
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Logs the warnings loading the config found (`Config::warnings`): they are found
/// before the subscriber exists, so they are kept and logged here, once it does.
pub fn config_warnings(warnings: &[crate::config::Issue]) {
    for w in warnings {
        tracing::warn!(config = %w.path, "{}", w.message);
    }
}
