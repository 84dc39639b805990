//! The MySQL/MariaDB destination against the real server on 127.0.0.1:3306 (user `root`,
//! empty password): the shared database conformance suite (`common::conformance`:
//! idempotency, what is refused and how, outages, a mapped user table, SIGKILL mid-drain,
//! start-up exit codes), and what only MySQL has: its default layout's types and byte-exact
//! keys, a batch split into several statements inside one transaction, and data errors
//! that name their row.
//!
//! Every test works in its own database, dropped on `Drop`. A missing server fails the
//! test with the command that starts it.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::conformance::{
    on_own_runtime, order, orders_columns, unique_name, OrderRow, TestDatabase,
};
use common::database::*;
use jetsink::envelope::Envelope;
use jetsink::sinks::mysql::MysqlConfig;
use jetsink::sinks::mysql::MysqlSink;
use jetsink::sinks::{Sink, SinkError};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use serde_json::json;
use time::OffsetDateTime;

const START: &str = "MariaDB is not reachable on 127.0.0.1:3306 as root with an empty password; \
     start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd`";

async fn connect(database: Option<&str>) -> Conn {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(3306)
        .user(Some("root"))
        .db_name(database);
    tokio::time::timeout(Duration::from_secs(5), Conn::new(opts))
        .await
        .unwrap_or_else(|_| panic!("{START} (timed out)"))
        .unwrap_or_else(|e| panic!("{START} ({e})"))
}

/// A database of its own for one test, dropped at the end.
struct My {
    name: String,
}

impl My {
    async fn conn(&self) -> Conn {
        connect(Some(&self.name)).await
    }
}

impl Drop for My {
    fn drop(&mut self) {
        let name = self.name.clone();
        on_own_runtime(async move {
            let mut c = connect(None).await;
            let _ = c
                .query_drop(format!("DROP DATABASE IF EXISTS {name}"))
                .await;
            let _ = c.disconnect().await;
        });
    }
}

/// Drops a user (server-wide) at the end of the test.
struct DropUser(String);

impl Drop for DropUser {
    fn drop(&mut self) {
        let user = self.0.clone();
        on_own_runtime(async move {
            let mut c = connect(None).await;
            let _ = c
                .query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"))
                .await;
            let _ = c.disconnect().await;
        });
    }
}

impl TestDatabase for My {
    type WriteLock = Conn;

    async fn lock_writes(&self, table: &str) -> Conn {
        let mut c = self.conn().await;
        // Held by this session until it ends, which dropping the connection does.
        c.query_drop(format!("LOCK TABLES {table} READ"))
            .await
            .expect("lock the table");
        c
    }

    fn lock_waiters() -> &'static str {
        "information_schema.PROCESSLIST WHERE DB = DATABASE() AND STATE LIKE 'Waiting for table%'"
    }

    async fn record_connections(&self, table: &str) {
        self.exec("CREATE TABLE seen (seq BIGINT UNSIGNED, conn BIGINT UNSIGNED)")
            .await;
        self.exec(&format!(
            "CREATE TRIGGER record_connection AFTER INSERT ON {table} FOR EACH ROW \
             INSERT INTO seen VALUES (NEW.stream_sequence, CONNECTION_ID())"
        ))
        .await;
    }

    type Config = MysqlConfig;
    type Sink = MysqlSink;
    type UserGuard = DropUser;

    const KIND: &'static str = "mysql";
    const STREAM: &'static str = "MY";
    const PORT: u16 = 3306;
    const USER: &'static str = "root";
    const JSON_PAYLOAD: &'static str = "json";
    const BYTES_PAYLOAD: &'static str = "blob";
    // Bulk executions (MariaDB's default) and the multi-row statements MySQL runs.
    const WRITE_PATHS: &'static [&'static str] = &["{}", r#"{"bulk": false}"#];
    // 5000 rows of 16 columns need two statements (65,535 placeholders): one transaction.
    const IDEMPOTENCY_EXTRA: &'static str = "{}";
    const BIG_BATCH: u64 = 5000;
    const REWRITE_CHUNK: usize = usize::MAX;
    const CHECK_VIOLATION: &'static str = "4025";
    const CHECK_NAME: &'static str = "amount_nonneg";
    const UNKNOWN_DATABASE: &'static str = "1049";
    const NO_PRIVILEGE: &'static [&'static str] = &["1142"];
    const BOOLEAN_TYPE: &'static str = "tinyint(1)";
    const TIMESTAMP: &'static str = "DATETIME(6)";

    async fn create(tag: &str) -> My {
        let name = unique_name(tag);
        connect(None)
            .await
            .query_drop(format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        My { name }
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn exec(&self, sql: &str) {
        self.conn().await.query_drop(sql).await.expect(sql);
    }

    async fn count(&self, from: &str) -> i64 {
        let mut c = self.conn().await;
        c.query_first::<i64, _>(format!("SELECT COUNT(*) FROM {from}"))
            .await
            .ok()
            .flatten()
            .unwrap_or(-1)
    }

    fn sink(config: MysqlConfig) -> MysqlSink {
        MysqlSink::new(config)
    }

    async fn orders_table(&self, name: &str) {
        self.exec(&format!(
            "CREATE TABLE {name} (
                order_id BIGINT PRIMARY KEY,
                amount DECIMAL(10,2) NOT NULL,
                customer VARCHAR(20),
                paid BOOLEAN,
                tags JSON,
                subject TEXT NOT NULL,
                seq BIGINT UNSIGNED NOT NULL,
                published DATETIME(6) NOT NULL,
                note TEXT,
                created TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
                CONSTRAINT amount_nonneg CHECK (amount >= 0)
            )"
        ))
        .await;
    }

    fn rename_sql(from: &str, to: &str) -> String {
        format!("RENAME TABLE {from} TO {to}")
    }

    fn json_payload_is(n: i64) -> String {
        format!("JSON_VALUE(payload, '$.n') = {n}")
    }

    fn recent(column: &str) -> String {
        format!(
            "{column} > UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE \
             AND {column} < UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE"
        )
    }

    async fn create_reader(&self, user: &str) -> DropUser {
        let guard = DropUser(user.to_string());
        self.exec(&format!("CREATE USER '{user}'@'%'")).await;
        self.exec(&format!(
            "GRANT SELECT ON {}.events TO '{user}'@'%'",
            self.name
        ))
        .await;
        guard
    }

    async fn allow_writes(&self, user: &str, allowed: bool) {
        let name = &self.name;
        self.exec(&if allowed {
            format!("GRANT INSERT, UPDATE ON {name}.events TO '{user}'@'%'")
        } else {
            format!("REVOKE INSERT, UPDATE ON {name}.events FROM '{user}'@'%'")
        })
        .await;
    }

    async fn order_42(&self) -> OrderRow {
        type Row = (
            String,
            Option<String>,
            Option<i64>,
            Option<String>,
            String,
            u64,
            Option<String>,
        );
        let r: Option<Row> = self
            .conn()
            .await
            .query_first(
                "SELECT CAST(amount AS CHAR), customer, paid, tags, subject, seq, note \
                 FROM orders WHERE order_id = 42",
            )
            .await
            .unwrap();
        let r = r.expect("row 42");
        OrderRow {
            amount: r.0,
            customer: r.1,
            paid: r.2.map(|p| p != 0),
            tags: serde_json::from_str(r.3.as_deref().unwrap_or("null")).unwrap(),
            subject: r.4,
            seq: r.5 as i64,
            note: r.6,
        }
    }
}

async fn opened(config: MysqlConfig) -> MysqlSink {
    let mut sink = MysqlSink::new(config);
    sink.open().await.expect("open");
    sink
}

crate::conformance_suite!(My);

// ---------------------------------------------------------------- MySQL only

#[tokio::test(flavor = "multi_thread")]
async fn default_table_is_created_and_rows_hold_every_field() {
    let db = My::create("layout").await;
    let mut sink = opened(db.config(json!({}))).await;
    let mut batch = json_batch(1..=3);
    batch[1].payload = Bytes::from_static(b"\x00\xffnot json");
    batch[2].message_id = None;
    sink.write_batch(&batch).await.unwrap();
    let mut c = db.conn().await;
    type Row = (
        String,
        String,
        u64,
        u64,
        String,
        u64,
        String,
        String,
        Option<String>,
    );
    let rows: Vec<Row> = c
        .query(
            "SELECT idempotency_key, stream, stream_sequence, consumer_sequence, subject, delivered, \
             DATE_FORMAT(published_at, '%Y-%m-%dT%H:%i:%s.%f'), \
             DATE_FORMAT(written_at, '%Y-%m-%d'), message_id FROM events ORDER BY stream_sequence",
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let r = &rows[0];
    assert_eq!(
        (&r.0[..], &r.1[..], r.2, r.3, &r.4[..], r.5),
        ("ORDERS:1", "ORDERS", 1, 101, "orders.new", 1)
    );
    assert_eq!(r.6, "2023-11-14T22:13:20.123457", "UTC, microseconds");
    let today = OffsetDateTime::now_utc().date();
    assert_eq!(
        r.7,
        format!(
            "{:04}-{:02}-{:02}",
            today.year(),
            u8::from(today.month()),
            today.day()
        )
    );
    assert_eq!(r.8.as_deref(), Some("id-1"));
    assert_eq!(rows[2].8, None);
    type Rest = (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
        Vec<u8>,
        Option<String>,
    );
    let rest: Vec<Rest> = c
        .query(
            "SELECT headers, priority, lane, classification, labels, payload, trace_id \
             FROM events ORDER BY stream_sequence",
        )
        .await
        .unwrap();
    assert_eq!(rest[0].6, None, "no traceparent header");
    let headers: serde_json::Value = serde_json::from_str(&rest[0].0).unwrap();
    assert_eq!(
        headers,
        json!({"A": ["1", "2"], "B": ["x"], "Nats-Msg-Id": ["id-1"]})
    );
    assert_eq!(rest[0].1.as_deref(), Some("high"));
    assert_eq!((rest[0].2.clone(), rest[0].3.clone()), (None, None));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&rest[0].4).unwrap(),
        json!(["a", "b"])
    );
    assert_eq!(rest[0].5, br#"{"n":1}"#);
    assert_eq!(rest[1].5, b"\x00\xffnot json");
    // Keys compare byte-exactly: "A" and "a" are different messages.
    let mut upper = json_batch(4..=4);
    upper[0].idempotency_key = "K".into();
    let mut lower = json_batch(5..=5);
    lower[0].idempotency_key = "k".into();
    sink.write_batch(&upper).await.unwrap();
    sink.write_batch(&lower).await.unwrap();
    assert_eq!(db.count("events").await, 5);
    sink.health().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_in_a_later_bulk_execution_rolls_back_the_whole_batch_and_names_the_row() {
    later_command_fails_whole_batch(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_in_a_later_statement_rolls_back_the_whole_batch_and_names_the_row() {
    later_command_fails_whole_batch(false).await;
}

/// A batch split into two commands (bulk executions, or multi-row statements with
/// `bulk: false`) inside one transaction, failing in the second.
async fn later_command_fails_whole_batch(bulk: bool) {
    let db = My::create("rollback").await;
    db.exec("CREATE TABLE small (id BIGINT PRIMARY KEY, v TINYINT NOT NULL, w LONGBLOB)")
        .await;
    let cfg = db.config(json!({"table": "small", "bulk": bulk, "columns": {"id": "$stream_sequence", "v": "/v", "w": "$payload"}}));
    let mut sink = opened(cfg).await;
    // 20 kB payloads: a 4 MiB statement budget splits 300 rows into two statements.
    let pad = "x".repeat(20_000);
    let mut batch: Vec<Envelope> = (1..=300)
        .map(|i| envelope(i, format!(r#"{{"v":1,"pad":"{pad}"}}"#).as_bytes()))
        .collect();
    batch[250] = envelope(251, format!(r#"{{"v":1000,"pad":"{pad}"}}"#).as_bytes());
    match sink.write_batch(&batch).await {
        Err(SinkError::Permanent {
            index: Some(250),
            message,
        }) => {
            assert!(message.contains("1264"), "{message}");
        }
        other => panic!("expected a permanent error naming index 250, got {other:?}"),
    }
    assert_eq!(
        db.count("small").await,
        0,
        "the first statement was rolled back too"
    );
    batch.remove(250);
    sink.write_batch(&batch).await.unwrap();
    assert_eq!(db.count("small").await, 299);
}

#[tokio::test(flavor = "multi_thread")]
async fn range_and_type_errors_name_their_row_in_a_bulk_execution() {
    errors_name_their_row(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn range_and_type_errors_name_their_row_in_a_multi_row_statement() {
    errors_name_their_row(false).await;
}

async fn errors_name_their_row(bulk: bool) {
    let db = My::create("range").await;
    db.orders_table("orders").await;
    let mut sink =
        opened(db.config(json!({"table": "orders", "bulk": bulk, "columns": orders_columns()})))
            .await;
    let mut batch: Vec<Envelope> = (1..=5).map(|i| order(i, i as i64, "1.5")).collect();
    // Out of range: MySQL names the row, so the index is exact in a multi-row batch.
    batch[2] = order(3, 3, "123456789012");
    match sink.write_batch(&batch).await {
        Err(SinkError::Permanent {
            index: Some(2),
            message,
        }) => {
            assert!(message.contains("1264"), "{message}")
        }
        other => panic!("expected a permanent error at index 2, got {other:?}"),
    }
    // A string where a number belongs is an error in strict mode, not a silent 0.
    batch[2] = order(3, 3, "\"lots\"");
    match sink.write_batch(&batch).await {
        Err(SinkError::Permanent { index, message }) => {
            assert_eq!(index, Some(2), "{message}");
            assert!(!message.contains("lots"), "no values in errors: {message}");
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
    assert_eq!(db.count("orders").await, 0, "nothing of either batch");
    batch.remove(2);
    sink.write_batch(&batch).await.unwrap();
    assert_eq!(db.count("orders").await, 4);
}
