//! Leaf: how `jetsink pause` and `jetsink resume` fail, and the exit code each failure
//! means.

use crate::exit;

/// Why a pause or resume did not happen (or not for every consumer of the sink).
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// A flag is wrong (exit 2).
    #[error("{flag}: {message}")]
    Usage {
        /// The flag, as typed (`--for`).
        flag: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// The config file cannot be used, or the sink is not in it (exit 78).
    #[error("{0}")]
    Config(String),
    /// The server has no consumer pause (before 2.11): nothing was changed (exit 78, as
    /// for every feature a server version lacks).
    #[error("sink {sink}: {command} needs nats-server 2.11 or later (JetStream consumer pause); the server is {version}: upgrade it, or stop `jetsink run` instead (SIGTERM settles what it holds)")]
    ServerTooOld {
        /// Sink name.
        sink: String,
        /// `jetsink pause` or `jetsink resume`.
        command: &'static str,
        /// The version the server reports.
        version: String,
    },
    /// NATS could not be reached, the stream or a consumer is missing, or the server
    /// refused the request (exit 69).
    #[error("{0}")]
    Nats(String),
}

impl PauseError {
    /// The process exit code of this failure (sysexits, see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            PauseError::Usage { .. } => exit::USAGE,
            PauseError::Config(_) | PauseError::ServerTooOld { .. } => exit::CONFIG,
            PauseError::Nats(_) => exit::UNAVAILABLE,
        }
    }
}
