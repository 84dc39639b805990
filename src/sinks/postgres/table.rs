//! The table check at open: finding the table (creating the default one the first time
//! only), reading its columns and unique keys from the catalog, and matching them against
//! the mapping and `payload_type`.
//!
//! A table that disappears after the first open (renamed, dropped) is an outage that holds
//! the batch until it is back, not a reason to start an empty one.

use tokio_postgres::Client;

use super::classify::classify;
use super::config::{PostgresConfig, PostgresPayloadType};
use super::schema::{self, Wire};
use crate::sinks::contract::SinkError;
use crate::sinks::database::columns::{
    lacking, plan_table, Family, Mapping, TableColumn, TablePlan, UniqueKey,
};
use crate::sinks::database::util::Phase;

/// Whether the sink writes the jetsink layout, the only table it may create.
pub(super) fn is_default_layout(config: &PostgresConfig, mapping: &Mapping) -> bool {
    config.columns.is_none() && mapping.is_default_layout()
}

/// The table is not there and jetsink may not create it.
pub(super) fn missing_table(table_sql: &str, default_layout: bool) -> SinkError {
    SinkError::Misconfigured {
        message: format!(
            "table {table_sql} does not exist{}",
            if default_layout {
                " and auto_create is false"
            } else {
                "; with `columns` the table must be created beforehand"
            }
        ),
    }
}

/// The table's oid, if it exists.
pub(super) async fn lookup(
    client: &Client,
    table_sql: &str,
) -> Result<Option<u32>, tokio_postgres::Error> {
    client
        .query_one(schema::RESOLVE_SQL, &[&table_sql])
        .await
        .map(|r| r.get::<_, Option<u32>>(0))
}

/// Finds the table's oid, creating the default table the first time when allowed.
pub(super) async fn resolve(
    client: &Client,
    config: &PostgresConfig,
    table_sql: &str,
    mapping: &Mapping,
    phase: Phase,
) -> Result<u32, SinkError> {
    let db = |e: tokio_postgres::Error| classify(&e, phase, None);
    if let Some(oid) = lookup(client, table_sql).await.map_err(db)? {
        return Ok(oid);
    }
    let default_layout = is_default_layout(config, mapping);
    if phase == Phase::Write {
        return Err(SinkError::transient(format!(
            "table {table_sql} disappeared after it was opened; restore it (jetsink does not \
             re-create it, so rows are not split across two tables)"
        )));
    }
    let create = match &config.copy_of {
        // A bench's scratch copy of the user's table: its columns, defaults, constraints
        // and indexes (not its triggers or foreign keys).
        Some(source) => format!(
            "CREATE TABLE {table_sql} (LIKE {} INCLUDING ALL)",
            schema::qualified(config.schema.as_deref(), source)
        ),
        None if default_layout && config.auto_create => {
            schema::create_table_sql(table_sql, config.payload_type.unwrap_or_default())
        }
        None => return Err(missing_table(table_sql, default_layout)),
    };
    client.batch_execute(&create).await.map_err(db)?;
    tracing::info!(table = %table_sql, "created postgres table");
    lookup(client, table_sql).await.map_err(db)?.ok_or_else(|| {
        SinkError::transient(format!("table {table_sql} vanished right after creation"))
    })
}

/// The columns added to the jetsink layout since the first release
/// ([`schema::ADDED_COLUMNS`]) that the table lacks, when the sink writes that layout.
pub(super) fn missing_added(
    config: &PostgresConfig,
    mapping: &Mapping,
    columns: &[TableColumn],
) -> Vec<&'static str> {
    if !is_default_layout(config, mapping) {
        return Vec::new();
    }
    let names: Vec<&'static str> = schema::ADDED_COLUMNS.iter().map(|(n, _)| *n).collect();
    lacking(&names, columns, false)
}

/// Adds `missing` (from [`missing_added`]) to a jetsink-layout table from an earlier
/// version, as the SQLite destination does, so the table keeps being written after an
/// upgrade; the caller has planned the table without them first, so a table that would
/// be refused anyway is left unchanged. `false` when this role may not alter the table
/// (only its owner may): it keeps writing it without them, with a warning at open,
/// because they hold metadata and an upgrade must not stop a working deployment.
pub(super) async fn add_columns(
    client: &Client,
    table_sql: &str,
    missing: &[&str],
    phase: Phase,
) -> Result<bool, SinkError> {
    let added = schema::ADDED_COLUMNS
        .iter()
        .filter(|(n, _)| missing.contains(n));
    for (name, definition) in added {
        let sql = schema::add_column_sql(table_sql, name, definition);
        match client.batch_execute(&sql).await {
            Ok(()) => {
                tracing::info!(table = %table_sql, column = *name, "adding message-metadata column to an existing table")
            }
            Err(e) if e.code().map(|s| s.code()) == Some("42501") => {
                if phase == Phase::Open {
                    tracing::warn!(table = %table_sql, columns = %missing.join(", "), "this role may not add the new message-metadata columns to the table (only its owner may): writing it without them");
                }
                return Ok(false);
            }
            Err(e) => return Err(classify(&e, phase, None)),
        }
    }
    Ok(true)
}

/// The table's columns, and the base type name of each (for its wire type).
pub(super) async fn read_columns(
    client: &Client,
    oid: u32,
) -> Result<(Vec<TableColumn>, Vec<String>), tokio_postgres::Error> {
    let rows = client.query(schema::COLUMNS_SQL, &[&oid]).await?;
    let mut columns = Vec::with_capacity(rows.len());
    let mut bases = Vec::with_capacity(rows.len());
    for r in rows {
        let base: String = r.get(2);
        let typtype: String = r.get(3);
        columns.push(TableColumn {
            name: r.get(0),
            type_name: r.get(1),
            family: schema::family(&base, &typtype),
            not_null: r.get(4),
            has_default: r.get(5),
            generated: r.get(6),
        });
        bases.push(base);
    }
    Ok((columns, bases))
}

/// The table's primary key and unique constraints.
pub(super) async fn read_keys(
    client: &Client,
    oid: u32,
) -> Result<Vec<UniqueKey>, tokio_postgres::Error> {
    let rows = client.query(schema::KEYS_SQL, &[&oid]).await?;
    Ok(rows
        .into_iter()
        .map(|r| UniqueKey {
            name: r.get(0),
            primary: r.get(1),
            columns: r.get(2),
        })
        .collect())
}

/// The plan for writing `mapping` into the table, which fits it and `payload_type`.
pub(super) fn plan(
    config: &PostgresConfig,
    table_sql: &str,
    mapping: &Mapping,
    columns: &[TableColumn],
    keys: &[UniqueKey],
) -> Result<TablePlan, SinkError> {
    let plan =
        plan_table(mapping, columns, keys, false).map_err(|problem| SinkError::Misconfigured {
            message: format!("table {table_sql} cannot be used: {problem}"),
        })?;
    check_payload_type(config.payload_type, table_sql, &plan)?;
    Ok(plan)
}

fn check_payload_type(
    wanted: Option<PostgresPayloadType>,
    table_sql: &str,
    plan: &TablePlan,
) -> Result<(), SinkError> {
    let (Some(wanted), Some(family)) = (wanted, schema::payload_family(plan)) else {
        return Ok(());
    };
    let fits = match wanted {
        PostgresPayloadType::Bytea => family == Family::Bytes,
        PostgresPayloadType::Jsonb => family == Family::Json,
    };
    if fits {
        Ok(())
    } else {
        Err(SinkError::Misconfigured {
            message: format!(
                "table {table_sql}: payload_type is {wanted:?} but the payload column's type differs"
            )
            .to_lowercase(),
        })
    }
}

/// The wire type of each planned column, from its base type in the catalog.
pub(super) fn wires(plan: &TablePlan, columns: &[TableColumn], bases: &[String]) -> Vec<Wire> {
    plan.columns
        .iter()
        .map(|p| schema::wire(p, schema::base_of(&p.name, columns, bases).unwrap_or("")))
        .collect()
}
