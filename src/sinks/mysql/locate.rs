//! Finding one message in the MySQL/MariaDB table for `jetsink trace`, on a connection of
//! its own: it never creates the table, takes no lock a writer waits for (a plain
//! `SELECT` reads a consistent snapshot in InnoDB) and may run beside a live `jetsink run`.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

use super::classify::classify;
use super::schema::quote_ident;
use crate::sinks::contract::{Located, SinkError};
use crate::sinks::database::locate::{Found, Query};
use crate::sinks::database::util::Phase;

/// Whether a table of this name exists in the current database (and this user sees it).
const TABLE_EXISTS_SQL: &str = "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?";

/// The `SELECT` for `query` in `table_sql`: the key, stream sequence and delivery count as
/// text, the wanted value and the stream as `?` parameters; names quoted, values never in it.
fn select_sql(table_sql: &str, query: &Query<'_>) -> String {
    let text = |column: Option<&str>| {
        column.map_or("NULL".to_string(), |c| {
            format!("CAST({} AS CHAR)", quote_ident(c))
        })
    };
    let order = query.latest_by.map_or(String::new(), |c| {
        format!(" ORDER BY {} DESC", quote_ident(c))
    });
    format!(
        "SELECT {}, {}, {} FROM {table_sql} WHERE {} = ? AND {} = ?{order} LIMIT 1",
        text(Some(query.key)),
        text(query.sequence),
        text(query.delivered),
        quote_ident(query.matched),
        quote_ident(query.stream),
    )
}

/// Looks up `query` among `stream`'s rows of `table` (`table_sql`: quoted) over a new
/// connection made from `opts`.
pub(super) async fn locate(
    opts: Opts,
    table: &str,
    table_sql: &str,
    query: &Query<'_>,
    stream: &str,
) -> Result<Located, SinkError> {
    let db = |e: mysql_async::Error| classify(&e, Phase::Open, None);
    let mut conn = Conn::new(opts).await.map_err(db)?;
    let result = find(&mut conn, table, table_sql, query, stream).await;
    let _ = conn.disconnect().await;
    Ok(query.answer(table, result.map_err(db)?))
}

async fn find(
    conn: &mut Conn,
    table: &str,
    table_sql: &str,
    query: &Query<'_>,
    stream: &str,
) -> Result<Found, mysql_async::Error> {
    let tables: Option<u64> = conn.exec_first(TABLE_EXISTS_SQL, (table,)).await?;
    if tables.unwrap_or(0) == 0 {
        return Ok(Found::NoTable);
    }
    type Row = (Option<String>, Option<String>, Option<String>);
    let row: Option<Row> = conn
        .exec_first(select_sql(table_sql, query), (query.value, stream))
        .await?;
    Ok(match row {
        None => Found::NoRow,
        Some((key, sequence, delivered)) => Found::Row {
            key: key.unwrap_or_default(),
            sequence,
            delivered,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::contract::Wanted;
    use crate::sinks::database::columns::Mapping;

    #[test]
    fn the_lookup_quotes_every_name_and_passes_the_values_as_parameters() {
        let m = Mapping::default_layout();
        let q = Query::new(&m, Wanted::Key("x'; DROP TABLE t; --")).unwrap();
        let sql = select_sql("`t`", &q);
        assert_eq!(
            sql,
            "SELECT CAST(`idempotency_key` AS CHAR), CAST(`stream_sequence` AS CHAR), CAST(`delivered` AS CHAR) FROM `t` WHERE `idempotency_key` = ? AND `stream` = ? LIMIT 1"
        );
        assert!(!sql.contains("DROP"));
    }
}
