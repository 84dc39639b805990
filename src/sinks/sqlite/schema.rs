//! The destination table: its DDL, the insert statement, and the check that an existing
//! table can hold what jetsink writes.
//!
//! jetsink creates the table when it is missing, but an operator may have created it first
//! (with extra columns, indexes, triggers). Whatever is there must still accept every
//! insert, or each message would fail one by one at run time and be rejected as if its
//! content were bad. So the check runs at open and reports a wrong table as
//! [`SinkError::Misconfigured`] (exit 78 at start-up) instead.

use rusqlite::{Connection, ErrorCode};

use super::classify::classify;
use crate::sinks::contract::SinkError;

/// The columns jetsink writes, in the order of the insert's parameters.
pub(crate) const COLUMNS: [&str; 16] = [
    "idempotency_key",
    "stream",
    "stream_sequence",
    "consumer_sequence",
    "subject",
    "delivered",
    "published_at",
    "written_at",
    "message_id",
    "headers",
    "priority",
    "lane",
    "classification",
    "labels",
    "trace_id",
    "payload",
];

/// Message-metadata columns added after the first release, with the definition that
/// `ALTER TABLE ... ADD COLUMN` gives a table that lacks them. `trace_id` is the trace id of
/// a valid W3C `traceparent` header (NULL otherwise), so a row leads back to its trace.
pub(crate) const ADDED_COLUMNS: [(&str, &str); 5] = [
    ("priority", "TEXT"),
    ("lane", "TEXT"),
    ("classification", "TEXT"),
    ("labels", "TEXT NOT NULL DEFAULT '[]'"),
    ("trace_id", "TEXT"),
];

/// Quotes `name` as an SQL identifier (`"name"`, inner quotes doubled).
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `CREATE TABLE IF NOT EXISTS` for `table`.
pub(crate) fn create_table_sql(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
         \x20   idempotency_key TEXT PRIMARY KEY NOT NULL,\n\
         \x20   stream TEXT NOT NULL,\n\
         \x20   stream_sequence INTEGER NOT NULL,\n\
         \x20   consumer_sequence INTEGER NOT NULL,\n\
         \x20   subject TEXT NOT NULL,\n\
         \x20   delivered INTEGER NOT NULL,\n\
         \x20   published_at TEXT NOT NULL,\n\
         \x20   written_at TEXT NOT NULL,\n\
         \x20   message_id TEXT,\n\
         \x20   headers TEXT NOT NULL,\n\
         \x20   priority TEXT,\n\
         \x20   lane TEXT,\n\
         \x20   classification TEXT,\n\
         \x20   labels TEXT NOT NULL DEFAULT '[]',\n\
         \x20   trace_id TEXT,\n\
         \x20   payload BLOB NOT NULL\n\
         )",
        quote_ident(table)
    )
}

/// The idempotent insert of one envelope: a key already present leaves its row untouched.
pub(crate) fn insert_sql(table: &str) -> String {
    insert_rows_sql(table, 1, false)
}

/// The columns whose value is often the same for every row of a statement: the stream, the
/// commit time (always), and the lane (lanes off, or one lane per pulled batch as per-lane
/// consumers deliver). With `shared`, every row takes them from the first row's parameters,
/// which are then bound once per statement instead of once per row.
pub(crate) const SHARED_COLUMNS: [&str; 3] = ["stream", "written_at", "lane"];

/// The idempotent insert of `rows` envelopes in one statement; parameters are numbered
/// row after row (`?1`..`?16` for the first row, `?17`.. for the second). With `shared`,
/// the [`SHARED_COLUMNS`] of every row name the first row's parameters (`?2`, `?8`, `?12`),
/// and the numbers they would have had are left unused.
pub(crate) fn insert_rows_sql(table: &str, rows: usize, shared: bool) -> String {
    let n = COLUMNS.len();
    let values: Vec<String> = (0..rows)
        .map(|r| {
            let params: Vec<String> = (1..=n)
                .map(|i| {
                    let row = if shared && SHARED_COLUMNS.contains(&COLUMNS[i - 1]) {
                        0
                    } else {
                        r
                    };
                    format!("?{}", row * n + i)
                })
                .collect();
            format!("({})", params.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO {} ({}) VALUES {} ON CONFLICT(idempotency_key) DO NOTHING",
        quote_ident(table),
        COLUMNS.join(", "),
        values.join(", ")
    )
}

/// One row of `PRAGMA table_info`, the parts the check needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnInfo {
    /// Column name.
    pub name: String,
    /// Declared type, as written.
    pub decl_type: String,
    /// Declared `NOT NULL`.
    pub not_null: bool,
    /// Has a `DEFAULT`.
    pub has_default: bool,
    /// Position in the primary key (0 = not part of it).
    pub pk: i64,
}

/// What is wrong with an existing table's columns, or `None` if jetsink can write to it.
/// Pure, so the rules are tested without a database.
pub(crate) fn column_problems(columns: &[ColumnInfo]) -> Option<String> {
    let has = |name: &str| columns.iter().any(|c| c.name.eq_ignore_ascii_case(name));
    let missing: Vec<&str> = COLUMNS.iter().copied().filter(|c| !has(c)).collect();
    if !missing.is_empty() {
        return Some(format!("missing columns: {}", missing.join(", ")));
    }
    // An extra NOT NULL column without a default would fail every insert. An INTEGER
    // PRIMARY KEY is the rowid and is filled in by SQLite.
    let unfillable: Vec<&str> = columns
        .iter()
        .filter(|c| !COLUMNS.iter().any(|k| c.name.eq_ignore_ascii_case(k)))
        .filter(|c| c.not_null && !c.has_default)
        .filter(|c| !(c.pk > 0 && c.decl_type.eq_ignore_ascii_case("INTEGER")))
        .map(|c| c.name.as_str())
        .collect();
    if !unfillable.is_empty() {
        return Some(format!(
            "extra NOT NULL columns without a default, which jetsink cannot fill: {}",
            unfillable.join(", ")
        ));
    }
    None
}

/// Creates `table` if missing and checks that it accepts jetsink's insert. `db_path` is only
/// used in messages.
pub(crate) fn ensure_table(conn: &Connection, table: &str, db_path: &str) -> Result<(), SinkError> {
    let in_db = |e: SinkError| e.with_context(&format!("table {table} in {db_path}"));
    conn.execute_batch(&create_table_sql(table))
        .map_err(|e| in_db(classify(&e, None)))?;
    let mut columns = table_info(conn, table).map_err(|e| in_db(classify(&e, None)))?;
    if !missing_added(&columns).is_empty() {
        // Instances starting at once on one database would each see the column missing
        // and the second ALTER would fail: the look and the ALTERs run under the write
        // lock (waiting out `busy_timeout_ms`), so the later instance finds them added.
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| in_db(classify(&e, None)))?;
        let added = add_columns(conn, table);
        let end = if added.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = conn.execute_batch(end);
        added.map_err(|e| in_db(classify(&e, None)))?;
        ended.map_err(|e| in_db(classify(&e, None)))?;
        columns = table_info(conn, table).map_err(|e| in_db(classify(&e, None)))?;
    }
    usable(conn, table, db_path, &columns)
}

/// The columns of [`ADDED_COLUMNS`] that `columns` lacks.
fn missing_added(columns: &[ColumnInfo]) -> Vec<(&'static str, &'static str)> {
    ADDED_COLUMNS
        .iter()
        .copied()
        .filter(|(name, _)| !columns.iter().any(|c| c.name.eq_ignore_ascii_case(name)))
        .collect()
}

/// Adds what [`ADDED_COLUMNS`] lists and `table` lacks, looked up again inside the caller's
/// transaction.
fn add_columns(conn: &Connection, table: &str) -> rusqlite::Result<()> {
    for (name, definition) in missing_added(&table_info(conn, table)?) {
        tracing::info!(
            table,
            column = name,
            "adding message-metadata column to an existing table"
        );
        conn.execute_batch(&format!(
            "ALTER TABLE {} ADD COLUMN {name} {definition}",
            quote_ident(table)
        ))?;
    }
    Ok(())
}

/// What [`ensure_table`] would do to `table`, found without changing anything: `None`
/// when the table is ready, else what it would create or add. A table that exists and
/// cannot be used is refused as `ensure_table` refuses it.
pub(crate) fn probe_table(
    conn: &Connection,
    table: &str,
    db_path: &str,
) -> Result<Option<String>, SinkError> {
    let in_db = |e: SinkError| e.with_context(&format!("table {table} in {db_path}"));
    let columns = table_info(conn, table).map_err(|e| in_db(classify(&e, None)))?;
    if columns.is_empty() {
        return Ok(Some(format!("table {table} in {db_path}")));
    }
    let missing: Vec<&str> = missing_added(&columns)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    if !missing.is_empty() {
        return Ok(Some(format!(
            "columns {} of table {table} in {db_path}",
            missing.join(", ")
        )));
    }
    usable(conn, table, db_path, &columns).map(|()| None)
}

/// Refuses an existing table whose columns or keys cannot take jetsink's insert.
fn usable(
    conn: &Connection,
    table: &str,
    db_path: &str,
    columns: &[ColumnInfo],
) -> Result<(), SinkError> {
    let in_db = |e: SinkError| e.with_context(&format!("table {table} in {db_path}"));
    if let Some(problem) = column_problems(columns) {
        return Err(SinkError::Misconfigured {
            message: format!(
                "table {table} in sqlite database {db_path} cannot be used: {problem} \
                 (expected columns: {})",
                COLUMNS.join(", ")
            ),
        });
    }
    // Preparing the insert checks what columns alone cannot: that idempotency_key has a
    // PRIMARY KEY or UNIQUE constraint for ON CONFLICT, and that `table` is a table.
    if let Err(e) = conn.prepare_cached(&insert_sql(table)) {
        return Err(match e.sqlite_error_code() {
            // A lock or I/O problem while reading the schema: retry.
            Some(code) if code != ErrorCode::Unknown => in_db(classify(&e, None)),
            // SQLITE_ERROR (or an SQL input error): the statement does not fit the table.
            _ => SinkError::Misconfigured {
                message: format!(
                    "table {table} in sqlite database {db_path} cannot be used: inserting \
                     into it fails ({e}); idempotency_key must be its PRIMARY KEY or UNIQUE"
                ),
            },
        });
    }
    Ok(())
}

fn table_info(conn: &Connection, table: &str) -> rusqlite::Result<Vec<ColumnInfo>> {
    let mut stmt = conn.prepare(&format!("PRAGMA table_info({})", quote_ident(table)))?;
    let rows = stmt.query_map([], |row| {
        Ok(ColumnInfo {
            name: row.get("name")?,
            decl_type: row.get::<_, Option<String>>("type")?.unwrap_or_default(),
            not_null: row.get::<_, i64>("notnull")? != 0,
            has_default: row.get_ref("dflt_value")? != rusqlite::types::ValueRef::Null,
            pk: row.get("pk")?,
        })
    })?;
    rows.collect()
}
