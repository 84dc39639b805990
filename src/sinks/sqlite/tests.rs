//! Tests of the SQLite destination: the classifier and schema rules as tables, and the sink
//! against real databases in temporary directories, including the files being moved and
//! removed underneath it. `block_in_place` needs the multi-threaded runtime.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use rusqlite::{ffi, Connection, TransactionBehavior};
use time::OffsetDateTime;

use super::classify::classify;
use super::config::{SqliteConfig, SqliteSynchronous};
use super::schema::{self, ColumnInfo};
use super::SqliteSink;
use crate::config::IdempotencyKey;
use crate::envelope::{normalize, rfc3339, Delivery, Envelope};
use crate::sinks::contract::{Sink, SinkError};

const TABLE: &str = "jetsink_events";

fn config(path: &Path, table: &str) -> SqliteConfig {
    SqliteConfig {
        path: path.display().to_string(),
        table: table.to_string(),
        synchronous: SqliteSynchronous::Full,
        busy_timeout_ms: 5_000,
        page_size: 32_768,
    }
}

fn published(seq: u64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789 + i128::from(seq)).unwrap()
}

fn envelope_with(seq: u64, delivered: u64, payload: Vec<u8>) -> Envelope {
    let msg_id = format!("id-{seq}");
    let mut headers = vec![("A", "1"), ("B", "x"), ("A", "2")];
    if seq.is_multiple_of(2) {
        headers.push(("Nats-Msg-Id", msg_id.as_str()));
    }
    normalize(
        "orders.new",
        Delivery {
            stream: "ORDERS",
            consumer: "sink",
            stream_sequence: seq,
            consumer_sequence: seq + 100,
            delivered,
            published: published(seq),
        },
        headers,
        Bytes::from(payload),
        IdempotencyKey::StreamSequence,
    )
}

fn envelope(seq: u64) -> Envelope {
    envelope_with(seq, 1, format!("{{\"n\":{seq}}}").into_bytes())
}

fn batch(seqs: std::ops::RangeInclusive<u64>) -> Vec<Envelope> {
    seqs.map(envelope).collect()
}

#[derive(Debug)]
struct Row {
    key: String,
    stream: String,
    stream_sequence: i64,
    consumer_sequence: i64,
    subject: String,
    delivered: i64,
    published_at: String,
    written_at: String,
    message_id: Option<String>,
    headers: String,
    payload: Vec<u8>,
    types: String,
}

fn read_rows(path: &Path, table: &str) -> Vec<Row> {
    let conn = Connection::open(path).unwrap();
    let sql = format!(
        "SELECT idempotency_key, stream, stream_sequence, consumer_sequence, subject, \
         delivered, published_at, written_at, message_id, headers, payload, \
         typeof(stream_sequence) || ',' || typeof(consumer_sequence) || ',' || \
         typeof(delivered) || ',' || typeof(message_id) || ',' || typeof(payload) \
         FROM {} ORDER BY rowid",
        schema::quote_ident(table)
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok(Row {
                key: r.get(0)?,
                stream: r.get(1)?,
                stream_sequence: r.get(2)?,
                consumer_sequence: r.get(3)?,
                subject: r.get(4)?,
                delivered: r.get(5)?,
                published_at: r.get(6)?,
                written_at: r.get(7)?,
                message_id: r.get(8)?,
                headers: r.get(9)?,
                payload: r.get(10)?,
                types: r.get(11)?,
            })
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    rows
}

fn keys(rows: &[Row]) -> Vec<String> {
    rows.iter().map(|r| r.key.clone()).collect()
}

fn expected_keys(seqs: impl IntoIterator<Item = u64>) -> Vec<String> {
    seqs.into_iter().map(|s| format!("ORDERS:{s}")).collect()
}

async fn opened(path: &Path) -> SqliteSink {
    let mut sink = SqliteSink::new(config(path, TABLE));
    sink.open().await.unwrap();
    sink
}

fn assert_transient(result: Result<(), SinkError>, needle: &str) -> String {
    match result {
        Err(SinkError::Transient { message }) => {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
            message
        }
        other => panic!("expected transient containing {needle:?}, got {other:?}"),
    }
}

fn assert_misconfigured(result: Result<(), SinkError>, needles: &[&str]) {
    match result {
        Err(SinkError::Misconfigured { message }) => {
            for n in needles {
                assert!(message.contains(n), "{message:?} lacks {n:?}");
            }
        }
        other => panic!("expected misconfigured, got {other:?}"),
    }
}

fn sqlite_err(code: i32) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some("sqlite says no".into()))
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

// ---------------------------------------------------------------- classification

#[test]
fn classifier_maps_every_listed_code_to_its_class() {
    // (code, permanent?, text the message must contain)
    let table: &[(i32, bool, &str)] = &[
        (ffi::SQLITE_BUSY, false, "busy"),
        (ffi::SQLITE_BUSY_SNAPSHOT, false, "busy"),
        (ffi::SQLITE_LOCKED, false, "busy"),
        (ffi::SQLITE_IOERR, false, "I/O"),
        (ffi::SQLITE_IOERR_WRITE, false, "I/O"),
        (ffi::SQLITE_IOERR_FSYNC, false, "I/O"),
        (ffi::SQLITE_IOERR_NOMEM, false, "I/O"),
        (ffi::SQLITE_CANTOPEN, false, "cannot open"),
        (ffi::SQLITE_READONLY, false, "read-only"),
        (ffi::SQLITE_FULL, false, "full"),
        (ffi::SQLITE_PROTOCOL, false, "locking protocol"),
        (ffi::SQLITE_NOMEM, false, "out of memory"),
        (ffi::SQLITE_CORRUPT, false, "corrupt"),
        (ffi::SQLITE_NOTADB, false, "corrupt"),
        (ffi::SQLITE_ERROR, false, "sqlite"),
        (ffi::SQLITE_INTERRUPT, false, "sqlite"),
        (ffi::SQLITE_PERM, false, "sqlite"),
        (ffi::SQLITE_TOOBIG, true, "size limit"),
        (ffi::SQLITE_CONSTRAINT, true, "constraint"),
        (ffi::SQLITE_CONSTRAINT_CHECK, true, "constraint"),
        (ffi::SQLITE_CONSTRAINT_NOTNULL, true, "constraint"),
        (ffi::SQLITE_CONSTRAINT_UNIQUE, true, "constraint"),
        (ffi::SQLITE_MISMATCH, true, "wrong type"),
    ];
    for &(code, permanent, needle) in table {
        let got = classify(&sqlite_err(code), Some(3));
        match (&got, permanent) {
            (SinkError::Permanent { index, message }, true) => {
                assert_eq!(*index, Some(3), "code {code}");
                assert!(message.contains(needle), "code {code}: {message:?}");
                assert!(message.contains("index 3"), "code {code}: {message:?}");
            }
            (SinkError::Transient { message }, false) => {
                assert!(message.contains(needle), "code {code}: {message:?}");
            }
            _ => panic!("code {code}: got {got:?}, wanted permanent={permanent}"),
        }
        assert!(got.to_string().contains("sqlite says no"), "code {code}");
    }
}

#[test]
fn classifier_handles_errors_without_an_index_or_a_sqlite_code() {
    assert_eq!(
        classify(&sqlite_err(ffi::SQLITE_CONSTRAINT_FOREIGNKEY), None),
        SinkError::Permanent {
            index: None,
            message: "sqlite refused the batch: a table constraint refused it: sqlite says no"
                .into()
        }
    );
    let too_large =
        rusqlite::Error::ToSqlConversionFailure(Box::new(i64::try_from(u64::MAX).unwrap_err()));
    assert!(matches!(
        classify(&too_large, Some(7)),
        SinkError::Permanent { index: Some(7), .. }
    ));
    for outage in [
        rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_IOERR), None),
        rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_ERROR), None),
        rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_PERM), None),
    ] {
        assert_eq!(
            classify(&outage, Some(0)).class(),
            "transient",
            "{outage:?}"
        );
    }
    for unknown in [
        rusqlite::Error::QueryReturnedNoRows,
        rusqlite::Error::InvalidParameterCount(1, 2),
        rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_INTERNAL), None),
        rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_MISUSE), None),
        rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_RANGE), None),
    ] {
        assert_eq!(
            classify(&unknown, Some(0)).class(),
            "unclassified",
            "{unknown:?}"
        );
    }
}

// ---------------------------------------------------------------- schema rules

fn col(name: &str, decl_type: &str, not_null: bool, has_default: bool, pk: i64) -> ColumnInfo {
    ColumnInfo {
        name: name.into(),
        decl_type: decl_type.into(),
        not_null,
        has_default,
        pk,
    }
}

#[test]
fn column_rules_name_missing_and_unfillable_columns() {
    let full: Vec<ColumnInfo> = schema::COLUMNS
        .iter()
        .map(|c| col(&c.to_uppercase(), "", false, false, 0))
        .collect();
    assert_eq!(
        schema::column_problems(&full),
        None,
        "names are case-insensitive"
    );

    let without: Vec<ColumnInfo> = full
        .iter()
        .filter(|c| c.name != "HEADERS" && c.name != "WRITTEN_AT")
        .cloned()
        .collect();
    let problem = schema::column_problems(&without).unwrap();
    assert!(problem.contains("written_at, headers"), "{problem}");

    let mut extra = full.clone();
    extra.push(col("note", "TEXT", false, false, 0));
    extra.push(col("tenant", "TEXT", true, true, 0));
    extra.push(col("id", "integer", true, false, 1));
    assert_eq!(schema::column_problems(&extra), None);
    extra.push(col("owner", "TEXT", true, false, 0));
    let problem = schema::column_problems(&extra).unwrap();
    assert!(problem.contains("owner"), "{problem}");
}

#[test]
fn statements_quote_the_table_name() {
    assert_eq!(schema::quote_ident("order"), "\"order\"");
    assert_eq!(schema::quote_ident("a\"b"), "\"a\"\"b\"");
    let sql = schema::insert_sql("order");
    assert!(
        sql.starts_with("INSERT INTO \"order\" (idempotency_key, "),
        "{sql}"
    );
    assert!(
        sql.ends_with("?16) ON CONFLICT(idempotency_key) DO NOTHING"),
        "{sql}"
    );
    assert!(schema::create_table_sql("order").contains("\"order\""));
}

#[test]
fn a_shared_statement_takes_the_shared_columns_of_every_row_from_the_first() {
    let shared = schema::insert_rows_sql("t", 2, true);
    let own = schema::insert_rows_sql("t", 2, false);
    // Row 2's stream (2nd column), written_at (8th) and lane (12th) are ?2, ?8 and ?12.
    assert!(
        shared.contains("(?17, ?2, ?19, ?20, ?21, ?22, ?23, ?8, ?25, ?26, ?27, ?12, ?29, "),
        "{shared}"
    );
    assert!(!shared.contains("?18") && !shared.contains("?24") && !shared.contains("?28"));
    assert!(
        own.contains("(?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, "),
        "{own}"
    );
    // One row has nothing to share: both shapes are the same statement.
    assert_eq!(
        schema::insert_rows_sql("t", 1, true),
        schema::insert_rows_sql("t", 1, false)
    );
}

// ---------------------------------------------------------------- writing

#[tokio::test(flavor = "multi_thread")]
async fn writes_every_column_and_reads_back_exact_values_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    let envelopes = batch(1..=10);
    let before = OffsetDateTime::now_utc();
    sink.write_batch(&envelopes).await.unwrap();

    let rows = read_rows(&path, TABLE);
    assert_eq!(rows.len(), envelopes.len());
    let written_at = rows[0].written_at.clone();
    let parsed =
        OffsetDateTime::parse(&written_at, &time::format_description::well_known::Rfc3339).unwrap();
    assert!(
        parsed >= before - time::Duration::seconds(1),
        "{written_at}"
    );
    assert_eq!(written_at.len(), "2023-11-14T22:13:20.123456789Z".len());
    for (row, e) in rows.iter().zip(&envelopes) {
        assert_eq!(row.key, e.idempotency_key);
        assert_eq!(row.stream, "ORDERS");
        assert_eq!(row.stream_sequence, e.stream_sequence as i64);
        assert_eq!(row.consumer_sequence, e.stream_sequence as i64 + 100);
        assert_eq!(row.subject, "orders.new");
        assert_eq!(row.delivered, 1);
        assert_eq!(row.published_at, rfc3339(e.published_at));
        assert_eq!(row.written_at, written_at, "one time per batch");
        assert_eq!(row.message_id, e.message_id);
        let headers: serde_json::Value = serde_json::from_str(&row.headers).unwrap();
        assert_eq!(headers, e.headers_json());
        assert_eq!(headers["A"], serde_json::json!(["1", "2"]));
        assert_eq!(row.payload, &e.payload[..]);
        let null_or_text = if e.message_id.is_some() {
            "text"
        } else {
            "null"
        };
        assert_eq!(
            row.types,
            format!("integer,integer,integer,{null_or_text},blob")
        );
    }
    assert_eq!(rows[1].message_id.as_deref(), Some("id-2"));
    assert_eq!(rows[0].published_at, "2023-11-14T22:13:20.123456790Z");
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn trace_ids(path: &Path) -> Vec<(i64, Option<String>)> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT stream_sequence, trace_id FROM jetsink_events ORDER BY stream_sequence")
        .unwrap();
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_traceparent_stores_its_trace_id_and_none_or_an_invalid_one_null() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    // 20 rows: past the first multi-row statement, so every chunk binds the column.
    let mut envelopes = batch(1..=20);
    for e in envelopes.iter_mut().filter(|e| e.stream_sequence % 3 == 0) {
        e.headers
            .push(("traceparent".into(), vec![TRACEPARENT.into()]));
    }
    envelopes[0]
        .headers
        .push(("traceparent".into(), vec!["00-not-a-trace".into()]));
    sink.write_batch(&envelopes).await.unwrap();
    for (seq, trace_id) in trace_ids(&path) {
        let expected = (seq % 3 == 0).then(|| "4bf92f3577b34da6a3ce929d0e0e4736".to_string());
        assert_eq!(trace_id, expected, "row {seq}");
    }
    assert_eq!(trace_ids(&path).len(), 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_from_before_trace_ids_gains_the_column_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let previous = schema::create_table_sql(TABLE).replace("    trace_id TEXT,\n", "");
    assert!(!previous.contains("trace_id"), "{previous}");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&previous).unwrap();
        conn.execute_batch(
            "INSERT INTO jetsink_events (idempotency_key, stream, stream_sequence, \
             consumer_sequence, subject, delivered, published_at, written_at, headers, payload) \
             VALUES ('ORDERS:1', 'ORDERS', 1, 1, 's', 1, 't', 't', '{}', x'00')",
        )
        .unwrap();
    }
    // What validate --online reports, changing nothing.
    let mut probe = SqliteSink::new(config(&path, TABLE));
    match probe.probe().await.unwrap() {
        crate::sinks::contract::Probe::WouldCreate(what) => {
            assert!(what.starts_with("columns trace_id of table"), "{what}")
        }
        other => panic!("expected the column to be added, got {other:?}"),
    }
    let mut sink = opened(&path).await;
    let mut e = envelope(2);
    e.headers
        .push(("traceparent".into(), vec![TRACEPARENT.into()]));
    sink.write_batch(&[e]).await.unwrap();
    assert_eq!(
        trace_ids(&path),
        [
            (1, None),
            (2, Some("4bf92f3577b34da6a3ce929d0e0e4736".to_string()))
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn redelivered_messages_leave_one_row_each_in_first_write_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    let first = batch(1..=5);
    sink.write_batch(&first).await.unwrap();
    sink.write_batch(&first).await.unwrap();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys(1..=5));

    // A redelivery overlapping the first batch, in another order and with a higher
    // delivery count: new keys are appended, existing rows keep their first write.
    let mut second: Vec<Envelope> = (3..=8)
        .rev()
        .map(|s| envelope_with(s, 2, b"again".to_vec()))
        .collect();
    second.rotate_left(1);
    sink.write_batch(&second).await.unwrap();
    let rows = read_rows(&path, TABLE);
    let order: Vec<u64> = vec![1, 2, 3, 4, 5, 7, 6, 8];
    assert_eq!(keys(&rows), expected_keys(order));
    for row in &rows[..5] {
        assert_eq!(row.delivered, 1, "{}", row.key);
        assert_ne!(row.payload, b"again");
    }
    assert_eq!(rows[5].delivered, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_binary_and_large_payloads_round_trip_byte_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    let mib: Vec<u8> = (0..1024 * 1024).map(|i| (i * 31 % 256) as u8).collect();
    let payloads: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0xff, 0xfe, 0x00, 0xc3, 0x28, 0x00, 0x80],
        mib,
        b"\0".to_vec(),
    ];
    let envelopes: Vec<Envelope> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| envelope_with(i as u64 + 1, 1, p.clone()))
        .collect();
    sink.write_batch(&envelopes).await.unwrap();
    let rows = read_rows(&path, TABLE);
    assert_eq!(rows.len(), payloads.len());
    for (row, p) in rows.iter().zip(&payloads) {
        assert!(row.payload == *p, "payload of {} differs", row.key);
        assert!(row.types.ends_with(",blob"), "{}", row.types);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_batch_is_ok_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    sink.write_batch(&[]).await.unwrap();
    assert!(read_rows(&path, TABLE).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn keyword_table_names_work_because_they_are_quoted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = SqliteSink::new(config(&path, "order"));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=2)).await.unwrap();
    assert_eq!(keys(&read_rows(&path, "order")), expected_keys(1..=2));
}

/// A jetsink table whose CHECK constraint refuses payloads of 16 bytes or more.
fn create_table_refusing_long_payloads(path: &Path) {
    let conn = Connection::open(path).unwrap();
    let ddl = schema::create_table_sql(TABLE).replace(
        "payload BLOB NOT NULL",
        "payload BLOB NOT NULL CHECK (length(payload) < 16)",
    );
    conn.execute_batch(&ddl).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_message_is_permanent_with_its_index_and_nothing_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    create_table_refusing_long_payloads(&path);
    let mut sink = opened(&path).await;
    let mut envelopes = batch(1..=3);
    envelopes[1] = envelope_with(2, 1, b"SECRET-PAYLOAD-THAT-IS-TOO-LONG".to_vec());
    match sink.write_batch(&envelopes).await {
        Err(SinkError::Permanent { index, message }) => {
            assert_eq!(index, Some(1));
            assert!(message.contains("CHECK constraint"), "{message}");
            assert!(!message.contains("SECRET"), "payload leaked: {message}");
        }
        other => panic!("expected permanent, got {other:?}"),
    }
    assert!(
        read_rows(&path, TABLE).is_empty(),
        "the batch was rolled back"
    );
    // The connection survives a permanent error: the rest of the batch goes in.
    envelopes.remove(1);
    sink.write_batch(&envelopes).await.unwrap();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys([1, 3]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_row_past_the_first_statement_is_named_by_its_batch_index() {
    use super::insert::ROWS_PER_STATEMENT;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    create_table_refusing_long_payloads(&path);
    let mut sink = opened(&path).await;
    // Two full statements and a shorter last one; the bad row sits inside the second.
    let n = (2 * ROWS_PER_STATEMENT + ROWS_PER_STATEMENT / 2) as u64;
    let bad = ROWS_PER_STATEMENT + ROWS_PER_STATEMENT / 2;
    let mut envelopes = batch(1..=n);
    envelopes[bad] = envelope_with(bad as u64 + 1, 1, b"A-PAYLOAD-THAT-IS-TOO-LONG".to_vec());
    match sink.write_batch(&envelopes).await {
        Err(SinkError::Permanent { index, .. }) => assert_eq!(index, Some(bad)),
        other => panic!("expected permanent, got {other:?}"),
    }
    assert!(
        read_rows(&path, TABLE).is_empty(),
        "the batch was rolled back"
    );
    envelopes.remove(bad);
    sink.write_batch(&envelopes).await.unwrap();
    let expected: Vec<u64> = (1..=n).filter(|&s| s != bad as u64 + 1).collect();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys(expected));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_database_is_transient_and_the_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = SqliteSink::new(SqliteConfig {
        busy_timeout_ms: 50,
        ..config(&path, TABLE)
    });
    sink.open().await.unwrap();
    let mut other = Connection::open(&path).unwrap();
    let lock = other
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    assert_transient(sink.write_batch(&batch(1..=2)).await, "busy");
    drop(lock);
    sink.write_batch(&batch(1..=2)).await.unwrap();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys(1..=2));
}

// ---------------------------------------------------------------- opening

#[tokio::test(flavor = "multi_thread")]
async fn first_open_creates_the_parent_directories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/c/jetsink.db");
    let mut sink = opened(&path).await;
    sink.write_batch(&batch(1..=1)).await.unwrap();
    assert!(path.is_file());
    sink.health().await.unwrap();
    // Reopening an existing database is fine.
    sink.open().await.unwrap();
    sink.write_batch(&batch(2..=2)).await.unwrap();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys(1..=2));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_table_missing_columns_is_misconfigured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE jetsink_events (idempotency_key TEXT PRIMARY KEY, stream TEXT, \
             stream_sequence INTEGER, consumer_sequence INTEGER, subject TEXT, \
             delivered INTEGER, published_at TEXT, message_id TEXT, payload BLOB)",
        )
        .unwrap();
    }
    let mut sink = SqliteSink::new(config(&path, TABLE));
    let path_text = path.display().to_string();
    assert_misconfigured(
        sink.open().await,
        &[TABLE, &path_text, "written_at, headers"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_from_before_message_metadata_gains_its_columns_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE jetsink_events (idempotency_key TEXT PRIMARY KEY NOT NULL, \
             stream TEXT NOT NULL, stream_sequence INTEGER NOT NULL, \
             consumer_sequence INTEGER NOT NULL, subject TEXT NOT NULL, \
             delivered INTEGER NOT NULL, published_at TEXT NOT NULL, written_at TEXT NOT NULL, \
             message_id TEXT, headers TEXT NOT NULL, payload BLOB NOT NULL);
             INSERT INTO jetsink_events VALUES ('OLD:1', 'OLD', 1, 1, 's', 1, 't', 't', NULL, '{}', x'00');",
        )
        .unwrap();
    }
    let mut sink = opened(&path).await;
    let mut e = envelope(2);
    e.priority = Some("urgent".into());
    e.lane = Some("fast".into());
    e.classification = Some("internal".into());
    e.labels = vec!["a".into(), "b;c".into()];
    sink.write_batch(&[e]).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let (old_labels, old_priority): (String, Option<String>) = conn
        .query_row(
            "SELECT labels, priority FROM jetsink_events WHERE idempotency_key = 'OLD:1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((old_labels.as_str(), old_priority), ("[]", None));
    let row: (String, String, String, String) = conn
        .query_row(
            "SELECT priority, lane, classification, labels FROM jetsink_events WHERE stream_sequence = 2",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        row,
        (
            "urgent".into(),
            "fast".into(),
            "internal".into(),
            r#"["a","b;c"]"#.into()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_table_jetsink_cannot_insert_into_is_misconfigured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let without_key = schema::create_table_sql(TABLE).replace(" PRIMARY KEY", "");
    Connection::open(&path)
        .unwrap()
        .execute_batch(&without_key)
        .unwrap();
    assert_misconfigured(
        SqliteSink::new(config(&path, TABLE)).open().await,
        &[TABLE, "PRIMARY KEY or UNIQUE"],
    );

    let other = dir.path().join("other.db");
    let with_required_extra = schema::create_table_sql(TABLE).replace(
        "payload BLOB NOT NULL",
        "payload BLOB NOT NULL, owner TEXT NOT NULL",
    );
    Connection::open(&other)
        .unwrap()
        .execute_batch(&with_required_extra)
        .unwrap();
    assert_misconfigured(
        SqliteSink::new(config(&other, TABLE)).open().await,
        &["owner"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_table_with_extra_columns_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let ddl = schema::create_table_sql(TABLE)
        .replace(" PRIMARY KEY NOT NULL", " NOT NULL UNIQUE")
        .replace(
            "(\n",
            "(\n    id INTEGER PRIMARY KEY NOT NULL, note TEXT,\n",
        );
    Connection::open(&path)
        .unwrap()
        .execute_batch(&ddl)
        .unwrap();
    let mut sink = opened(&path).await;
    sink.write_batch(&batch(1..=3)).await.unwrap();
    sink.write_batch(&batch(1..=3)).await.unwrap();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys(1..=3));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_that_is_a_directory_is_misconfigured() {
    let dir = tempfile::tempdir().unwrap();
    assert_misconfigured(
        SqliteSink::new(config(dir.path(), TABLE)).open().await,
        &["is a directory"],
    );
}

// ---------------------------------------------------------------- files moved or removed

#[tokio::test(flavor = "multi_thread")]
async fn moving_the_directory_away_is_transient_and_moving_it_back_heals() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("db");
    let away = dir.path().join("moved");
    let path = home.join("jetsink.db");
    let mut sink = opened(&path).await;
    sink.write_batch(&batch(1..=3)).await.unwrap();

    std::fs::rename(&home, &away).unwrap();
    assert_transient(sink.write_batch(&batch(4..=6)).await, "no longer reachable");
    assert_transient(sink.write_batch(&batch(4..=6)).await, "disappeared");
    assert_transient(sink.health().await, "disappeared");
    assert!(!home.exists(), "nothing was created at the old path");
    assert_eq!(
        keys(&read_rows(&away.join("jetsink.db"), TABLE)),
        expected_keys(1..=3),
        "nothing of the failed batches was written"
    );

    std::fs::rename(&away, &home).unwrap();
    sink.write_batch(&batch(4..=6)).await.unwrap();
    sink.health().await.unwrap();
    assert_eq!(keys(&read_rows(&path, TABLE)), expected_keys(1..=6));
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_the_database_is_transient_and_never_starts_an_empty_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    sink.write_batch(&batch(1..=3)).await.unwrap();
    for p in [path.clone(), sidecar(&path, "-wal"), sidecar(&path, "-shm")] {
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("removing {}: {e}", p.display()),
        }
    }

    assert_transient(sink.write_batch(&batch(4..=4)).await, "no longer reachable");
    for _ in 0..3 {
        assert_transient(sink.write_batch(&batch(4..=4)).await, "disappeared");
    }
    assert_transient(sink.health().await, "disappeared");
    assert_transient(sink.open().await, "restart jetsink");
    assert!(!path.exists(), "no new database was created");
}

#[tokio::test(flavor = "multi_thread")]
async fn removing_only_the_wal_is_noticed_before_a_commit_is_acked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    sink.write_batch(&batch(1..=2)).await.unwrap();
    std::fs::remove_file(sidecar(&path, "-wal")).unwrap();
    assert_transient(sink.write_batch(&batch(3..=3)).await, "-wal");
    // The reopen starts a fresh WAL next to the same database.
    sink.write_batch(&batch(3..=3)).await.unwrap();
    assert!(keys(&read_rows(&path, TABLE)).contains(&"ORDERS:3".to_string()));
}

#[tokio::test(flavor = "multi_thread")]
async fn health_opens_a_closed_sink_and_checks_an_open_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/jetsink.db");
    let mut sink = SqliteSink::new(config(&path, TABLE));
    assert!(!path.exists(), "new does no I/O");
    sink.health().await.unwrap();
    assert!(path.is_file());
    sink.health().await.unwrap();
    sink.write_batch(&batch(1..=1)).await.unwrap();
}

/// Instances starting together on one database in rollback mode each switch it to WAL;
/// SQLite answers the loser of that race `SQLITE_BUSY` at once (without the busy handler),
/// which made a worker of tests/job_queue.rs exit 69 at start. Every one of them must
/// configure its connection.
#[test]
fn connections_switching_one_rollback_database_to_wal_together_all_succeed() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("race-{round}.db"));
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER)")
            .unwrap();
        let barrier = std::sync::Barrier::new(4);
        let cfg = config(&path, TABLE);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let conn = Connection::open(&path).unwrap();
                        barrier.wait();
                        super::sink::configure(&conn, &cfg)
                    })
                })
                .collect();
            for h in handles {
                let result = h.join().unwrap();
                assert!(result.is_ok(), "round {round}: {result:?}");
            }
        });
        let mode: String = Connection::open(&path)
            .unwrap()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }
}

/// A statement journal (one per multi-row INSERT of a batch) stays in memory instead of
/// spilling to a temporary file: `temp_store` is MEMORY on the sink's connection.
#[test]
fn configure_keeps_statement_journals_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let conn = Connection::open(&path).unwrap();
    super::sink::configure(&conn, &config(&path, TABLE)).unwrap();
    let temp_store: i64 = conn
        .query_row("PRAGMA temp_store", [], |r| r.get(0))
        .unwrap();
    assert_eq!(temp_store, 2, "MEMORY");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_database_gets_the_page_size_and_an_existing_one_keeps_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let page_size = |path: &Path| -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    };
    for wanted in [32_768u32, 65_536, 8_192] {
        let path = dir.path().join(format!("new-{wanted}.db"));
        let mut sink = SqliteSink::new(SqliteConfig {
            page_size: wanted,
            ..config(&path, TABLE)
        });
        sink.open().await.unwrap();
        sink.write_batch(&batch(1..=3)).await.unwrap();
        assert_eq!(page_size(&path), i64::from(wanted));
    }
    // A database created before, with SQLite's default, is written as it is.
    let path = dir.path().join("old.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE other (x INTEGER)")
        .unwrap();
    assert_eq!(page_size(&path), 4_096);
    let mut sink = SqliteSink::new(config(&path, TABLE));
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=3)).await.unwrap();
    assert_eq!(page_size(&path), 4_096);
}

#[test]
fn a_page_size_sqlite_cannot_take_is_refused_by_name() {
    use crate::sinks::settings::DestinationSettings;
    let path = Path::new("/tmp/x.db");
    for bad in [0u32, 256, 1_000, 131_072] {
        let problems = SqliteConfig {
            page_size: bad,
            ..config(path, TABLE)
        }
        .problems();
        assert!(
            problems
                .iter()
                .any(|(k, m)| k == "page_size" && m.contains(&bad.to_string())),
            "{bad}: {problems:?}"
        );
    }
    assert!(config(path, TABLE).problems().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scratch_table_is_written_beside_the_configured_one_and_dropped_leaving_it() {
    use crate::sinks::settings::DestinationSettings;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut configured = opened(&path).await;
    configured.write_batch(&batch(1..=3)).await.unwrap();
    let scratch = config(&path, TABLE)
        .with_scratch_table("jetsink_bench_1_2_r1_pipeline")
        .expect("SQLite always writes its own layout");
    let mut sink = SqliteSink::new(scratch);
    sink.open().await.unwrap();
    sink.write_batch(&batch(1..=5)).await.unwrap();
    assert_eq!(read_rows(&path, "jetsink_bench_1_2_r1_pipeline").len(), 5);
    sink.drop_table().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'jetsink_bench%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "the scratch table is gone");
    assert_eq!(
        read_rows(&path, TABLE).len(),
        3,
        "the configured table keeps its rows"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn each_row_keeps_its_own_lane_and_stream_whether_a_statement_shares_them_or_not() {
    use super::insert::ROWS_PER_STATEMENT;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jetsink.db");
    let mut sink = opened(&path).await;
    let n = (3 * ROWS_PER_STATEMENT) as u64;
    let mut envelopes = batch(1..=n);
    // The first statement's rows all in one lane (shared), the second's alternating
    // between two lanes and no lane, the third's with one row from another stream.
    for (k, e) in envelopes.iter_mut().enumerate() {
        e.lane = match (k / ROWS_PER_STATEMENT, k % 3) {
            (0, _) => Some("urgent".into()),
            (1, 0) => None,
            (1, 1) => Some("urgent".into()),
            _ => Some("routine".into()),
        };
    }
    let odd = 2 * ROWS_PER_STATEMENT + 5;
    envelopes[odd].stream = "OTHER".into();
    sink.write_batch(&envelopes).await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let mut stmt = conn
        .prepare("SELECT stream_sequence, stream, lane, written_at FROM jetsink_events ORDER BY stream_sequence")
        .unwrap();
    let rows: Vec<(u64, String, Option<String>, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), envelopes.len());
    for (row, e) in rows.iter().zip(&envelopes) {
        assert_eq!(row.0, e.stream_sequence);
        assert_eq!((&row.1, &row.2), (&e.stream, &e.lane), "row {}", row.0);
        assert_eq!(row.3, rows[0].3, "one commit time per batch");
    }
}
