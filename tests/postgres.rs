//! The PostgreSQL destination against the real server on 127.0.0.1:5432 (user `postgres`,
//! trust auth): the shared database conformance suite (`common::conformance`: idempotency
//! on both write paths, what is refused and how, outages, a mapped user table, SIGKILL
//! mid-drain, start-up exit codes), and what only PostgreSQL has: its default layout's
//! types, an upsert naming one key thrice on the COPY and INSERT paths, and a write slower
//! than AckWait.
//!
//! Every test works in its own database, dropped on `Drop` (with `FORCE`, so a killed
//! daemon's connections do not keep it). A missing server fails the test with the command
//! that starts it.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::conformance::{on_own_runtime, OrderRow, TestDatabase};
use common::database::*;
use common::*;
use jetsink::envelope::Envelope;
use jetsink::sinks::postgres::PostgresConfig;
use jetsink::sinks::postgres::PostgresSink;
use jetsink::sinks::{Sink, SinkError};
use serde_json::json;
use time::OffsetDateTime;

use common::pg::{pg_connect as connect, PgDatabase};

/// A database of its own for one test, dropped at the end.
type Pg = PgDatabase;

/// Drops a role (cluster-wide, so after the databases it has privileges in).
pub struct DropRole(String);

impl Drop for DropRole {
    fn drop(&mut self) {
        let role = self.0.clone();
        on_own_runtime(async move {
            let _ = connect("postgres")
                .await
                .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
                .await;
        });
    }
}

impl TestDatabase for Pg {
    type WriteLock = tokio_postgres::Client;

    async fn lock_writes(&self, table: &str) -> tokio_postgres::Client {
        let c = self.client().await;
        // SHARE conflicts with the ROW EXCLUSIVE lock INSERT and COPY take; it is held
        // until the transaction ends, which dropping the client does.
        c.batch_execute(&format!("BEGIN; LOCK TABLE {table} IN SHARE MODE"))
            .await
            .expect("lock the table");
        c
    }

    fn lock_waiters() -> &'static str {
        "pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    }

    async fn record_connections(&self, table: &str) {
        self.exec(&format!(
            "CREATE TABLE seen (seq bigint, conn int); \
             CREATE FUNCTION record_connection() RETURNS trigger AS $$ BEGIN \
             INSERT INTO seen VALUES (NEW.stream_sequence, pg_backend_pid()); RETURN NEW; END $$ \
             LANGUAGE plpgsql; \
             CREATE TRIGGER record_connection AFTER INSERT ON {table} FOR EACH ROW \
             EXECUTE FUNCTION record_connection();"
        ))
        .await;
    }

    type Config = PostgresConfig;
    type Sink = PostgresSink;
    type UserGuard = DropRole;

    const KIND: &'static str = "postgres";
    const STREAM: &'static str = "PG";
    const PORT: u16 = 5432;
    const USER: &'static str = "postgres";
    const JSON_PAYLOAD: &'static str = "jsonb";
    const BYTES_PAYLOAD: &'static str = "bytea";
    // The multi-row INSERT, COPY straight into the table, COPY through the staging table.
    const WRITE_PATHS: &'static [&'static str] = &[
        r#"{"copy_threshold": 0}"#,
        r#"{"copy_threshold": 2}"#,
        r#"{"copy_threshold": 2, "direct_copy": false}"#,
    ];
    // 100 rows take the COPY path (threshold 64), 10 rows the multi-row INSERT; rewrites of
    // 80 and 30 rows take one path each.
    const IDEMPOTENCY_EXTRA: &'static str = r#"{"copy_threshold": 64}"#;
    const BIG_BATCH: u64 = 100;
    const REWRITE_CHUNK: usize = 80;
    const CHECK_VIOLATION: &'static str = "23514";
    const CHECK_NAME: &'static str = "orders_amount_check";
    const UNKNOWN_DATABASE: &'static str = "3D000";
    const NO_PRIVILEGE: &'static [&'static str] = &["42501", "insufficient_privilege"];
    const BOOLEAN_TYPE: &'static str = "boolean";
    const TIMESTAMP: &'static str = "timestamptz";

    async fn create(tag: &str) -> Pg {
        PgDatabase::create(tag).await
    }

    fn name(&self) -> &str {
        &self.name
    }

    async fn exec(&self, sql: &str) {
        self.client().await.batch_execute(sql).await.expect(sql);
    }

    async fn count(&self, from: &str) -> i64 {
        self.client()
            .await
            .query_one(&format!("SELECT COUNT(*) FROM {from}"), &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or(-1)
    }

    fn sink(config: PostgresConfig) -> PostgresSink {
        PostgresSink::new(config)
    }

    async fn orders_table(&self, name: &str) {
        self.exec(&format!(
            "CREATE TABLE {name} (
                order_id bigint PRIMARY KEY,
                amount numeric(10,2) NOT NULL CHECK (amount >= 0),
                customer varchar(20),
                paid boolean,
                tags jsonb,
                subject text NOT NULL,
                seq bigint NOT NULL,
                published timestamptz NOT NULL,
                note text,
                created timestamptz NOT NULL DEFAULT now()
            )"
        ))
        .await;
    }

    fn rename_sql(from: &str, to: &str) -> String {
        format!("ALTER TABLE {from} RENAME TO {to}")
    }

    fn json_payload_is(n: i64) -> String {
        format!(r#"payload = '{{"n": {n}}}'::jsonb"#)
    }

    fn recent(column: &str) -> String {
        format!(
            "{column} > now() - interval '10 minutes' AND {column} < now() + interval '1 minute'"
        )
    }

    async fn create_reader(&self, user: &str) -> DropRole {
        self.exec(&format!(
            "CREATE ROLE {user} LOGIN; GRANT SELECT ON events TO {user}"
        ))
        .await;
        DropRole(user.to_string())
    }

    async fn allow_writes(&self, user: &str, allowed: bool) {
        self.exec(&if allowed {
            format!("GRANT INSERT ON events TO {user}")
        } else {
            format!("REVOKE INSERT ON events FROM {user}")
        })
        .await;
    }

    async fn order_42(&self) -> OrderRow {
        let r = self
            .client()
            .await
            .query_one(
                "SELECT amount::text, customer, paid, tags, subject, seq, note \
                 FROM orders WHERE order_id = 42",
                &[],
            )
            .await
            .expect("row 42");
        OrderRow {
            amount: r.get(0),
            customer: r.get(1),
            paid: r.get(2),
            tags: r.get(3),
            subject: r.get(4),
            seq: r.get(5),
            note: r.get(6),
        }
    }
}

async fn opened(config: PostgresConfig) -> PostgresSink {
    let mut sink = PostgresSink::new(config);
    sink.open().await.expect("open");
    sink
}

crate::conformance_suite!(Pg);

// ---------------------------------------------------------------- PostgreSQL only

#[tokio::test(flavor = "multi_thread")]
async fn default_table_is_created_and_rows_hold_every_field() {
    let db = Pg::create("layout").await;
    let mut sink = opened(db.config(json!({}))).await;
    let mut batch = json_batch(1..=3);
    batch[1].payload = Bytes::from_static(b"\x00\xffnot json");
    batch[2].message_id = None;
    sink.write_batch(&batch).await.unwrap();
    let c = db.client().await;
    let rows = c
        .query(
            "SELECT idempotency_key, stream, stream_sequence, consumer_sequence, subject, delivered, \
             published_at, written_at, message_id, headers, priority, lane, classification, labels, \
             payload, trace_id FROM events ORDER BY stream_sequence",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 3);
    let r = &rows[0];
    assert_eq!(r.get::<_, String>(0), "ORDERS:1");
    assert_eq!(r.get::<_, String>(1), "ORDERS");
    assert_eq!(r.get::<_, i64>(2), 1);
    assert_eq!(r.get::<_, i64>(3), 101);
    assert_eq!(r.get::<_, String>(4), "orders.new");
    assert_eq!(r.get::<_, i64>(5), 1);
    assert_eq!(r.get::<_, OffsetDateTime>(6), batch[0].published_at);
    let written: OffsetDateTime = r.get(7);
    assert!((OffsetDateTime::now_utc() - written).whole_seconds().abs() < 60);
    assert_eq!(r.get::<_, Option<String>>(8).as_deref(), Some("id-1"));
    assert_eq!(
        r.get::<_, serde_json::Value>(9),
        json!({"A": ["1", "2"], "B": ["x"], "Nats-Msg-Id": ["id-1"]})
    );
    assert_eq!(r.get::<_, Option<String>>(10).as_deref(), Some("high"));
    assert_eq!(r.get::<_, Option<String>>(11), None);
    assert_eq!(r.get::<_, Option<String>>(12), None);
    assert_eq!(r.get::<_, serde_json::Value>(13), json!(["a", "b"]));
    assert_eq!(r.get::<_, Vec<u8>>(14), br#"{"n":1}"#);
    assert_eq!(rows[1].get::<_, Vec<u8>>(14), b"\x00\xffnot json");
    assert_eq!(rows[2].get::<_, Option<String>>(8), None);
    assert_eq!(
        r.get::<_, Option<String>>(15),
        None,
        "no traceparent header"
    );
    let types: Vec<String> = c
        .query(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
             WHERE attrelid = 'events'::regclass AND attnum > 0 ORDER BY attnum",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        types,
        [
            "text",
            "text",
            "bigint",
            "bigint",
            "text",
            "bigint",
            "timestamp with time zone",
            "timestamp with time zone",
            "text",
            "jsonb",
            "text",
            "text",
            "text",
            "jsonb",
            "text",
            "bytea"
        ]
    );
    sink.health().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_with_one_key_thrice_in_a_batch_keeps_the_newest_on_the_copy_and_insert_paths() {
    let db = Pg::create("twice").await;
    let mut cfg = db.config(json!({"mode": "upsert"}));
    for copy_threshold in [2u32, 0] {
        cfg.copy_threshold = copy_threshold;
        let table = format!("events_{copy_threshold}");
        cfg.table = table.clone();
        let mut sink = opened(cfg.clone()).await;
        // Same idempotency key (a Nats-Msg-Id key) for three messages of one batch, the
        // newest (the greatest stream sequence, the layout's order) in the middle.
        let mut batch = json_batch(1..=5);
        batch.swap(1, 2);
        for e in &mut batch[..3] {
            e.idempotency_key = "same".into();
        }
        batch[1].payload = Bytes::from(format!("newest-{copy_threshold}"));
        sink.write_batch(&batch).await.unwrap();
        let c = db.client().await;
        let row = c
            .query_one(
                &format!(
                    "SELECT payload, stream_sequence FROM {table} WHERE idempotency_key = 'same'"
                ),
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            row.get::<_, Vec<u8>>(0),
            format!("newest-{copy_threshold}").as_bytes()
        );
        assert_eq!(row.get::<_, i64>(1), 3);
        assert_eq!(db.count(&table).await, 3);
    }
}

/// Records, per row the table receives, which statement wrote it: `current_query()` in a
/// row trigger is the top-level statement's text.
const RECORD_STATEMENT: &str = "CREATE TABLE seen (key text, how text); \
     CREATE FUNCTION record_statement() RETURNS trigger AS $$ BEGIN \
     INSERT INTO seen VALUES (NEW.idempotency_key, left(current_query(), 4)); RETURN NEW; END $$ \
     LANGUAGE plpgsql; \
     CREATE TRIGGER record AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION record_statement();";

/// A mapped `bigint` column fed by a JSON pointer: its values are sent as text and cast by
/// the `INSERT`; a batch whose values all read as integers goes by binary `COPY` as
/// `int8` instead, and one with any other form (`"+7"`) by the `INSERT`, which reads it
/// as PostgreSQL does.
#[tokio::test(flavor = "multi_thread")]
async fn a_json_integer_into_a_bigint_column_goes_by_copy_and_other_forms_by_insert() {
    let db = Pg::create("direct_int").await;
    db.exec(
        "CREATE TABLE orders_n (id bigint PRIMARY KEY, n bigint); \
         CREATE TABLE seen (key text, how text); \
         CREATE FUNCTION record_statement() RETURNS trigger AS $$ BEGIN \
         INSERT INTO seen VALUES (NEW.id::text, left(current_query(), 4)); RETURN NEW; END $$ \
         LANGUAGE plpgsql; \
         CREATE TRIGGER record AFTER INSERT ON orders_n FOR EACH ROW EXECUTE FUNCTION record_statement();",
    )
    .await;
    let seen = |how: &'static str| {
        let db = &db;
        async move { db.count(&format!("seen WHERE how = '{how}'")).await }
    };
    let cfg =
        db.config(json!({"table": "orders_n", "columns": {"id": "$stream_sequence", "n": "/n"}}));
    let mut sink = opened(cfg).await;
    // Integers (one negative, one the largest int8, one as a JSON string) and a missing
    // value: every row by COPY.
    let payloads = [
        r#"{"n":1}"#,
        r#"{"n":-42}"#,
        r#"{"n":9223372036854775807}"#,
        r#"{"n":"17"}"#,
        r#"{}"#,
    ];
    let batch: Vec<Envelope> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| envelope(i as u64 + 1, p.as_bytes()))
        .collect();
    sink.write_batch(&batch).await.unwrap();
    assert_eq!((seen("COPY").await, seen("INSE").await), (5, 0));
    // "+7" is an integer to PostgreSQL but not in the form both read alike: the batch
    // goes by the INSERT, whose cast stores 7.
    let batch = vec![envelope(6, br#"{"n":6}"#), envelope(7, br#"{"n":"+7"}"#)];
    sink.write_batch(&batch).await.unwrap();
    assert_eq!((seen("COPY").await, seen("INSE").await), (5, 2));
    let sum = db
        .count(
            "orders_n WHERE (id = 1 AND n = 1) OR (id = 2 AND n = -42) \
                OR (id = 3 AND n = 9223372036854775807) OR (id = 4 AND n = 17) \
                OR (id = 5 AND n IS NULL) OR (id = 6 AND n = 6) OR (id = 7 AND n = 7)",
        )
        .await;
    assert_eq!(sum, 7, "every value stored as the INSERT's cast reads it");
    // A value too large for int8 is refused by the server's cast, naming nothing of it.
    let batch = vec![
        envelope(8, br#"{"n":8}"#),
        envelope(9, br#"{"n":92233720368547758070}"#),
    ];
    match sink.write_batch(&batch).await {
        Err(SinkError::Permanent { message, .. }) => {
            assert!(!message.contains("92233720368547758070"), "{message}")
        }
        other => panic!("expected a permanent refusal, got {other:?}"),
    }
    assert_eq!(db.count("orders_n").await, 7);
}

#[tokio::test(flavor = "multi_thread")]
async fn direct_copy_writes_a_batch_with_one_copy_and_a_redelivered_one_with_insert() {
    let db = Pg::create("direct").await;
    db.exec(&format!("{}; {RECORD_STATEMENT}", jetsink_layout_sql()))
        .await;
    let seen = |how: &'static str| {
        let db = &db;
        async move { db.count(&format!("seen WHERE how = '{how}'")).await }
    };
    let mut sink = opened(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=5)).await.unwrap();
    assert_eq!((seen("COPY").await, seen("INSE").await), (5, 0));
    // A redelivery: 1..=5 are stored, so the COPY is refused as a whole (and leaves
    // nothing behind) and the multi-row INSERT writes 6 and 7 only.
    sink.write_batch(&json_batch(1..=7)).await.unwrap();
    assert_eq!((seen("COPY").await, seen("INSE").await), (5, 2));
    assert_eq!(db.count("events").await, 7);
    // The next batch goes by COPY again: a duplicate does not turn it off.
    sink.write_batch(&json_batch(8..=9)).await.unwrap();
    assert_eq!(seen("COPY").await, 7);
    // A single message, and every batch with direct_copy off, take the INSERT.
    sink.write_batch(&json_batch(10..=10)).await.unwrap();
    let mut off = opened(db.config(json!({"direct_copy": false}))).await;
    off.write_batch(&json_batch(11..=14)).await.unwrap();
    assert_eq!((seen("COPY").await, seen("INSE").await), (7, 7));
    assert_eq!(db.count("events").await, 14);
}

fn jetsink_layout_sql() -> &'static str {
    "CREATE TABLE events (idempotency_key text PRIMARY KEY, stream text NOT NULL, \
     stream_sequence bigint NOT NULL, consumer_sequence bigint NOT NULL, subject text NOT NULL, \
     delivered bigint NOT NULL, published_at timestamptz NOT NULL, written_at timestamptz NOT NULL, \
     message_id text, headers jsonb NOT NULL, priority text, lane text, classification text, \
     labels jsonb NOT NULL DEFAULT '[]', trace_id text, payload bytea NOT NULL)"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_longer_than_ack_wait_is_kept_alive_and_nothing_is_redelivered() {
    let db = Pg::create("slow").await;
    db.client()
        .await
        .batch_execute(&format!(
            "{}; CREATE FUNCTION slow_insert() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(0.003); RETURN NEW; END $$ LANGUAGE plpgsql; \
             CREATE TRIGGER slow BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION slow_insert();",
            jetsink_layout_sql()
        ))
        .await
        .unwrap();
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGSLOW", "pgslow.>").await;
    publish_n(&js, "pgslow.x", 1_000).await;
    let mut cfg = config(
        &server,
        "PGSLOW",
        "pgslow.>",
        db.destination(json!({})),
        // 500 rows x 3 ms: each write takes about 1.5 s, longer than AckWait.
        json!({"batch_size": 500, "batch_timeout_ms": 200}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(1_000);
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(60), "every row", || async {
        db.count("events").await == 1_000
    })
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "PGSLOW", "jetsink").await == (0, 0)
    })
    .await;
    let info = common::consumer_info(&js, "PGSLOW", "jetsink").await;
    assert_eq!(
        info.num_redelivered, 0,
        "progress kept every message of a slow write alive"
    );
    assert_eq!(
        info.delivered.consumer_sequence, 1_000,
        "each message was delivered once"
    );
    daemon.stop_cleanly();
}

/// Drains 10 messages through the COPY path, whose staging table is re-created with
/// `DROP TABLE IF EXISTS` (a server NOTICE the first time), with `RUST_LOG=rust_log`;
/// the daemon's log.
async fn copy_path_log(rust_log: &str, level: &str) -> String {
    let tag = format!("notice{level}");
    let db = Pg::create(&tag).await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let stream = format!("PGNOTICE{}", level.to_uppercase());
    let subject = format!("pgnotice{level}.>");
    create_stream(&js, &stream, &subject).await;
    publish_n(&js, &format!("pgnotice{level}.x"), 10).await;
    let cfg = config(
        &server,
        &stream,
        &subject,
        db.destination(json!({"copy_threshold": 1})),
        json!({}),
    );
    let mut daemon = Daemon::start_with_log(&write_config(dir.path(), &cfg), dir.path(), rust_log);
    eventually(Duration::from_secs(30), "10 rows", || async {
        db.count("events").await == 10
    })
    .await;
    daemon.stop_cleanly();
    daemon.log_text()
}

#[tokio::test(flavor = "multi_thread")]
async fn server_notices_are_logged_at_debug_level_only() {
    // What tokio-postgres itself does with a notice: INFO, as `NOTICE: <text>`.
    let info = copy_path_log("info", "info").await;
    assert!(!info.contains("does not exist, skipping"), "{info}");
    assert!(!info.contains("NOTICE:"), "{info}");
    let debug = copy_path_log("info,jetsink=debug", "debug").await;
    let notice = debug
        .lines()
        .find(|l| l.contains("postgres server notice"))
        .unwrap_or_else(|| panic!("no notice at debug level: {debug}"));
    assert!(notice.contains("DEBUG"), "{notice}");
    assert!(notice.contains("does not exist, skipping"), "{notice}");
}
