//! Finding one message in the PostgreSQL table for `jetsink trace`, on a connection of
//! its own: it never creates the table, takes no lock a writer waits for (a plain
//! `SELECT`) and may run beside a live `jetsink run`.

use super::classify::classify;
use super::config::PostgresConfig;
use super::connection::{connect_client, AbortOnDrop};
use super::schema::quote_ident;
use super::table;
use crate::sinks::contract::{Located, SinkError};
use crate::sinks::database::locate::{Found, Query};
use crate::sinks::database::util::Phase;

/// The `SELECT` for `query` in `table_sql`: the key, stream sequence and delivery count as
/// text, the wanted value as `$1` and the stream as `$2`; names quoted, values never in it.
fn select_sql(table_sql: &str, query: &Query<'_>) -> String {
    let text = |column: Option<&str>| {
        column.map_or("NULL::text".to_string(), |c| {
            format!("{}::text", quote_ident(c))
        })
    };
    let order = query.latest_by.map_or(String::new(), |c| {
        format!(" ORDER BY {} DESC", quote_ident(c))
    });
    format!(
        "SELECT {}, {}, {} FROM {table_sql} WHERE {} = $1 AND {} = $2{order} LIMIT 1",
        text(Some(query.key)),
        text(query.sequence),
        text(query.delivered),
        text(Some(query.matched)),
        text(Some(query.stream)),
    )
}

/// Looks up `query` among `stream`'s rows of `table_sql` (schema-qualified, quoted).
pub(super) async fn locate(
    config: &PostgresConfig,
    table_sql: &str,
    query: &Query<'_>,
    stream: &str,
) -> Result<Located, SinkError> {
    let phase = Phase::Open;
    let (client, driver) = connect_client(config, phase).await?;
    let _stop = AbortOnDrop(driver);
    let db = |e: tokio_postgres::Error| classify(&e, phase, None);
    if table::lookup(&client, table_sql)
        .await
        .map_err(db)?
        .is_none()
    {
        return Ok(query.answer(table_sql, Found::NoTable));
    }
    let row = client
        .query_opt(&select_sql(table_sql, query), &[&query.value, &stream])
        .await
        .map_err(db)?;
    let found = match row {
        None => Found::NoRow,
        Some(row) => Found::Row {
            key: row
                .try_get::<_, Option<String>>(0)
                .map_err(db)?
                .unwrap_or_default(),
            sequence: row.try_get(1).map_err(db)?,
            delivered: row.try_get(2).map_err(db)?,
        },
    };
    Ok(query.answer(table_sql, found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::contract::Wanted;
    use crate::sinks::database::columns::Mapping;

    #[test]
    fn the_lookup_quotes_every_name_and_passes_the_values_as_parameters() {
        let m = Mapping::default_layout();
        let q = Query::new(&m, Wanted::MessageId("x'; DROP TABLE t; --")).unwrap();
        let sql = select_sql("\"public\".\"t\"", &q);
        assert_eq!(
            sql,
            "SELECT \"idempotency_key\"::text, \"stream_sequence\"::text, \"delivered\"::text FROM \"public\".\"t\" WHERE \"message_id\"::text = $1 AND \"stream\"::text = $2 ORDER BY \"stream_sequence\" DESC LIMIT 1"
        );
        assert!(!sql.contains("DROP"));
    }
}
