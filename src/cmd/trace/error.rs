//! Leaf: how `jetsink trace` fails, and the exit code each failure means.

use crate::exit;

/// Why `jetsink trace` printed no answer, or an answer that the message does not exist.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The config file cannot be used, or the sink is not in it (exit 78).
    #[error("{0}")]
    Config(String),
    /// `--msg-id` for a sink where nothing can map an id to a stream sequence: its
    /// destination stores no message id and it has no dead-letter stream (exit 78).
    #[error("sink {sink}: --msg-id needs a destination that stores message ids (sqlite, or a database table with a $message_id column) or a dead-letter stream: {why}; trace it by --seq instead")]
    Unsupported {
        /// Sink name.
        sink: String,
        /// What the destination said.
        why: String,
    },
    /// NATS, the stream or the destination could not be read (exit 69).
    #[error("{0}")]
    Unavailable(String),
    /// No message answers the question: the sequence is not in the stream (never
    /// written, or removed by limits, a purge or a delete), or no stored row and no
    /// dead-letter copy carries the `--msg-id` (exit 65, `EX_DATAERR`).
    #[error("{0}")]
    NotFound(String),
}

impl TraceError {
    /// The process exit code of this failure (sysexits, see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            TraceError::Config(_) | TraceError::Unsupported { .. } => exit::CONFIG,
            TraceError::Unavailable(_) => exit::UNAVAILABLE,
            TraceError::NotFound(_) => exit::DATAERR,
        }
    }
}
