//! The PostgreSQL side of the table: the default table's DDL, how catalog types fall into
//! the shared [`Family`] classes, which wire type each column's values travel as, and the
//! SQL of the write path.
//!
//! All SQL text is generated here from identifiers only: names from the config and the
//! catalog, quoted with `postgres-protocol`'s `escape_identifier`, and type names that
//! PostgreSQL's own `format_type` produced. Values never appear in SQL: they travel as
//! typed array parameters (`unnest($1::text[], ...)`) or in binary `COPY`.

use postgres_protocol::escape::escape_identifier;
use tokio_postgres::types::Type;

use super::config::PostgresPayloadType;
use crate::sinks::database::columns::{
    Family, PlannedColumn, Source, TableColumn, TablePlan, ValueKind,
};
use crate::sinks::database::config::WriteMode;

/// The temporary table the `COPY` path stages rows in, one per session.
pub(crate) const STAGE: &str = "pg_temp.jetsink_stage";

/// Quotes an identifier (`"name"`, inner quotes doubled).
pub(crate) fn quote_ident(name: &str) -> String {
    escape_identifier(name)
}

/// The table as SQL: `"schema"."table"`, or `"table"` resolved by the `search_path`.
pub(crate) fn qualified(schema: Option<&str>, table: &str) -> String {
    match schema {
        Some(s) => format!("{}.{}", quote_ident(s), quote_ident(table)),
        None => quote_ident(table),
    }
}

/// `CREATE TABLE` of the jetsink layout (the same columns as the SQLite destination).
pub(crate) fn create_table_sql(table: &str, payload: PostgresPayloadType) -> String {
    let payload = match payload {
        PostgresPayloadType::Bytea => "bytea",
        PostgresPayloadType::Jsonb => "jsonb",
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n\
         \x20   idempotency_key text PRIMARY KEY,\n\
         \x20   stream text NOT NULL,\n\
         \x20   stream_sequence bigint NOT NULL,\n\
         \x20   consumer_sequence bigint NOT NULL,\n\
         \x20   subject text NOT NULL,\n\
         \x20   delivered bigint NOT NULL,\n\
         \x20   published_at timestamptz NOT NULL,\n\
         \x20   written_at timestamptz NOT NULL,\n\
         \x20   message_id text,\n\
         \x20   headers jsonb NOT NULL,\n\
         \x20   priority text,\n\
         \x20   lane text,\n\
         \x20   classification text,\n\
         \x20   labels jsonb NOT NULL DEFAULT '[]',\n\
         \x20   trace_id text,\n\
         \x20   payload {payload} NOT NULL\n\
         )"
    )
}

/// Columns added to the jetsink layout after the first release of this destination, with
/// the definition `ALTER TABLE ... ADD COLUMN` gives a default table that lacks them (as
/// the SQLite destination does for its own). `trace_id` is the trace id of a valid W3C
/// `traceparent` header, NULL otherwise.
pub(crate) const ADDED_COLUMNS: [(&str, &str); 1] = [("trace_id", "text")];

/// The `ALTER TABLE` that adds `name` with `definition` to `table` (already quoted). `IF
/// NOT EXISTS`: another connection of the same sink may have added it a moment before.
pub(crate) fn add_column_sql(table: &str, name: &str, definition: &str) -> String {
    format!(
        "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {} {definition}",
        quote_ident(name)
    )
}

/// The oid of the table a (quoted) name resolves to, or NULL.
pub(crate) const RESOLVE_SQL: &str = "SELECT to_regclass($1)::oid";

/// The table's columns: name, type for casts, base type name, type kind, NOT NULL,
/// filled by the database, generated.
pub(crate) const COLUMNS_SQL: &str = "\
SELECT a.attname::text,
       format_type(a.atttypid, NULL),
       COALESCE(b.typname, t.typname)::text,
       COALESCE(b.typtype, t.typtype)::text,
       a.attnotnull,
       (a.atthasdef OR a.attidentity <> ''),
       (a.attgenerated <> '')
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type b ON t.typtype = 'd' AND b.oid = t.typbasetype
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum";

/// The table's unique indexes over plain columns (no expressions, no predicate): name,
/// primary, key columns in order.
pub(crate) const KEYS_SQL: &str = "\
SELECT c.relname::text,
       i.indisprimary,
       ARRAY(SELECT a.attname::text
             FROM unnest((i.indkey::int2[])[0:i.indnkeyatts - 1]) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             ORDER BY k.ord)
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL";

/// Sorts a catalog type (its base type's `typname` and `typtype`) into a [`Family`].
pub(crate) fn family(typname: &str, typtype: &str) -> Family {
    if typtype == "e" {
        return Family::Enum;
    }
    match typname {
        "int2" | "int4" | "int8" => Family::Integer,
        "numeric" | "float4" | "float8" => Family::Decimal,
        "text" | "varchar" | "bpchar" | "name" | "citext" => Family::Text,
        "bool" => Family::Boolean,
        "timestamptz" | "timestamp" => Family::Timestamp,
        "date" => Family::Date,
        "json" | "jsonb" => Family::Json,
        "uuid" => Family::Uuid,
        "bytea" => Family::Bytes,
        _ => Family::Other,
    }
}

/// The PostgreSQL type a column's values are sent as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Text, converted by the server with an explicit cast to the column's type.
    Text,
    /// 64-bit integer (assigned to any integer or numeric column; overflow is refused).
    Int8,
    /// Timestamp with time zone (the session runs in UTC).
    Timestamptz,
    /// `jsonb` in its binary form.
    Jsonb,
    /// Raw bytes.
    Bytea,
}

impl Wire {
    /// The SQL type name, which is also the type's `pg_type.typname`.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            Wire::Text => "text",
            Wire::Int8 => "int8",
            Wire::Timestamptz => "timestamptz",
            Wire::Jsonb => "jsonb",
            Wire::Bytea => "bytea",
        }
    }

    /// The client library's type, for binary `COPY`.
    pub(crate) fn pg_type(self) -> Type {
        match self {
            Wire::Text => Type::TEXT,
            Wire::Int8 => Type::INT8,
            Wire::Timestamptz => Type::TIMESTAMPTZ,
            Wire::Jsonb => Type::JSONB,
            Wire::Bytea => Type::BYTEA,
        }
    }
}

/// Chooses how a planned column's values travel: natively when the source and column
/// types agree, as text with a cast otherwise.
pub(crate) fn wire(column: &PlannedColumn, base_type: &str) -> Wire {
    match (column.source.kind(), column.family) {
        (ValueKind::Integer, Family::Integer | Family::Decimal) => Wire::Int8,
        (ValueKind::Timestamp, Family::Timestamp) => Wire::Timestamptz,
        (ValueKind::Json | ValueKind::Bytes | ValueKind::Any, Family::Json)
            if base_type == "jsonb" =>
        {
            Wire::Jsonb
        }
        (ValueKind::Bytes, Family::Bytes) => Wire::Bytea,
        _ => Wire::Text,
    }
}

/// The SQL of the write path for one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteSql {
    /// One multi-row `INSERT ... SELECT FROM unnest(<one array per column>)`.
    pub insert: String,
    /// Creates the session's staging table for `COPY`.
    pub create_stage: String,
    /// Binary `COPY` into the staging table.
    pub copy: String,
    /// `INSERT ... SELECT` from the staging table.
    pub insert_from_stage: String,
    /// Binary `COPY` straight into the table (insert_ignore mode, when every column takes
    /// a wire type as it is: see [`native_copy_wires`]).
    pub copy_direct: String,
}

/// Builds the write SQL for `plan` into `table` (already quoted). `wires[i]` and `plan`'s
/// column `i` belong together.
pub(crate) fn write_sql(
    table: &str,
    plan: &TablePlan,
    wires: &[Wire],
    mode: WriteMode,
) -> WriteSql {
    let names: Vec<String> = plan.columns.iter().map(|c| quote_ident(&c.name)).collect();
    let aliases: Vec<String> = (0..plan.columns.len()).map(|i| format!("c{i}")).collect();
    let exprs: Vec<String> = plan
        .columns
        .iter()
        .zip(wires)
        .enumerate()
        .map(|(i, (c, w))| match w {
            // type_name comes from format_type(): valid SQL for the column's type.
            Wire::Text => format!("CAST(u.c{i} AS {})", c.type_name),
            _ => format!("u.c{i}"),
        })
        .collect();
    let keys: Vec<String> = plan.key.columns.iter().map(|k| quote_ident(k)).collect();
    let conflict = match (mode, conflict_update(plan)) {
        (WriteMode::Upsert, Some(update)) => {
            format!("ON CONFLICT ({}) DO UPDATE SET {update}", keys.join(", "))
        }
        _ => format!("ON CONFLICT ({}) DO NOTHING", keys.join(", ")),
    };
    let params: Vec<String> = wires
        .iter()
        .enumerate()
        .map(|(i, w)| format!("${}::{}[]", i + 1, w.sql()))
        .collect();
    let stage_columns: Vec<String> = wires
        .iter()
        .enumerate()
        .map(|(i, w)| format!("c{i} {}", w.sql()))
        .collect();
    // Staged values are read once, right away: compressing them (TOAST) would only be
    // undone by the INSERT ... SELECT and done again for the target.
    let no_compression: Vec<String> = wires
        .iter()
        .enumerate()
        .filter(|(_, w)| matches!(w, Wire::Text | Wire::Jsonb | Wire::Bytea))
        .map(|(i, _)| format!("ALTER COLUMN c{i} SET STORAGE EXTERNAL"))
        .collect();
    let storage = if no_compression.is_empty() {
        String::new()
    } else {
        format!("; ALTER TABLE {STAGE} {}", no_compression.join(", "))
    };
    WriteSql {
        insert: format!(
            "INSERT INTO {table} AS {STORED} ({}) SELECT {} FROM unnest({}) AS u({}) {conflict}",
            names.join(", "),
            exprs.join(", "),
            params.join(", "),
            aliases.join(", ")
        ),
        create_stage: format!(
            "DROP TABLE IF EXISTS {STAGE}; CREATE TEMP TABLE jetsink_stage ({}) ON COMMIT DELETE ROWS{storage}",
            stage_columns.join(", ")
        ),
        copy: format!(
            "COPY {STAGE} ({}) FROM STDIN (FORMAT binary)",
            aliases.join(", ")
        ),
        insert_from_stage: format!(
            "INSERT INTO {table} AS {STORED} ({}) SELECT {} FROM {STAGE} AS u {conflict}",
            names.join(", "),
            exprs.join(", ")
        ),
        copy_direct: format!(
            "COPY {table} ({}) FROM STDIN (FORMAT binary)",
            names.join(", ")
        ),
    }
}

/// The target table's alias in the write statements: the row already stored, which an
/// ordered upsert compares with `EXCLUDED`, the one proposed.
pub(crate) const STORED: &str = "stored";

/// What an upsert does to a row already stored, after `DO UPDATE SET`: every non-key
/// column takes the message's value (a delete keeps the stored values of the columns that
/// are neither the order, its tie-breaker nor the delete column, so a tombstone holds the
/// last state of the key), and with an order only when the message is newer:
/// `WHERE stored.order < EXCLUDED.order`, equal orders broken by the `$stream_sequence`
/// column when one is mapped, and a stored NULL order counting as oldest. `None` when
/// every mapped column is part of the key (nothing to update).
pub(crate) fn conflict_update(plan: &TablePlan) -> Option<String> {
    let deleted = plan.deleted().map(|i| quote_ident(&plan.columns[i].name));
    let state = |i: usize| {
        plan.deleted() == Some(i)
            || plan
                .newest
                .is_some_and(|n| n.order == i || n.tie == Some(i))
    };
    let updates: Vec<String> = plan
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.key)
        .map(|(i, c)| {
            let q = quote_ident(&c.name);
            match &deleted {
                Some(d) if !state(i) => format!(
                    "{q} = CASE WHEN EXCLUDED.{d} IS NULL THEN EXCLUDED.{q} ELSE {STORED}.{q} END"
                ),
                _ => format!("{q} = EXCLUDED.{q}"),
            }
        })
        .collect();
    if updates.is_empty() {
        return None;
    }
    let mut sql = updates.join(", ");
    if let Some(n) = plan.newest {
        let o = quote_ident(&plan.columns[n.order].name);
        let mut guard = format!("{STORED}.{o} IS NULL OR {STORED}.{o} < EXCLUDED.{o}");
        if let Some(t) = n.tie {
            let t = quote_ident(&plan.columns[t].name);
            guard.push_str(&format!(
                " OR ({STORED}.{o} = EXCLUDED.{o} AND ({STORED}.{t} IS NULL OR {STORED}.{t} < EXCLUDED.{t}))"
            ));
        }
        sql.push_str(&format!(" WHERE {guard}"));
    }
    Some(sql)
}

/// The wires binary `COPY` can fill the table itself with, when every planned column
/// takes one as it is: binary `COPY` applies no cast, and a wire sent to another type (an
/// `int8` into an `integer` column, text into `uuid`) would be refused or, for two types
/// with the same binary layout, stored wrongly. A column's own wire fits when it is the
/// column's base type; a JSON value going into an `int8` column (sent as text and cast by
/// the `INSERT`) fits as `int8` in the batches whose values all read as integers
/// ([`super::encode::reads_as_int8`]). `None` when some column fits neither way.
/// `bases[i]` belongs to `columns[i]`, as read from the catalog.
pub(crate) fn native_copy_wires(
    plan: &TablePlan,
    wires: &[Wire],
    columns: &[TableColumn],
    bases: &[String],
) -> Option<Vec<Wire>> {
    plan.columns
        .iter()
        .zip(wires)
        .map(|(p, w)| {
            let base = base_of(&p.name, columns, bases)?;
            if base == w.sql() {
                Some(*w)
            } else if *w == Wire::Text
                && base == Wire::Int8.sql()
                && p.source.kind() == ValueKind::Any
            {
                Some(Wire::Int8)
            } else {
                None
            }
        })
        .collect()
}

/// The catalog's base type name of column `name`; `bases[i]` belongs to `columns[i]`.
pub(crate) fn base_of<'a>(
    name: &str,
    columns: &[TableColumn],
    bases: &'a [String],
) -> Option<&'a str> {
    columns
        .iter()
        .zip(bases)
        .find(|(t, _)| t.name == name)
        .map(|(_, b)| b.as_str())
}

/// Whether the plan writes the payload as the jetsink layout's `payload` column, and with
/// which type: used to check `payload_type` against an existing table.
pub(crate) fn payload_family(plan: &TablePlan) -> Option<Family> {
    plan.columns
        .iter()
        .find(|c| {
            c.name == "payload"
                && c.source == Source::Field(crate::sinks::database::columns::Field::Payload)
        })
        .map(|c| c.family)
}
