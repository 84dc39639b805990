//! Turns a `rusqlite` error into a [`SinkError`] class.
//!
//! The class decides what the runner does with a batch: a transient error keeps it and
//! retries, a permanent one isolates and rejects the offending message. Getting this wrong
//! either drops messages (a retryable condition classified permanent) or blocks a stream
//! forever (a bad message classified transient), so the mapping is a pure function, kept
//! apart from the I/O and tested table by table.
//!
//! The rule: only errors about the *content* of one message (a value SQLite will not store
//! or a constraint it breaks) are permanent. Locks, I/O, a full disk, a read-only or even a
//! corrupt file, permissions, and SQLite's generic `SQLITE_ERROR` (which is also how it
//! reports a table dropped or renamed underneath) are transient, because they can be fixed
//! outside the process and dropping the batch would lose data. What SQLite itself calls a
//! malfunction or misuse (`SQLITE_INTERNAL`, `SQLITE_MISUSE`, `SQLITE_RANGE`,
//! `SQLITE_NOTFOUND`) and rusqlite's own errors are unclassified: retried, but only for
//! `delivery.retry.max_held_ms`, since no amount of waiting is known to cure them.
//! Messages carry SQLite's own error text, which names constraints and columns but never
//! the bound values, so no payload reaches a log.

use rusqlite::ErrorCode;

use crate::sinks::contract::SinkError;

/// Classifies `err`. `index` is the position in the batch of the envelope whose insert
/// failed, or `None` when the error did not come from one envelope (begin, commit, open).
pub fn classify(err: &rusqlite::Error, index: Option<usize>) -> SinkError {
    let code = match err {
        rusqlite::Error::SqliteFailure(e, _) => e.code,
        // A value rusqlite cannot convert for SQLite (an integer above i64::MAX): the
        // message's content cannot be stored.
        rusqlite::Error::ToSqlConversionFailure(_) => {
            return permanent(index, "a value cannot be stored by SQLite", err)
        }
        _ => return SinkError::unclassified(format!("sqlite error: {err}")),
    };
    match code {
        ErrorCode::TooBig => permanent(index, "a value exceeds SQLite's size limit", err),
        ErrorCode::ConstraintViolation => permanent(index, "a table constraint refused it", err),
        ErrorCode::TypeMismatch => permanent(index, "a value has the wrong type", err),
        ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => SinkError::transient(format!(
            "sqlite database is busy (locked by another connection): {err}"
        )),
        ErrorCode::SystemIoFailure => SinkError::transient(format!("sqlite I/O error: {err}")),
        ErrorCode::CannotOpen => {
            SinkError::transient(format!("sqlite cannot open the database file: {err}"))
        }
        ErrorCode::ReadOnly => SinkError::transient(format!("sqlite database is read-only: {err}")),
        ErrorCode::DiskFull => SinkError::transient(format!("sqlite disk is full: {err}")),
        ErrorCode::FileLockingProtocolFailed => {
            SinkError::transient(format!("sqlite file locking protocol error: {err}"))
        }
        ErrorCode::OutOfMemory => SinkError::transient(format!("sqlite is out of memory: {err}")),
        ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => SinkError::transient(format!(
            "sqlite database file is corrupt or not a database; nothing is dropped, \
             repair or restore it: {err}"
        )),
        ErrorCode::InternalMalfunction
        | ErrorCode::ApiMisuse
        | ErrorCode::ParameterOutOfRange
        | ErrorCode::NotFound => SinkError::unclassified(format!("sqlite error: {err}")),
        _ => SinkError::transient(format!("sqlite error: {err}")),
    }
}

fn permanent(index: Option<usize>, what: &str, err: &rusqlite::Error) -> SinkError {
    let at = match index {
        Some(i) => format!("message at batch index {i}"),
        None => "batch".to_string(),
    };
    SinkError::Permanent {
        index,
        message: format!("sqlite refused the {at}: {what}: {err}"),
    }
}
