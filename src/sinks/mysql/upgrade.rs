//! Bringing a jetsink-layout table from an earlier version up to date: the columns the
//! layout gained since ([`schema::ADDED_COLUMNS`]) are added with `ALTER TABLE`, as the
//! SQLite and PostgreSQL destinations do, so the table keeps being written after an
//! upgrade instead of being refused for a missing column.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::classify::classify;
use super::config::MysqlConfig;
use super::schema;
use crate::sinks::contract::SinkError;
use crate::sinks::database::columns::{lacking, TableColumn};
use crate::sinks::database::util::Phase;

/// MySQL's error for a column name a table already has.
const DUPLICATE_COLUMN: u16 = 1060;
/// MySQL's error for a command the user may not run on the table (here: ALTER).
const COMMAND_DENIED: u16 = 1142;

/// The added columns the table lacks, when the sink writes the jetsink layout (names
/// compared case-insensitively, as MySQL compares them).
pub(super) fn missing_added(config: &MysqlConfig, columns: &[TableColumn]) -> Vec<&'static str> {
    if config.columns.is_some() {
        return Vec::new();
    }
    let names: Vec<&'static str> = schema::ADDED_COLUMNS.iter().map(|(n, _)| *n).collect();
    lacking(&names, columns, true)
}

/// Adds `missing` (from [`missing_added`]) to `table_sql` (quoted). `false` when the user
/// may not alter the table: it keeps writing it without them, with a warning at open,
/// because they hold metadata and an upgrade must not stop a working deployment.
///
/// `ALTER TABLE` waits for the table's metadata lock, by default for a year; it is bounded
/// here by `lock_wait_s` (the statement timeout), so a long reader delays the start
/// instead of blocking every writer queued behind the waiting `ALTER`.
pub(super) async fn add_columns(
    conn: &mut Conn,
    table_sql: &str,
    missing: &[&str],
    lock_wait_s: u64,
    phase: Phase,
) -> Result<bool, SinkError> {
    let db = |e: mysql_async::Error| classify(&e, phase, None);
    conn.query_drop(format!("SET SESSION lock_wait_timeout = {lock_wait_s}"))
        .await
        .map_err(db)?;
    let result = alter(conn, table_sql, missing, phase).await;
    let reset = conn
        .query_drop("SET SESSION lock_wait_timeout = DEFAULT")
        .await
        .map_err(db);
    let added = result?;
    reset.map(|()| added)
}

async fn alter(
    conn: &mut Conn,
    table_sql: &str,
    missing: &[&str],
    phase: Phase,
) -> Result<bool, SinkError> {
    let added = schema::ADDED_COLUMNS
        .iter()
        .filter(|(n, _)| missing.contains(n));
    for (name, definition) in added {
        let sql = schema::add_column_sql(table_sql, name, definition);
        match conn.query_drop(sql).await {
            Ok(()) => {
                tracing::info!(table = %table_sql, column = *name, "adding message-metadata column to an existing table")
            }
            Err(mysql_async::Error::Server(e)) if e.code == DUPLICATE_COLUMN => {}
            Err(mysql_async::Error::Server(e)) if e.code == COMMAND_DENIED => {
                if phase == Phase::Open {
                    tracing::warn!(table = %table_sql, columns = %missing.join(", "), "this user may not add the new message-metadata columns to the table (no ALTER privilege): writing it without them");
                }
                return Ok(false);
            }
            Err(e) => return Err(classify(&e, phase, None)),
        }
    }
    Ok(true)
}
