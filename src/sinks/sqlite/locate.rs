//! Finding one message in the SQLite table for `jetsink trace`, through a read-only
//! connection of its own: a trace never creates the file or the table, never takes the
//! writer's lock, and may run beside a live `jetsink run` (WAL readers do not block it).

use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::classify::classify;
use super::schema::quote_ident;
use crate::sinks::contract::{Located, SinkError, Wanted};

/// Looks up the row of `wanted` among `stream`'s rows of `table` in the database at `path`.
pub fn locate(
    path: &Path,
    table: &str,
    stream: &str,
    wanted: Wanted<'_>,
) -> Result<Located, SinkError> {
    let path_text = path.display().to_string();
    let place = |column: &str, value: &str| format!("table {table}, row {column} = {value:?}");
    let (column, value, order) = match wanted {
        Wanted::Key(key) => ("idempotency_key", key, ""),
        // Several rows may carry one id (a key of `<stream>:<sequence>` and a publisher
        // that reused it); the latest is the one the stream still deduplicates.
        Wanted::MessageId(id) => ("message_id", id, " ORDER BY stream_sequence DESC"),
    };
    let exists = path
        .try_exists()
        .map_err(|e| crate::sinks::util::io_error(&format!("checking {path_text}"), &e))?;
    if !exists {
        return Ok(Located::Absent(format!(
            "sqlite {path_text} does not exist yet"
        )));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| classify(&e, None).with_context(&format!("opening {path_text}")))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| classify(&e, None).with_context(&format!("opening {path_text}")))?;
    let sql = format!(
        "SELECT stream_sequence, delivered, idempotency_key FROM {} WHERE {column} = ?1 AND stream = ?2{order} LIMIT 1",
        quote_ident(table)
    );
    let row = conn
        .query_row(&sql, [value, stream], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .optional()
        .map_err(|e| {
            classify(&e, None).with_context(&format!("reading table {table} in {path_text}"))
        })?;
    Ok(match row {
        Some((sequence, delivered, key)) => Located::Stored {
            place: place("idempotency_key", &key),
            sequence: u64::try_from(sequence).ok(),
            delivered: u64::try_from(delivered).ok(),
        },
        None => Located::Absent(format!("no row {column} = {value:?} in table {table}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_key_is_found_with_its_sequence_and_a_missing_one_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&super::super::schema::create_table_sql("events"))
            .unwrap();
        conn.execute(
            "INSERT INTO events (idempotency_key, stream, stream_sequence, consumer_sequence, subject, delivered, published_at, written_at, message_id, headers, payload) VALUES ('S:7', 'S', 7, 1, 'a', 2, 'x', 'y', 'm-7', '{}', x'00')",
            [],
        )
        .unwrap();
        drop(conn);
        let found = locate(&path, "events", "S", Wanted::Key("S:7")).unwrap();
        assert_eq!(
            found,
            Located::Stored {
                place: "table events, row idempotency_key = \"S:7\"".into(),
                sequence: Some(7),
                delivered: Some(2),
            }
        );
        let by_id = locate(&path, "events", "S", Wanted::MessageId("m-7")).unwrap();
        assert!(matches!(
            by_id,
            Located::Stored {
                sequence: Some(7),
                ..
            }
        ));
        let other_stream = locate(&path, "events", "T", Wanted::Key("S:7")).unwrap();
        assert!(
            matches!(other_stream, Located::Absent(_)),
            "{other_stream:?}"
        );
        assert!(matches!(
            locate(&path, "events", "S", Wanted::Key("S:8")).unwrap(),
            Located::Absent(_)
        ));
        let gone = locate(&dir.path().join("no.db"), "events", "S", Wanted::Key("S:7")).unwrap();
        assert!(matches!(gone, Located::Absent(ref w) if w.contains("does not exist")));
        assert!(
            !dir.path().join("no.db").exists(),
            "a trace creates nothing"
        );
    }
}
