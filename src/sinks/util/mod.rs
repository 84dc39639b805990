//! Helpers shared by destinations: I/O error classification and the guard that notices
//! when a file a sink writes has been removed or replaced underneath it. The database
//! family's shared parts live in [`super::database`].

pub mod file_identity;

use super::SinkError;

/// Classifies a filesystem error. Everything the operating system reports for a local
/// file (permissions, read-only filesystem, disk full, missing directory) can be fixed
/// outside the process, so it is transient: the batch is kept and retried, never dropped.
pub fn io_error(context: &str, err: &std::io::Error) -> SinkError {
    SinkError::transient(format!("{context}: {err}"))
}
