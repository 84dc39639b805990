//! Why a benchmark failed, in a leaf of its own so the passes and the verification can
//! both name it without importing each other; the kind decides the exit code.

/// Why a benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The server could not be reached or refused an operation.
    #[error("{0}")]
    Nats(String),
    /// A destination could not be prepared.
    #[error("{0}")]
    Destination(String),
    /// The configured sink cannot be measured without side effects: why, and what to
    /// measure instead.
    #[error("{0}")]
    Refused(String),
    /// The run finished but lost or left messages.
    #[error("verification failed: {0}")]
    Lost(String),
}
