//! Leaf: how a replay fails, and the exit code each failure means.

use crate::exit;
use crate::sinks::SinkError;

/// Why `jetsink replay` stopped without replaying its range.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A flag is wrong, or wrong with another (exit 2).
    #[error("{flag}: {message}")]
    Usage {
        /// The flag, as typed (`--to-seq`).
        flag: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// The config file cannot be used, or the sink is not in it (exit 78).
    #[error("{0}")]
    Config(String),
    /// The sink is configured in a way this replay cannot re-drive (exit 78).
    #[error("sink {sink}: {message}")]
    Unsupported {
        /// Sink name.
        sink: String,
        /// What the replay cannot do, and what would.
        message: String,
    },
    /// NATS could not be reached, or a JetStream call failed (exit 69).
    #[error("{0}")]
    Nats(String),
    /// A running instance holds the destination, which takes one writer at a time: the
    /// replay would race it (exit 75, try again once it stopped).
    #[error(
        "sink {sink}: refusing to replay while a running jetsink writes {destination}: {message}"
    )]
    Busy {
        /// Sink name.
        sink: String,
        /// The destination, described.
        destination: String,
        /// Which lock is held, and by whom.
        message: String,
    },
    /// The destination could not be opened (exit 78 when misconfigured, else 69).
    #[error("sink {sink}: opening {destination}: {source}")]
    Destination {
        /// Sink name.
        sink: String,
        /// The destination, described.
        destination: String,
        /// The destination's error.
        source: SinkError,
    },
    /// The replay stopped before its range was settled: interrupted, or its consumer or
    /// pipeline went away (exit 1).
    #[error("{0}")]
    Stopped(String),
}

impl ReplayError {
    /// The process exit code of this failure (sysexits, see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Usage { .. } => exit::USAGE,
            ReplayError::Config(_) | ReplayError::Unsupported { .. } => exit::CONFIG,
            ReplayError::Nats(_) => exit::UNAVAILABLE,
            ReplayError::Busy { .. } => exit::TEMPFAIL,
            ReplayError::Destination { source, .. } => match source {
                SinkError::Misconfigured { .. } => exit::CONFIG,
                _ => exit::UNAVAILABLE,
            },
            ReplayError::Stopped(_) => exit::FAILURE,
        }
    }
}
