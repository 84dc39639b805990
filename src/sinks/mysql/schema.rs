//! The MySQL/MariaDB side of the table: the default table's DDL, how catalog types fall
//! into the shared [`Family`] classes, the catalog queries, and the SQL of the write path.
//!
//! SQL text is generated from identifiers only, each quoted with backticks (inner backticks
//! doubled); values always travel as parameters of prepared statements.
//!
//! Why `ON DUPLICATE KEY UPDATE k = k` and not `INSERT IGNORE` for `insert_ignore` mode:
//! `INSERT IGNORE` downgrades *every* error to a warning — a value out of range is clamped,
//! a string truncated, a NULL turned into 0 — and commits it, so bad content would be
//! stored silently instead of being refused. A no-op update on a duplicate key keeps
//! strict-mode errors as errors while a redelivered row changes nothing.

use super::config::MysqlPayloadType;
use crate::sinks::database::columns::{Family, TablePlan};
use crate::sinks::database::config::WriteMode;

/// The session settings every connection runs with: strict mode (bad values are errors,
/// never silently truncated) and UTC for `TIMESTAMP` conversions. The isolation level is
/// left to the server: READ COMMITTED would refuse every insert under
/// `binlog_format=STATEMENT`, and the deadlocks REPEATABLE READ may cause between competing
/// instances are retried as transient.
pub(crate) const SESSION_INIT: [&str; 2] = [
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'",
    "SET SESSION time_zone = '+00:00'",
];

/// MySQL's limit on placeholders in one prepared statement.
pub(crate) const MAX_PLACEHOLDERS: usize = 65_535;

/// Quotes an identifier with backticks, doubling inner backticks.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// `CREATE TABLE` of the jetsink layout. `utf8mb4_bin` makes keys compare byte-exactly
/// (the default collations are case-insensitive and would merge distinct keys).
pub(crate) fn create_table_sql(table: &str, payload: MysqlPayloadType) -> String {
    let payload = match payload {
        MysqlPayloadType::Blob => "LONGBLOB",
        MysqlPayloadType::Json => "JSON",
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
         \x20   idempotency_key VARCHAR(512) NOT NULL,\n\
         \x20   stream VARCHAR(255) NOT NULL,\n\
         \x20   stream_sequence BIGINT UNSIGNED NOT NULL,\n\
         \x20   consumer_sequence BIGINT UNSIGNED NOT NULL,\n\
         \x20   subject TEXT NOT NULL,\n\
         \x20   delivered BIGINT UNSIGNED NOT NULL,\n\
         \x20   published_at DATETIME(6) NOT NULL,\n\
         \x20   written_at DATETIME(6) NOT NULL,\n\
         \x20   message_id TEXT NULL,\n\
         \x20   headers JSON NOT NULL,\n\
         \x20   priority VARCHAR(255) NULL,\n\
         \x20   lane VARCHAR(255) NULL,\n\
         \x20   classification VARCHAR(255) NULL,\n\
         \x20   labels JSON NOT NULL,\n\
         \x20   trace_id VARCHAR(32) NULL,\n\
         \x20   payload {payload} NOT NULL,\n\
         \x20   PRIMARY KEY (idempotency_key)\n\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        quote_ident(table)
    )
}

/// Columns added to the jetsink layout after the first release of this destination, with
/// the definition `ALTER TABLE ... ADD COLUMN` gives a default table that lacks them.
/// `trace_id` is the trace id of a valid W3C `traceparent` header (32 lowercase hex
/// digits), NULL otherwise.
pub(crate) const ADDED_COLUMNS: [(&str, &str); 1] = [("trace_id", "VARCHAR(32) NULL")];

/// The `ALTER TABLE` that adds `name` with `definition` to `table` (already quoted).
/// MySQL has no `ADD COLUMN IF NOT EXISTS` (MariaDB has): a column another connection
/// added a moment before is error 1060, which the caller takes as done.
pub(crate) fn add_column_sql(table: &str, name: &str, definition: &str) -> String {
    format!(
        "ALTER TABLE {table} ADD COLUMN {} {definition}",
        quote_ident(name)
    )
}

/// Columns of a table in the current database: name, data type, full column type,
/// nullable, default, extra.
pub(crate) const COLUMNS_SQL: &str = "\
SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, EXTRA
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
ORDER BY ORDINAL_POSITION";

/// Columns of every unique index, in key order (`COLUMN_NAME` is NULL for a functional
/// key part, which disqualifies the index).
pub(crate) const KEYS_SQL: &str = "\
SELECT INDEX_NAME, COLUMN_NAME
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0
ORDER BY INDEX_NAME, SEQ_IN_INDEX";

/// MariaDB's `JSON` is `LONGTEXT` with a `json_valid` CHECK: this finds those checks.
pub(crate) const CHECKS_SQL: &str = "\
SELECT CHECK_CLAUSE
FROM information_schema.CHECK_CONSTRAINTS
WHERE CONSTRAINT_SCHEMA = DATABASE() AND TABLE_NAME = ?";

/// The column a MariaDB `json_valid(`col`)` check clause validates.
pub(crate) fn json_checked_column(clause: &str) -> Option<String> {
    let inner = clause
        .trim()
        .strip_prefix("json_valid(")?
        .strip_suffix(')')?;
    let name = inner.trim().strip_prefix('`')?.strip_suffix('`')?;
    Some(name.replace("``", "`"))
}

/// Sorts a column (`DATA_TYPE`, `COLUMN_TYPE`, whether a `json_valid` check guards it)
/// into a [`Family`].
pub(crate) fn family(data_type: &str, column_type: &str, json_checked: bool) -> Family {
    let data_type = data_type.to_ascii_lowercase();
    if column_type.to_ascii_lowercase().starts_with("tinyint(1)") {
        return Family::Boolean;
    }
    match data_type.as_str() {
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" => Family::Integer,
        "decimal" | "numeric" | "float" | "double" | "real" => Family::Decimal,
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => {
            if json_checked {
                Family::Json
            } else {
                Family::Text
            }
        }
        "json" => Family::Json,
        "enum" | "set" => Family::Enum,
        "datetime" | "timestamp" => Family::Timestamp,
        "date" => Family::Date,
        "uuid" => Family::Uuid,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => Family::Bytes,
        _ => Family::Other,
    }
}

/// Whether an `EXTRA` value marks a generated (computed) column.
pub(crate) fn is_generated(extra: &str) -> bool {
    let e = extra.to_ascii_uppercase();
    [
        "VIRTUAL GENERATED",
        "STORED GENERATED",
        "PERSISTENT GENERATED",
    ]
    .iter()
    .any(|g| e.contains(g))
}

/// The multi-row insert of `rows` rows for `plan` into `table`.
pub(crate) fn insert_sql(table: &str, plan: &TablePlan, rows: usize, mode: WriteMode) -> String {
    let names: Vec<String> = plan.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let one = format!("({})", vec!["?"; plan.columns.len()].join(","));
    let mut sql = String::with_capacity(64 + names.len() * 24 + rows * (one.len() + 1));
    sql.push_str("INSERT INTO ");
    sql.push_str(table);
    sql.push_str(" (");
    sql.push_str(&names.join(", "));
    sql.push_str(") VALUES ");
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str(&one);
    }
    sql.push_str(" ON DUPLICATE KEY UPDATE ");
    match (mode, upsert_assignments(plan)) {
        (WriteMode::Upsert, Some(updates)) => sql.push_str(&updates),
        _ => {
            // A no-op on a duplicate: strict-mode errors stay errors (see the module doc).
            let k = plan
                .key
                .columns
                .first()
                .map(|k| quote_ident(k))
                .unwrap_or_else(|| names.first().cloned().unwrap_or_default());
            sql.push_str(&format!("{k} = {k}"));
        }
    }
    sql
}

/// The assignments of an upsert's `ON DUPLICATE KEY UPDATE`: every non-key column takes
/// the message's value (a delete keeps the stored values of the columns that are neither
/// the order, its tie-breaker nor the delete column), and with an order each assignment is
/// guarded: `col = IF(<newer>, <new value>, col)`, where newer is "the stored order is
/// NULL or less than the message's, or equal with a smaller `$stream_sequence` column".
///
/// MySQL evaluates the assignments left to right, and a column named in a later one reads
/// the value an earlier one just gave it. So the columns the guard reads are assigned
/// last: the tie-breaker, then the order itself. Each column before them still sees the
/// stored order; the tie-breaker, assigned, leaves the guard true exactly when the order
/// is less (when the orders were equal the order column keeps a value equal to the new
/// one anyway). `None` when every mapped column is part of the key.
pub(crate) fn upsert_assignments(plan: &TablePlan) -> Option<String> {
    let deleted = plan.deleted();
    let newest = plan.newest;
    let (order, tie) = (newest.map(|n| n.order), newest.and_then(|n| n.tie));
    let role = |i: usize| {
        if Some(i) == order {
            3
        } else if Some(i) == tie {
            2
        } else if Some(i) == deleted {
            1
        } else {
            0
        }
    };
    let mut columns: Vec<usize> = (0..plan.columns.len())
        .filter(|&i| !plan.columns[i].key)
        .collect();
    if columns.is_empty() {
        return None;
    }
    // Stable: data columns in mapping order, then the delete column, the tie, the order.
    columns.sort_by_key(|&i| role(i));
    let guard = newest.map(|n| {
        let o = quote_ident(&plan.columns[n.order].name);
        let mut g = format!("{o} IS NULL OR {o} < VALUES({o})");
        if let Some(t) = n.tie {
            let t = quote_ident(&plan.columns[t].name);
            g.push_str(&format!(
                " OR ({o} = VALUES({o}) AND ({t} IS NULL OR {t} < VALUES({t})))"
            ));
        }
        g
    });
    let assignments: Vec<String> = columns
        .iter()
        .map(|&i| {
            let q = quote_ident(&plan.columns[i].name);
            let new = match deleted {
                Some(d) if role(i) == 0 => format!(
                    "IF(VALUES({}) IS NULL, VALUES({q}), {q})",
                    quote_ident(&plan.columns[d].name)
                ),
                _ => format!("VALUES({q})"),
            };
            match &guard {
                Some(g) => format!("{q} = IF({g}, {new}, {q})"),
                None => format!("{q} = {new}"),
            }
        })
        .collect();
    Some(assignments.join(", "))
}

/// Splits rows of the given encoded sizes into statements: at most `max_rows` rows and,
/// unless a row alone is larger, at most `max_bytes` bytes each. Returns `(offset, len)`.
pub(crate) fn chunks(sizes: &[usize], max_rows: usize, max_bytes: usize) -> Vec<(usize, usize)> {
    let max_rows = max_rows.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    for (i, size) in sizes.iter().enumerate() {
        let len = i - start;
        if len > 0 && (len >= max_rows || bytes.saturating_add(*size) > max_bytes) {
            out.push((start, len));
            start = i;
            bytes = 0;
        }
        bytes = bytes.saturating_add(*size);
    }
    if start < sizes.len() {
        out.push((start, sizes.len() - start));
    }
    out
}
