//! Turns a `tokio-postgres` error into a [`SinkError`] class by its SQLSTATE.
//!
//! The class decides what happens to a batch: transient keeps and retries it, permanent
//! isolates and rejects the offending message. A wrong answer either loses messages (an
//! outage classified permanent) or blocks a stream (bad content classified transient), so
//! the mapping is a pure function of the SQLSTATE, tested as a table.
//!
//! The rule follows the SQLite destination: only errors about the *content* of a message
//! (data exceptions `22…`, integrity constraints `23…`, a trigger's `RAISE`, and the
//! program limits `54…` a value can exceed — an index row over the btree limit, a JSON
//! document nested too deep) are permanent. A limit that a whole batch exceeds but each
//! message does not (too many parameters) is cured by the split a permanent error causes,
//! so it dead-letters nothing. Schema and privilege errors (`42…`, `3D…`, `28…`) are
//! configuration errors at the first open and transient afterwards, when they mean someone
//! renamed a table or revoked a grant and will put it back. Known conditions of the server
//! or the connection (`08…`, `25…`, `40…`, `53…`, `55…`, `57…`, `58…`, `72…`, `F0…`, and
//! every client-side error) are transient and held without bound. Anything else is
//! unclassified: held like a transient error, but only for `delivery.retry.max_held_ms`.
//!
//! Messages never carry the server's text for content errors, because PostgreSQL quotes the
//! offending value there (`invalid input syntax for type integer: "..."`) and the row in
//! `DETAIL`; they name the SQLSTATE, constraint, column and table instead.

use crate::sinks::contract::SinkError;
use crate::sinks::database::util::{at, Phase};

/// What a SQLSTATE means for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The server or connection is unavailable or busy: retry.
    Transient,
    /// A message's content is refused: isolate it.
    Permanent,
    /// Not recognised: retried, but only for a bounded time.
    Unclassified,
    /// The table, its privileges, the database or the login are wrong: a configuration
    /// error at the first open, transient (held until fixed) afterwards.
    Schema,
}

/// The class of a SQLSTATE code.
pub fn class_of(code: &str) -> Class {
    let class = code.get(..2).unwrap_or("");
    match (class, code) {
        (_, "40001" | "40P01") => Class::Transient,
        // Integrity violation detected at commit (deferred constraints).
        (_, "40002") => Class::Permanent,
        // `ON CONFLICT DO UPDATE` touching one row twice; a view's WITH CHECK OPTION; a
        // trigger's RAISE EXCEPTION or ASSERT: all about the rows written.
        (_, "21000" | "44000" | "P0001" | "P0004") => Class::Permanent,
        ("22" | "23" | "54", _) => Class::Permanent,
        ("42" | "3D" | "3F" | "28" | "0A" | "0L" | "0P" | "2B", _) => Class::Schema,
        // Connection, transaction state (a read-only standby after a failover), rollback,
        // resources, lock not available, operator intervention and shutdowns, system I/O,
        // snapshot too old, configuration file.
        ("08" | "25" | "40" | "53" | "55" | "57" | "58" | "72" | "F0", _) => Class::Transient,
        _ => Class::Unclassified,
    }
}

/// A readable name for common SQLSTATEs, for messages.
pub fn condition_name(code: &str) -> &'static str {
    match code {
        "23505" => "unique_violation",
        "23503" => "foreign_key_violation",
        "23502" => "not_null_violation",
        "23514" => "check_violation",
        "23P01" => "exclusion_violation",
        "22001" => "string_data_right_truncation",
        "22003" => "numeric_value_out_of_range",
        "22007" => "invalid_datetime_format",
        "22008" => "datetime_field_overflow",
        "22021" => "character_not_in_repertoire",
        "22P02" => "invalid_text_representation",
        "22P05" => "untranslatable_character",
        "22023" => "invalid_parameter_value",
        "22032" => "invalid_json_text",
        "21000" => "cardinality_violation",
        "54000" => "program_limit_exceeded",
        "54001" => "statement_too_complex",
        "54011" => "too_many_columns",
        "54023" => "too_many_arguments",
        "40001" => "serialization_failure",
        "40P01" => "deadlock_detected",
        "57014" => "query_canceled",
        "57P01" => "admin_shutdown",
        "57P02" => "crash_shutdown",
        "57P03" => "cannot_connect_now",
        "53300" => "too_many_connections",
        "53100" => "disk_full",
        "42P01" => "undefined_table",
        "42703" => "undefined_column",
        "42501" => "insufficient_privilege",
        "42P10" => "invalid_column_reference",
        "3D000" => "invalid_catalog_name",
        "3F000" => "invalid_schema_name",
        "28P01" => "invalid_password",
        "28000" => "invalid_authorization_specification",
        "P0001" => "raise_exception",
        _ => match code.get(..2) {
            Some("22") => "data_exception",
            Some("23") => "integrity_constraint_violation",
            Some("08") => "connection_exception",
            Some("40") => "transaction_rollback",
            Some("53") => "insufficient_resources",
            Some("57") => "operator_intervention",
            Some("42") => "syntax_error_or_access_rule_violation",
            _ => "error",
        },
    }
}

/// Classifies `err`. `index` is the batch position of the message the failing statement
/// wrote alone, if it wrote exactly one.
pub fn classify(err: &tokio_postgres::Error, phase: Phase, index: Option<usize>) -> SinkError {
    let Some(db) = err.as_db_error() else {
        // Connection, TLS, protocol and timeout errors: the server is unavailable. Their
        // text comes from the client library and the operating system, never from data.
        let mut message = format!("postgres: {err}");
        if let Some(why) = crate::sinks::database::tls_files::handshake_failure(err) {
            message.push_str(&format!(": {why}"));
        } else if let Some(source) = std::error::Error::source(err) {
            message.push_str(&format!(": {source}"));
        }
        return SinkError::transient(message);
    };
    let code = db.code().code();
    let name = condition_name(code);
    match (class_of(code), phase) {
        (Class::Permanent, Phase::Write) => {
            let mut message = format!(
                "postgres refused the {}: SQLSTATE {code} ({name})",
                at(index)
            );
            for (what, v) in [
                ("constraint", db.constraint()),
                ("column", db.column()),
                ("table", db.table()),
            ] {
                if let Some(v) = v {
                    message.push_str(&format!(", {what} {v}"));
                }
            }
            SinkError::Permanent { index, message }
        }
        (Class::Schema, Phase::Open) => SinkError::Misconfigured {
            message: format!(
                "postgres SQLSTATE {code} ({name}): {}{}",
                db.message(),
                db.hint()
                    .map(|h| format!(" (hint: {h})"))
                    .unwrap_or_default()
            ),
        },
        (Class::Schema, Phase::Write) => SinkError::transient(format!(
            "postgres SQLSTATE {code} ({name}): {}; the table, its privileges or the login \
             changed after start-up; the batch is held until this is fixed",
            db.message()
        )),
        // Content errors cannot come from opening (no message is written there), and
        // nothing else is about content.
        (Class::Permanent, Phase::Open) => {
            SinkError::transient(format!("postgres SQLSTATE {code} ({name}) while opening"))
        }
        (Class::Transient, _) => SinkError::transient(format!(
            "postgres SQLSTATE {code} ({name}): {}",
            db.message()
        )),
        // An unknown condition may quote a value: the code alone is named.
        (Class::Unclassified, _) => SinkError::unclassified(format!(
            "postgres SQLSTATE {code} ({name}), a condition jetsink does not recognise"
        )),
    }
}
