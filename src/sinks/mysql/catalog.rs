//! What the catalog says of a table: its columns (with MariaDB's `json_valid`-checked
//! text sorted as JSON) and its unique keys, read at every open and reconnect to check
//! the table against the mapping.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use super::schema;
use crate::sinks::database::columns::{TableColumn, UniqueKey};

/// The table's columns in table order; empty when the table does not exist (or the user
/// may not see it).
pub(super) async fn read_columns(
    conn: &mut Conn,
    table: &str,
) -> Result<Vec<TableColumn>, mysql_async::Error> {
    type Row = (String, String, String, String, Option<String>, String);
    let rows: Vec<Row> = conn.exec(schema::COLUMNS_SQL, (table,)).await?;
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    // MariaDB's JSON columns are LONGTEXT guarded by json_valid(); MySQL has no such view
    // column and reports JSON directly, so a failing query just means "none".
    let checks: Vec<String> = conn
        .exec(schema::CHECKS_SQL, (table,))
        .await
        .unwrap_or_default();
    let json_checked: Vec<String> = checks
        .iter()
        .filter_map(|c| schema::json_checked_column(c))
        .collect();
    Ok(rows
        .into_iter()
        .map(|(name, data_type, column_type, nullable, default, extra)| {
            let checked = json_checked.iter().any(|c| c.eq_ignore_ascii_case(&name));
            TableColumn {
                family: schema::family(&data_type, &column_type, checked),
                type_name: column_type,
                not_null: nullable.eq_ignore_ascii_case("NO"),
                has_default: default.is_some()
                    || extra.to_ascii_lowercase().contains("auto_increment"),
                generated: schema::is_generated(&extra),
                name,
            }
        })
        .collect())
}

/// The table's unique indexes over plain columns (one with a functional key part cannot
/// make a write idempotent, so it is left out).
pub(super) async fn read_keys(
    conn: &mut Conn,
    table: &str,
) -> Result<Vec<UniqueKey>, mysql_async::Error> {
    let rows: Vec<(String, Option<String>)> = conn.exec(schema::KEYS_SQL, (table,)).await?;
    let mut keys: Vec<UniqueKey> = Vec::new();
    let mut functional: Vec<String> = Vec::new();
    for (index, column) in rows {
        let Some(column) = column else {
            functional.push(index);
            continue;
        };
        match keys.iter_mut().find(|k| k.name == index) {
            Some(k) => k.columns.push(column),
            None => keys.push(UniqueKey {
                primary: index == "PRIMARY",
                name: index,
                columns: vec![column],
            }),
        }
    }
    keys.retain(|k| !functional.contains(&k.name));
    Ok(keys)
}
