//! Turns a `mysql_async` error into a [`SinkError`] class by the server's error number.
//!
//! The same rule as the other destinations: only errors about a message's *content* — a
//! value out of range or of the wrong type, too long, NULL where it may not be, a CHECK or
//! foreign-key constraint, a row or key over the engine's size limits — are permanent.
//! Deadlocks (1213), lock wait timeouts (1205), lost connections, a read-only or full
//! server (the list in `known_transient`) are transient and held without bound. An error
//! number in none of these lists is unclassified: held like a transient error, but only
//! for `delivery.retry.max_held_ms`, so one message the server refuses for a reason
//! jetsink does not know cannot stall the sink forever.
//! Schema and privilege errors (unknown table or column, access denied) are configuration
//! errors at the first open and transient afterwards (someone renamed a table or revoked a
//! grant and will put it back).
//!
//! MySQL names the failing row of a multi-row `INSERT` for many data errors (`... at row
//! 3`); that number becomes the batch index, so the runner isolates the culprit without
//! bisecting. The server's text is only repeated for errors whose text holds no values:
//! others (`Incorrect integer value: '...'`, `Duplicate entry '...'`) quote the content.

use crate::sinks::contract::SinkError;
use crate::sinks::database::util::{at, Phase};

/// What an error number means for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The server or connection is unavailable or busy: retry.
    Transient,
    /// A message's content is refused: isolate it.
    Permanent,
    /// Not recognised: retried, but only for a bounded time.
    Unclassified,
    /// The table, its privileges, the database or the login are wrong: a configuration
    /// error at the first open, transient afterwards.
    Schema,
}

/// The class of a server error number.
pub fn class_of(code: u16) -> Class {
    match code {
        // Data and constraint errors (strict mode turns truncation into errors).
        1048 // column cannot be null
        | 1062 // duplicate entry for another unique key
        | 1263 // NULL supplied to NOT NULL column
        | 1264 // out of range
        | 1265 // data truncated
        | 1292 // incorrect datetime/truncated value
        | 1365 // division by 0
        | 1366 // incorrect value for column
        | 1367 // illegal value
        | 1406 // data too long
        | 1411 // incorrect value for function
        | 1416 // cannot get geometry object
        | 1451 | 1452 // foreign key
        | 1526 | 1748 // no partition for the value
        | 1586 // duplicate entry in partition
        | 1644 // SIGNAL from a trigger
        | 1690 // value out of range in expression
        | 3140 | 3156 // invalid JSON
        | 3819 // CHECK constraint (MySQL)
        | 4025 // CONSTRAINT failed (MariaDB CHECK, JSON validity)
        | 1153 // packet too large: this content is too big for the server
        | 1071 // specified key was too long (a key column value over the index limit)
        | 1118 // row size too large
        | 1169 // unique constraint (older engines)
        | 1216 | 1217 // foreign key (older servers)
        | 1300 // invalid character string for the column's character set
        | 1557 | 1761 | 1762 // duplicate key in a table a foreign key cascades to
        | 3141 | 3144 | 3146 | 3150 | 3151 | 3152 // JSON: bad text, charset, type, depth, null key
        => Class::Permanent,
        1044 // access denied to database
        | 1045 // access denied for user
        | 1049 // unknown database
        | 1054 // unknown column
        | 1064 // syntax error (an incompatible server)
        | 1109 // unknown table
        | 1136 // column count does not match
        | 1142 // command denied on table
        | 1143 // command denied on column
        | 1146 // table does not exist
        | 1227 // access denied, needs a privilege
        | 1288 | 1471 // target not updatable / insertable
        | 1356 // view references invalid objects
        | 1364 // field has no default value
        | 1036 // table is read only
        | 1130 // host not allowed to connect
        | 1251 // authentication protocol not supported
        | 1698 // access denied (socket authentication)
        => Class::Schema,
        c if known_transient(c) => Class::Transient,
        _ => Class::Unclassified,
    }
}

/// A readable name for common error numbers.
pub fn error_name(code: u16) -> &'static str {
    match code {
        1048 => "ER_BAD_NULL_ERROR",
        1062 => "ER_DUP_ENTRY",
        1264 => "ER_WARN_DATA_OUT_OF_RANGE",
        1265 => "WARN_DATA_TRUNCATED",
        1292 => "ER_TRUNCATED_WRONG_VALUE",
        1366 => "ER_TRUNCATED_WRONG_VALUE_FOR_FIELD",
        1406 => "ER_DATA_TOO_LONG",
        1451 => "ER_ROW_IS_REFERENCED_2",
        1452 => "ER_NO_REFERENCED_ROW_2",
        1644 => "ER_SIGNAL_EXCEPTION",
        3140 => "ER_INVALID_JSON_TEXT",
        3819 => "ER_CHECK_CONSTRAINT_VIOLATED",
        4025 => "ER_CONSTRAINT_FAILED",
        1153 => "ER_NET_PACKET_TOO_LARGE",
        1071 => "ER_TOO_LONG_KEY",
        1118 => "ER_TOO_BIG_ROWSIZE",
        1300 => "ER_INVALID_CHARACTER_STRING",
        1213 => "ER_LOCK_DEADLOCK",
        1205 => "ER_LOCK_WAIT_TIMEOUT",
        1146 => "ER_NO_SUCH_TABLE",
        1054 => "ER_BAD_FIELD_ERROR",
        1142 => "ER_TABLEACCESS_DENIED_ERROR",
        1045 => "ER_ACCESS_DENIED_ERROR",
        1044 => "ER_DBACCESS_DENIED_ERROR",
        1049 => "ER_BAD_DB_ERROR",
        1364 => "ER_NO_DEFAULT_FOR_FIELD",
        _ => "error",
    }
}

/// Whether the server's message for `code` holds no values, so it may be logged.
fn message_is_value_free(code: u16) -> bool {
    matches!(code, 1048 | 1263 | 1264 | 1406 | 1451 | 1452 | 3819 | 4025)
}

/// Whether `code` is a known condition of the server or connection (an outage, a lock, a
/// full or read-only server), held without bound; its message is about the server and may
/// be logged. Unknown errors are logged by number only.
fn known_transient(code: u16) -> bool {
    matches!(
        code,
        1021 | 1030 | 1037 | 1038 | 1040 | 1041 | 1053 | 1114 | 1158
            ..=1161
                | 1180
                | 1181
                | 1043 // bad handshake
                | 1047 // unknown command (a proxy between)
                | 1099 | 1100 | 1223 // tables locked (a backup holding a read lock)
                | 1135 // cannot create a thread
                | 1152 | 1184 // connection aborted
                | 1203 | 1226 // user resource limits
                | 1461 | 1637 // too many prepared statements / transactions
                | 2002 | 2003 | 2006 | 2013 // client: cannot connect, gone away, lost
                | 1205
                | 1213
                | 1290
                | 1317
                | 1615
                | 1792
                | 1836
                | 1927
                | 1969
                | 3024
                | 4031
    )
}

/// The 0-based row a data error names (`... at row 3` at the end of the message).
pub fn row_of(message: &str) -> Option<usize> {
    let (_, tail) = message.rsplit_once(" at row ")?;
    let n: usize = tail.trim_end().parse().ok()?;
    n.checked_sub(1)
}

/// Where a failing statement's rows sit in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    /// Batch index of the statement's first row.
    pub offset: usize,
    /// How many rows the statement wrote.
    pub len: usize,
}

/// Classifies `err`. `rows` places the failing statement in the batch, when a statement
/// failed (not for connect, begin or commit).
pub fn classify(err: &mysql_async::Error, phase: Phase, rows: Option<Rows>) -> SinkError {
    use mysql_async::{DriverError, Error};
    let server = match err {
        Error::Server(s) => s,
        Error::Driver(DriverError::PacketTooLarge) if phase == Phase::Write => {
            let index = single(rows);
            return SinkError::Permanent {
                index,
                message: format!(
                    "mysql cannot take the {}: it exceeds max_allowed_packet",
                    at(index)
                ),
            };
        }
        Error::Url(e) => {
            return SinkError::Misconfigured {
                message: format!("mysql url: {e}"),
            }
        }
        // I/O, TLS, a closed connection, protocol errors: the server is unavailable (a
        // certificate can be fixed on either side while the batch waits).
        other => {
            return SinkError::transient(
                match crate::sinks::database::tls_files::handshake_failure(other) {
                    Some(why) => format!("mysql: {why}"),
                    None => format!("mysql: {other}"),
                },
            )
        }
    };
    let code = server.code;
    let name = error_name(code);
    match (class_of(code), phase) {
        (Class::Permanent, Phase::Write) => {
            let index = rows.and_then(|r| match row_of(&server.message) {
                Some(i) if i < r.len => Some(r.offset + i),
                _ => single(Some(r)),
            });
            let detail = if message_is_value_free(code) {
                format!(": {}", server.message)
            } else {
                String::new()
            };
            SinkError::Permanent {
                index,
                message: format!(
                    "mysql refused the {}: error {code} ({name}, SQLSTATE {}){detail}",
                    at(index),
                    server.state
                ),
            }
        }
        (Class::Schema, Phase::Open) => SinkError::Misconfigured {
            message: format!("mysql error {code} ({name}): {}", server.message),
        },
        (Class::Schema, Phase::Write) => SinkError::transient(format!(
            "mysql error {code} ({name}): {}; the table, its privileges or the login changed \
             after start-up; the batch is held until this is fixed",
            server.message
        )),
        (Class::Permanent, Phase::Open) => {
            SinkError::transient(format!("mysql error {code} ({name}) while opening"))
        }
        (Class::Transient, _) => {
            SinkError::transient(format!("mysql error {code} ({name}): {}", server.message))
        }
        (Class::Unclassified, _) => SinkError::unclassified(format!(
            "mysql error {code} (SQLSTATE {}), a condition jetsink does not recognise",
            server.state
        )),
    }
}

fn single(rows: Option<Rows>) -> Option<usize> {
    rows.filter(|r| r.len == 1).map(|r| r.offset)
}
