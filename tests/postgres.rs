//! The PostgreSQL destination against the real server on 127.0.0.1:5432 (user `postgres`,
//! trust auth): the sink on its own (layout, idempotency, both write paths, what is refused
//! and how), and the whole daemon (SIGKILL mid-drain, the table vanishing mid-drain, a row
//! breaking a constraint, a mapped user table, start-up exit codes).
//!
//! Every test works in its own database, dropped on `Drop` (with `FORCE`, so a killed
//! daemon's connections do not keep it). A missing server fails the test with the command
//! that starts it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use common::database::*;
use common::*;
use jetsink::envelope::Envelope;
use jetsink::sinks::postgres::PostgresConfig;
use jetsink::sinks::postgres::PostgresSink;
use jetsink::sinks::{Sink, SinkError};
use serde_json::json;
use time::OffsetDateTime;
use tokio_postgres::{Client, NoTls};

const START: &str =
    "PostgreSQL is not reachable on 127.0.0.1:5432 as user postgres; start it with \
     `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`";

async fn connect(database: &str) -> Client {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(5432)
        .user("postgres")
        .dbname(database)
        .connect_timeout(Duration::from_secs(5))
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("{START} ({e})"));
    tokio::spawn(conn);
    client
}

/// A database of its own for one test, dropped at the end.
struct TestDb {
    name: String,
}

impl TestDb {
    async fn create(tag: &str) -> TestDb {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("jetsink_t_{tag}_{}_{nanos}", std::process::id());
        connect("postgres")
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        TestDb { name }
    }

    async fn client(&self) -> Client {
        connect(&self.name).await
    }

    fn destination(&self, extra: serde_json::Value) -> serde_json::Value {
        let mut d = json!({"type": "postgres", "host": "127.0.0.1", "port": 5432,
                           "user": "postgres", "database": self.name, "table": "events"});
        if let (Some(d), Some(extra)) = (d.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                d.insert(k.clone(), v.clone());
            }
        }
        d
    }

    fn config(&self, extra: serde_json::Value) -> PostgresConfig {
        let mut d = self.destination(extra);
        if let Some(o) = d.as_object_mut() {
            o.remove("type");
        }
        serde_json::from_value(d).expect("postgres config")
    }

    async fn count(&self, table: &str) -> i64 {
        self.client()
            .await
            .query_one(&format!("SELECT COUNT(*) FROM {table}"), &[])
            .await
            .map(|r| r.get(0))
            .unwrap_or(-1)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs inside the test's runtime: use a runtime of its own on another thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let c = connect("postgres").await;
                let _ = c
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}

async fn opened(config: PostgresConfig) -> PostgresSink {
    let mut sink = PostgresSink::new(config);
    sink.open().await.expect("open");
    sink
}

// ---------------------------------------------------------------- the sink on its own

#[tokio::test(flavor = "multi_thread")]
async fn default_table_is_created_and_rows_hold_every_field() {
    let db = TestDb::create("layout").await;
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
             payload FROM events ORDER BY stream_sequence",
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
            "bytea"
        ]
    );
    sink.health().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn rewriting_batches_is_idempotent_on_both_write_paths() {
    let db = TestDb::create("idem").await;
    // 100 rows take the COPY path (threshold 64), 10 rows the multi-row INSERT.
    let mut sink = opened(db.config(json!({"copy_threshold": 64}))).await;
    let big = json_batch(1..=100);
    let small = json_batch(101..=110);
    sink.write_batch(&big).await.unwrap();
    sink.write_batch(&small).await.unwrap();
    let mut again: Vec<Envelope> = json_batch(1..=110);
    for e in &mut again {
        e.delivered = 2;
        e.payload = Bytes::from_static(b"changed");
    }
    sink.write_batch(&again[..80]).await.unwrap();
    sink.write_batch(&again[80..]).await.unwrap();
    assert_eq!(db.count("events").await, 110);
    let c = db.client().await;
    let unchanged: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM events WHERE delivered = 1 AND payload <> 'changed'::bytea",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(unchanged, 110, "insert_ignore keeps the first write");

    // upsert: the newer delivery wins, in both paths.
    let mut upsert = opened(db.config(json!({"mode": "upsert", "copy_threshold": 64}))).await;
    upsert.write_batch(&again[..80]).await.unwrap();
    upsert.write_batch(&again[80..]).await.unwrap();
    let changed: i64 = c
        .query_one(
            "SELECT COUNT(*) FROM events WHERE delivered = 2 AND payload = 'changed'::bytea",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(changed, 110);
    assert_eq!(db.count("events").await, 110);
}

#[tokio::test(flavor = "multi_thread")]
async fn upsert_with_one_key_twice_in_a_batch_keeps_the_last() {
    let db = TestDb::create("twice").await;
    let mut cfg = db.config(json!({"mode": "upsert"}));
    for copy_threshold in [2u32, 0] {
        cfg.copy_threshold = copy_threshold;
        let mut sink = opened(cfg.clone()).await;
        // Same idempotency key (a Nats-Msg-Id key) for two messages of one batch.
        let mut batch = json_batch(1..=5);
        for e in &mut batch[..3] {
            e.idempotency_key = "same".into();
        }
        batch[2].payload = Bytes::from(format!("last-{copy_threshold}"));
        sink.write_batch(&batch).await.unwrap();
        let c = db.client().await;
        let row = c
            .query_one(
                "SELECT payload, stream_sequence FROM events WHERE idempotency_key = 'same'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            row.get::<_, Vec<u8>>(0),
            format!("last-{copy_threshold}").as_bytes()
        );
        assert_eq!(row.get::<_, i64>(1), 3);
        assert_eq!(db.count("events").await, 3);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn jsonb_payloads_are_stored_natively_and_a_non_json_one_is_refused_by_index() {
    let db = TestDb::create("jsonb").await;
    for copy_threshold in [0u32, 2] {
        let mut cfg =
            db.config(json!({"payload_type": "jsonb", "table": format!("j{copy_threshold}")}));
        cfg.copy_threshold = copy_threshold;
        let mut sink = opened(cfg).await;
        let mut batch = json_batch(1..=5);
        batch[3].payload = Bytes::from_static(b"{not json");
        match sink.write_batch(&batch).await {
            Err(SinkError::Permanent {
                index: Some(3),
                message,
            }) => {
                assert!(message.contains("not JSON"), "{message}");
                assert!(
                    !message.contains("{not json"),
                    "no payload in errors: {message}"
                );
            }
            other => panic!("expected a permanent error at index 3, got {other:?}"),
        }
        assert_eq!(
            db.count(&format!("j{copy_threshold}")).await,
            0,
            "nothing of the batch"
        );
        batch.remove(3);
        sink.write_batch(&batch).await.unwrap();
        let c = db.client().await;
        let v: serde_json::Value = c
            .query_one(
                &format!("SELECT payload FROM j{copy_threshold} WHERE stream_sequence = 5"),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(v, json!({"n": 5}));
    }
    // payload_type that contradicts an existing table is a configuration error.
    let mut wrong = PostgresSink::new(db.config(json!({"payload_type": "bytea", "table": "j0"})));
    misconfigured(wrong.open().await, &["payload_type"]);
}

async fn orders_table(c: &Client, name: &str) {
    c.batch_execute(&format!(
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
    .await
    .unwrap();
}

fn orders_columns() -> serde_json::Value {
    json!({
        "order_id": "/order/id", "amount": "/amount", "customer": "/customer/name",
        "paid": "/paid", "tags": "/tags", "subject": "$subject", "seq": "$stream_sequence",
        "published": "$published_at", "note": "$header:X-Note"
    })
}

fn order(seq: u64, id: i64, amount: &str) -> Envelope {
    let mut e = envelope(
        seq,
        format!(
            r#"{{"order":{{"id":{id}}},"amount":{amount},"customer":{{"name":"c{id}"}},"paid":true,"tags":["x",{id}]}}"#
        )
        .as_bytes(),
    );
    e.headers
        .push(("X-Note".into(), vec![format!("note {id}")]));
    e
}

#[tokio::test(flavor = "multi_thread")]
async fn a_constraint_violation_is_permanent_and_commits_nothing_of_the_batch() {
    let db = TestDb::create("check").await;
    orders_table(&db.client().await, "orders").await;
    for copy_threshold in [0u32, 2] {
        let mut cfg = db.config(json!({"table": "orders", "columns": orders_columns()}));
        cfg.copy_threshold = copy_threshold;
        let mut sink = opened(cfg).await;
        let base = i64::from(copy_threshold) * 100;
        let before = db.count("orders").await;
        let mut batch: Vec<Envelope> = (1..=5).map(|i| order(i, base + i as i64, "1.5")).collect();
        batch[2] = order(3, base + 3, "-7");
        match sink.write_batch(&batch).await {
            Err(SinkError::Permanent {
                index: None,
                message,
            }) => {
                assert!(message.contains("23514"), "{message}");
                assert!(message.contains("orders_amount_check"), "{message}");
                assert!(!message.contains("-7"), "no values in errors: {message}");
            }
            other => panic!("expected a permanent batch error, got {other:?}"),
        }
        assert_eq!(db.count("orders").await, before, "nothing of the batch");
        // The runner retries the parts; the culprit alone is named by index 0.
        assert!(matches!(
            sink.write_batch(&batch[2..3]).await,
            Err(SinkError::Permanent { index: Some(0), .. })
        ));
        sink.write_batch(&batch[..2]).await.unwrap();
        sink.write_batch(&batch[3..]).await.unwrap();
        // A value the column type cannot take is refused the same way.
        let bad_type = order(9, base + 9, "\"lots\"");
        assert!(matches!(
            sink.write_batch(&[bad_type]).await,
            Err(SinkError::Permanent { index: Some(0), .. })
        ));
    }
    assert_eq!(db.count("orders").await, 8);
}

#[tokio::test(flavor = "multi_thread")]
async fn open_refuses_tables_it_cannot_write_as_configuration_errors() {
    let db = TestDb::create("misconf").await;
    let c = db.client().await;
    orders_table(&c, "orders").await;
    c.batch_execute("CREATE TABLE nokey (a bigint, b text); CREATE TABLE bare (x int)")
        .await
        .unwrap();
    let mapped = |columns: serde_json::Value, table: &str| {
        PostgresSink::new(db.config(json!({"table": table, "columns": columns})))
    };
    let mut cols = orders_columns();
    cols["missing_col"] = json!("/x");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["missing columns: missing_col"],
    );
    let mut cols = orders_columns();
    cols["paid"] = json!("$payload");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["column paid has type boolean"],
    );
    let mut cols = orders_columns();
    cols.as_object_mut().unwrap().remove("subject");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["NOT NULL", "subject"],
    );
    let mut cols = orders_columns();
    cols["order_id"] = json!("$delivered");
    misconfigured(
        mapped(cols, "orders").open().await,
        &["PRIMARY KEY or UNIQUE"],
    );
    misconfigured(
        mapped(json!({"a": "/a", "b": "/b"}), "nokey").open().await,
        &["unique keys found: none"],
    );
    misconfigured(
        mapped(json!({"a": "/a"}), "absent").open().await,
        &["does not exist", "must be created beforehand"],
    );
    // The default layout into a table of another shape.
    misconfigured(
        PostgresSink::new(db.config(json!({"table": "bare"})))
            .open()
            .await,
        &["missing columns: idempotency_key"],
    );
    misconfigured(
        PostgresSink::new(db.config(json!({"table": "nothere", "auto_create": false})))
            .open()
            .await,
        &["auto_create is false"],
    );
    let mut wrong_db = db.config(json!({}));
    wrong_db.database = Some(format!("{}_absent", db.name));
    misconfigured(PostgresSink::new(wrong_db).open().await, &["3D000"]);
    let mut env = db.config(json!({"password_env": "JETSINK_TEST_UNSET_PG_PASSWORD"}));
    env.password_file = None;
    misconfigured(
        PostgresSink::new(env).open().await,
        &["JETSINK_TEST_UNSET_PG_PASSWORD"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_role_without_insert_privilege_is_refused_at_open_and_held_mid_run() {
    let db = TestDb::create("grant").await;
    let role = format!("{}_writer", db.name);
    let admin = db.client().await;
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; {}; GRANT SELECT ON events TO {role}",
            jetsink_layout_sql()
        ))
        .await
        .unwrap();
    struct DropRole(String);
    impl Drop for DropRole {
        fn drop(&mut self) {
            let role = self.0.clone();
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    let _ = connect("postgres")
                        .await
                        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
                        .await;
                });
            })
            .join();
        }
    }
    let mut cfg = db.config(json!({}));
    cfg.user = Some(role.clone());
    misconfigured(
        PostgresSink::new(cfg.clone()).open().await,
        &["42501", "insufficient_privilege"],
    );
    admin
        .batch_execute(&format!("GRANT INSERT ON events TO {role}"))
        .await
        .unwrap();
    let mut sink = opened(cfg).await;
    sink.write_batch(&json_batch(1..=3)).await.unwrap();
    admin
        .batch_execute(&format!("REVOKE INSERT ON events FROM {role}"))
        .await
        .unwrap();
    match sink.write_batch(&json_batch(4..=6)).await {
        Err(SinkError::Transient { message }) => assert!(message.contains("42501"), "{message}"),
        other => panic!("a revoked grant mid-run is an outage, got {other:?}"),
    }
    admin
        .batch_execute(&format!("GRANT INSERT ON events TO {role}"))
        .await
        .unwrap();
    sink.write_batch(&json_batch(4..=6)).await.unwrap();
    assert_eq!(db.count("events").await, 6);
    // Privileges granted to the role go with the database; the role itself is cluster-wide.
    drop(admin);
    drop(db);
    drop(DropRole(role));
}

fn jetsink_layout_sql() -> &'static str {
    "CREATE TABLE events (idempotency_key text PRIMARY KEY, stream text NOT NULL, \
     stream_sequence bigint NOT NULL, consumer_sequence bigint NOT NULL, subject text NOT NULL, \
     delivered bigint NOT NULL, published_at timestamptz NOT NULL, written_at timestamptz NOT NULL, \
     message_id text, headers jsonb NOT NULL, priority text, lane text, classification text, \
     labels jsonb NOT NULL DEFAULT '[]', payload bytea NOT NULL)"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_renamed_away_is_an_outage_and_is_not_recreated() {
    let db = TestDb::create("rename").await;
    let mut sink = opened(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=3)).await.unwrap();
    let c = db.client().await;
    c.batch_execute("ALTER TABLE events RENAME TO away")
        .await
        .unwrap();
    for batch in [json_batch(4..=6), json_batch(4..=6), json_batch(4..=100)] {
        match sink.write_batch(&batch).await {
            Err(SinkError::Transient { .. }) => {}
            other => panic!("expected transient, got {other:?}"),
        }
    }
    assert!(sink.health().await.is_err());
    let exists: Option<u32> = c
        .query_one("SELECT to_regclass('events')::oid", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        exists, None,
        "a vanished table is waited for, not re-created"
    );
    c.batch_execute("ALTER TABLE away RENAME TO events")
        .await
        .unwrap();
    sink.write_batch(&json_batch(4..=100)).await.unwrap();
    assert_eq!(db.count("events").await, 100);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_transient() {
    let mut cfg: PostgresConfig =
        serde_json::from_value(json!({"host": "127.0.0.1", "port": free_port(), "database": "x"}))
            .unwrap();
    cfg.connect_timeout_ms = 1_000;
    match PostgresSink::new(cfg).open().await {
        Err(SinkError::Transient { message }) => {
            assert!(message.contains("postgres"), "{message}")
        }
        other => panic!("expected transient, got {other:?}"),
    }
}

// ---------------------------------------------------------------- the whole daemon

const N: usize = 10_000;

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_mid_drain_then_restart_stores_10000_rows_exactly_once() {
    let db = TestDb::create("crash").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGCRASH", "pgcrash.>").await;
    publish_n(&js, "pgcrash.x", N).await;
    let mut cfg = config(
        &server,
        "PGCRASH",
        "pgcrash.>",
        db.destination(json!({})),
        json!({"batch_size": 200, "batch_timeout_ms": 200}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let path = write_config(dir.path(), &cfg);
    for round in 1..=3i64 {
        let mut daemon = Daemon::start(&path, dir.path());
        let target = round * N as i64 / 4;
        eventually(
            Duration::from_secs(60),
            "progress before the kill",
            || async { db.count("events").await >= target },
        )
        .await;
        daemon.kill();
    }
    assert!(
        db.count("events").await < N as i64,
        "the kills must happen mid-drain for this test to mean anything"
    );
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "every row", || async {
        db.count("events").await == N as i64
    })
    .await;
    eventually(Duration::from_secs(20), "consumer drained", || async {
        consumer_state(&js, "PGCRASH", "jetsink").await == (0, 0)
    })
    .await;
    let row = db
        .client()
        .await
        .query_one(
            "SELECT COUNT(DISTINCT idempotency_key), MIN(stream_sequence), MAX(stream_sequence), \
             COUNT(*) FROM events",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2)
        ),
        (N as i64, 1, N as i64)
    );
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn table_renamed_away_mid_drain_holds_the_batch_and_drains_after_it_returns() {
    let db = TestDb::create("outage").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGFAIL", "pgfail.>").await;
    publish_n(&js, "pgfail.x", 500).await;
    let mut cfg = config(
        &server,
        "PGFAIL",
        "pgfail.>",
        db.destination(json!({})),
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 300}}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "first 500 stored", || async {
        db.count("events").await == 500
    })
    .await;
    eventually(Duration::from_secs(10), "acked", || async {
        consumer_state(&js, "PGFAIL", "jetsink").await == (0, 0)
    })
    .await;

    let admin = db.client().await;
    admin
        .batch_execute("ALTER TABLE events RENAME TO away")
        .await
        .unwrap();
    publish_n(&js, "pgfail.x", 300).await;
    eventually(Duration::from_secs(10), "a batch is held", || async {
        consumer_state(&js, "PGFAIL", "jetsink").await.1 > 0
    })
    .await;
    assert_batch_held(&js, &daemon, "PGFAIL", 300).await;
    let away: i64 = admin
        .query_one("SELECT COUNT(*) FROM away", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(away, 500);

    admin
        .batch_execute("ALTER TABLE away RENAME TO events")
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "all 800 stored after the fix",
        || async { db.count("events").await == 800 },
    )
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "PGFAIL", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
}

async fn publish_orders(
    js: &async_nats::jetstream::Context,
    subject: &str,
    ids: std::ops::Range<i64>,
    bad: i64,
) {
    for id in ids {
        let amount = if id == bad {
            "-1".to_string()
        } else {
            format!("{id}.25")
        };
        let mut headers = HeaderMap::new();
        headers.insert("X-Note", format!("note {id}").as_str());
        let payload = format!(
            r#"{{"order":{{"id":{id}}},"amount":{amount},"customer":{{"name":"c{id}"}},"paid":{},"tags":["t{id}"]}}"#,
            id % 2 == 0
        );
        js.publish_with_headers(subject.to_string(), headers, payload.into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_breaking_a_check_constraint_is_isolated_and_the_rest_commit() {
    let db = TestDb::create("poison").await;
    orders_table(&db.client().await, "orders").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGBAD", "pgbad.>").await;
    publish_orders(&js, "pgbad.orders", 1..301, 137).await;
    let cfg = config(
        &server,
        "PGBAD",
        "pgbad.>",
        db.destination(json!({"table": "orders", "columns": orders_columns()})),
        // A long reject delay keeps the refused message parked while the test looks.
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 60000}}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "299 good rows", || async {
        db.count("orders").await == 299
    })
    .await;
    eventually(
        Duration::from_secs(10),
        "only the bad one unacked",
        || async {
            let (pending, ack_pending) = consumer_state(&js, "PGBAD", "jetsink").await;
            pending + ack_pending as u64 == 1
        },
    )
    .await;
    let c = db.client().await;
    let bad: i64 = c
        .query_one("SELECT COUNT(*) FROM orders WHERE order_id = 137", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(bad, 0);
    let log = daemon.log_text();
    assert!(log.contains("stream_sequence=137"), "{log}");
    assert!(log.contains("23514"), "{log}");
    assert!(!log.contains("\"amount\":-1"), "no payloads in logs");
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn column_mapping_fills_a_typed_user_table() {
    let db = TestDb::create("mapping").await;
    orders_table(&db.client().await, "orders").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGMAP", "pgmap.>").await;
    publish_orders(&js, "pgmap.orders", 1..201, -1).await;
    let mut columns: BTreeMap<String, String> = serde_json::from_value(orders_columns()).unwrap();
    columns.insert("note".into(), "$header:x-note".into());
    let cfg = config(
        &server,
        "PGMAP",
        "pgmap.>",
        db.destination(json!({"table": "orders", "columns": columns, "mode": "upsert"})),
        json!({"batch_size": 150, "batch_timeout_ms": 200}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "200 rows", || async {
        db.count("orders").await == 200
    })
    .await;
    let c = db.client().await;
    let r = c
        .query_one(
            "SELECT amount::text, customer, paid, tags, subject, seq, published, note \
             FROM orders WHERE order_id = 42",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(r.get::<_, String>(0), "42.25");
    assert_eq!(r.get::<_, Option<String>>(1).as_deref(), Some("c42"));
    assert_eq!(r.get::<_, Option<bool>>(2), Some(true));
    assert_eq!(r.get::<_, serde_json::Value>(3), json!(["t42"]));
    assert_eq!(r.get::<_, String>(4), "pgmap.orders");
    assert_eq!(r.get::<_, i64>(5), 42);
    let published: OffsetDateTime = r.get(6);
    assert!(
        (OffsetDateTime::now_utc() - published)
            .whole_minutes()
            .abs()
            < 10
    );
    assert_eq!(r.get::<_, Option<String>>(7).as_deref(), Some("note 42"));
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "PGMAP", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn start_up_exits_78_for_a_wrong_table_and_69_for_an_unreachable_server() {
    let db = TestDb::create("exit").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let wrong = config(
        &server,
        "PGEXIT",
        "pgexit.>",
        db.destination(json!({"table": "absent", "columns": {"a": "/a"}})),
        json!({}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &wrong), dir.path());
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(78), "{}", daemon.log_text());
    assert!(
        daemon.log_text().contains("does not exist"),
        "{}",
        daemon.log_text()
    );

    let unreachable = config(
        &server,
        "PGEXIT",
        "pgexit.>",
        json!({"type": "postgres", "port": free_port(), "database": "x", "connect_timeout_ms": 1000}),
        json!({}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &unreachable), dir.path());
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(69), "{}", daemon.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_longer_than_ack_wait_is_kept_alive_and_nothing_is_redelivered() {
    let db = TestDb::create("slow").await;
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
    let info = js
        .get_stream("PGSLOW")
        .await
        .unwrap()
        .consumer_info("jetsink")
        .await
        .unwrap();
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

#[tokio::test(flavor = "multi_thread")]
async fn stored_keys_counts_one_stream_and_declines_a_mapping_without_the_key() {
    let db = TestDb::create("keys").await;
    let mut sink = opened(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=5)).await.unwrap();
    sink.write_batch(&json_batch(4..=7)).await.unwrap();
    assert_eq!(sink.stored_keys("ORDERS").await.unwrap(), Some(7));
    assert_eq!(sink.stored_keys("OTHER").await.unwrap(), Some(0));
    orders_table(&db.client().await, "orders").await;
    let mut mapped =
        opened(db.config(json!({"table": "orders", "columns": orders_columns()}))).await;
    assert_eq!(mapped.stored_keys("ORDERS").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_of_a_configured_postgres_sink_verifies_every_stored_key() {
    let db = TestDb::create("bench").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = bench_configured_sink(&server, dir.path(), db.destination(json!({})), 300);
    assert!(out.contains("verified: 300 distinct keys stored"), "{out}");
    assert_eq!(db.count("events").await, 300);
}
