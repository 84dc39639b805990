//! The configuration file: what an operator writes, and the checked model the daemon runs.
//!
//! Loading has three stages, so every mistake is reported with the JSON path that holds it:
//! 1. [`strict_json`] parses the text and refuses duplicate keys;
//! 2. serde deserializes the raw shape ([`raw`]) with unknown keys denied and the path of a
//!    wrong type tracked;
//! 3. [`validate`] checks ranges and cross-field rules, collecting *every* problem, and
//!    normalizes both accepted shapes (single-sink and multi-sink) into one [`Config`].

pub mod api;
pub mod buckets;
pub mod dead_letter;
pub mod destination;
pub mod encryption;
pub mod http;
pub mod lanes;
pub mod metadata;
mod metadata_headers;
pub mod metrics;
mod model;
#[cfg(test)]
mod mutation_tests;
mod owned_files;
mod path_collisions;
pub mod pinned;
pub mod randomizer;
pub mod raw;
pub mod results;
pub mod shuffle;
mod sink_checks;
mod source;
pub mod stream;
pub mod strict_json;
pub mod telemetry;
pub mod validate;

use std::path::{Path, PathBuf};

pub(crate) use crate::shared::issue::deserialize_at;
pub use crate::shared::issue::Issue;
pub use crate::shared::nats_security::{NatsAuth, NatsConfig, NatsTls, SecretSource};
pub use destination::DestinationConfig;
pub use model::{Config, SectionPaths, SinkSpec};
pub use pinned::PinnedConfig;
pub use raw::{
    CreateStreamConfig, DeliverPolicy, DeliveryConfig, HttpConfig, IdempotencyKey, Jitter,
    LogFormat, LoggingConfig, RawConfig, Retention, RetryConfig, SourceConfig, StorageKind,
};

/// Why a config could not be loaded. Every variant maps to exit code 78.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all: missing, unreadable, not a regular file, or
    /// larger than a config file may be ([`crate::files::Kind::Config`]).
    #[error("{}", read_error(.0))]
    Read(crate::files::FileError),
    /// The file was read but is wrong; all problems are listed.
    #[error("invalid config {}:\n{}", .path.display(), render_issues(.issues))]
    Invalid {
        /// The file named on the command line.
        path: PathBuf,
        /// Every problem found, in document order where possible.
        issues: Vec<Issue>,
    },
}

fn read_error(e: &crate::files::FileError) -> String {
    match e {
        crate::files::FileError::Io { path, source } => {
            format!("cannot read config file {}: {source}", path.display())
        }
        other => format!("config file {other}"),
    }
}

fn render_issues(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("  {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Reads, parses and validates a config file, then checks the paths it names on this
    /// host: a written path named by another setting, or that is a device, FIFO, socket or
    /// directory where a file is meant, is refused.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            crate::files::read_text(path, crate::files::Kind::Config).map_err(ConfigError::Read)?;
        let invalid = |issues| ConfigError::Invalid {
            path: path.to_path_buf(),
            issues,
        };
        let config = Config::from_json_str(&text).map_err(invalid)?;
        // Only a valid config's paths are looked at on disk: written ones must be named
        // once and be what jetsink writes (owned_files).
        let issues = owned_files::check(path, &config.paths);
        if !issues.is_empty() {
            return Err(invalid(issues));
        }
        Ok(config)
    }

    /// Parses and validates config text; the issues carry JSON paths.
    pub fn from_json_str(text: &str) -> Result<Config, Vec<Issue>> {
        let value = strict_json::parse(text).map_err(|message| {
            vec![Issue {
                path: String::new(),
                message: format!("not valid JSON: {message}"),
            }]
        })?;
        let raw: RawConfig = deserialize_at("", value).map_err(|i| vec![i])?;
        validate::validate(raw)
    }
}
