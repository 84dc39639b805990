//! The MySQL/MariaDB destination against the real server on 127.0.0.1:3306 (user `root`,
//! empty password): the sink on its own (layout, idempotency, the split-statement
//! transaction, what is refused and how), and the whole daemon (SIGKILL mid-drain, the
//! table vanishing mid-drain, a row breaking a constraint, a mapped user table, start-up
//! exit codes).
//!
//! Every test works in its own database, dropped on `Drop`. A missing server fails the
//! test with the command that starts it.

mod common;

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use common::database::*;
use common::*;
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
        connect(None)
            .await
            .query_drop(format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        TestDb { name }
    }

    async fn conn(&self) -> Conn {
        connect(Some(&self.name)).await
    }

    async fn exec(&self, sql: &str) {
        self.conn().await.query_drop(sql).await.expect(sql);
    }

    fn destination(&self, extra: serde_json::Value) -> serde_json::Value {
        let mut d = json!({"type": "mysql", "host": "127.0.0.1", "port": 3306,
                           "user": "root", "database": self.name, "table": "events"});
        if let (Some(d), Some(extra)) = (d.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                d.insert(k.clone(), v.clone());
            }
        }
        d
    }

    fn config(&self, extra: serde_json::Value) -> MysqlConfig {
        let mut d = self.destination(extra);
        if let Some(o) = d.as_object_mut() {
            o.remove("type");
        }
        serde_json::from_value(d).expect("mysql config")
    }

    async fn count(&self, table: &str) -> i64 {
        let mut c = self.conn().await;
        c.query_first::<i64, _>(format!("SELECT COUNT(*) FROM {table}"))
            .await
            .ok()
            .flatten()
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
                let mut c = connect(None).await;
                let _ = c
                    .query_drop(format!("DROP DATABASE IF EXISTS {name}"))
                    .await;
                let _ = c.disconnect().await;
            });
        })
        .join();
    }
}

async fn opened(config: MysqlConfig) -> MysqlSink {
    let mut sink = MysqlSink::new(config);
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
    );
    let rest: Vec<Rest> = c
        .query(
            "SELECT headers, priority, lane, classification, labels, payload FROM events \
             ORDER BY stream_sequence",
        )
        .await
        .unwrap();
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
async fn rewriting_batches_is_idempotent_in_one_and_in_several_statements() {
    let db = TestDb::create("idem").await;
    let mut sink = opened(db.config(json!({}))).await;
    // 5000 rows of 15 columns need two statements (65,535 placeholders): one transaction.
    let big = json_batch(1..=5000);
    let small = json_batch(5001..=5010);
    sink.write_batch(&big).await.unwrap();
    sink.write_batch(&small).await.unwrap();
    let mut again: Vec<Envelope> = json_batch(1..=5010);
    for e in &mut again {
        e.delivered = 2;
        e.payload = Bytes::from_static(b"changed");
    }
    sink.write_batch(&again).await.unwrap();
    assert_eq!(db.count("events").await, 5010);
    assert_eq!(
        db.count("events WHERE delivered = 1 AND payload <> 'changed'")
            .await,
        5010,
        "insert_ignore keeps the first write"
    );
    let mut upsert = opened(db.config(json!({"mode": "upsert"}))).await;
    upsert.write_batch(&again).await.unwrap();
    assert_eq!(
        db.count("events WHERE delivered = 2 AND payload = 'changed'")
            .await,
        5010
    );
    assert_eq!(db.count("events").await, 5010);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failure_in_a_later_statement_rolls_back_the_whole_batch_and_names_the_row() {
    let db = TestDb::create("rollback").await;
    db.exec("CREATE TABLE small (id BIGINT PRIMARY KEY, v TINYINT NOT NULL, w LONGBLOB)")
        .await;
    let cfg = db.config(json!({"table": "small", "columns": {"id": "$stream_sequence", "v": "/v", "w": "$payload"}}));
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
async fn json_payloads_are_stored_natively_and_a_non_json_one_is_refused_by_index() {
    let db = TestDb::create("json").await;
    let mut sink = opened(db.config(json!({"payload_type": "json"}))).await;
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
    assert_eq!(db.count("events").await, 0);
    batch.remove(3);
    sink.write_batch(&batch).await.unwrap();
    let mut c = db.conn().await;
    let n: Option<i64> = c
        .query_first("SELECT JSON_VALUE(payload, '$.n') FROM events WHERE stream_sequence = 5")
        .await
        .unwrap();
    assert_eq!(n, Some(5));
    let mut wrong = MysqlSink::new(db.config(json!({"payload_type": "blob"})));
    misconfigured(wrong.open().await, &["payload_type is blob"]);
}

async fn orders_table(db: &TestDb, name: &str) {
    db.exec(&format!(
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
async fn constraint_and_range_violations_are_permanent_and_commit_nothing() {
    let db = TestDb::create("check").await;
    orders_table(&db, "orders").await;
    let cfg = db.config(json!({"table": "orders", "columns": orders_columns()}));
    let mut sink = opened(cfg).await;
    let mut batch: Vec<Envelope> = (1..=5).map(|i| order(i, i as i64, "1.5")).collect();
    batch[2] = order(3, 3, "-7");
    match sink.write_batch(&batch).await {
        Err(SinkError::Permanent {
            index: None,
            message,
        }) => {
            assert!(message.contains("4025"), "{message}");
            assert!(message.contains("amount_nonneg"), "{message}");
        }
        other => panic!("expected a permanent batch error, got {other:?}"),
    }
    assert_eq!(db.count("orders").await, 0);
    assert!(matches!(
        sink.write_batch(&batch[2..3]).await,
        Err(SinkError::Permanent { index: Some(0), .. })
    ));
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
    batch.remove(2);
    sink.write_batch(&batch).await.unwrap();
    assert_eq!(db.count("orders").await, 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn open_refuses_tables_it_cannot_write_as_configuration_errors() {
    let db = TestDb::create("misconf").await;
    orders_table(&db, "orders").await;
    db.exec("CREATE TABLE nokey (a BIGINT, b TEXT)").await;
    db.exec("CREATE TABLE bare (x INT)").await;
    let mapped = |columns: serde_json::Value, table: &str| {
        MysqlSink::new(db.config(json!({"table": table, "columns": columns})))
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
        &["column paid has type tinyint(1)"],
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
    misconfigured(
        MysqlSink::new(db.config(json!({"table": "bare"})))
            .open()
            .await,
        &["missing columns: idempotency_key"],
    );
    misconfigured(
        MysqlSink::new(db.config(json!({"table": "nothere", "auto_create": false})))
            .open()
            .await,
        &["auto_create is false"],
    );
    let mut wrong_db = db.config(json!({}));
    wrong_db.database = Some(format!("{}_absent", db.name));
    misconfigured(MysqlSink::new(wrong_db).open().await, &["1049"]);
    let env = db.config(json!({"password_env": "JETSINK_TEST_UNSET_MYSQL_PASSWORD"}));
    misconfigured(
        MysqlSink::new(env).open().await,
        &["JETSINK_TEST_UNSET_MYSQL_PASSWORD"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_insert_privilege_is_refused_at_open_and_held_mid_run() {
    let db = TestDb::create("grant").await;
    let user = format!("{}_w", db.name);
    struct DropUser(String);
    impl Drop for DropUser {
        fn drop(&mut self) {
            let user = self.0.clone();
            let _ = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    let mut c = connect(None).await;
                    let _ = c
                        .query_drop(format!("DROP USER IF EXISTS '{user}'@'%'"))
                        .await;
                    let _ = c.disconnect().await;
                });
            })
            .join();
        }
    }
    let _user_guard = DropUser(user.clone());
    let mut admin = db.conn().await;
    admin
        .query_drop(format!("CREATE USER '{user}'@'%'"))
        .await
        .unwrap();
    let mut setup = opened(db.config(json!({}))).await;
    setup.write_batch(&json_batch(1..=1)).await.unwrap();
    admin
        .query_drop(format!(
            "GRANT SELECT ON {}.events TO '{user}'@'%'",
            db.name
        ))
        .await
        .unwrap();
    let mut cfg = db.config(json!({}));
    cfg.user = Some(user.clone());
    misconfigured(MysqlSink::new(cfg.clone()).open().await, &["1142"]);
    admin
        .query_drop(format!(
            "GRANT INSERT, UPDATE ON {}.events TO '{user}'@'%'",
            db.name
        ))
        .await
        .unwrap();
    let mut sink = opened(cfg).await;
    sink.write_batch(&json_batch(2..=3)).await.unwrap();
    admin
        .query_drop(format!(
            "REVOKE INSERT, UPDATE ON {}.events FROM '{user}'@'%'",
            db.name
        ))
        .await
        .unwrap();
    match sink.write_batch(&json_batch(4..=6)).await {
        Err(SinkError::Transient { message }) => assert!(message.contains("1142"), "{message}"),
        other => panic!("a revoked grant mid-run is an outage, got {other:?}"),
    }
    admin
        .query_drop(format!(
            "GRANT INSERT, UPDATE ON {}.events TO '{user}'@'%'",
            db.name
        ))
        .await
        .unwrap();
    sink.write_batch(&json_batch(4..=6)).await.unwrap();
    assert_eq!(db.count("events").await, 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_renamed_away_is_an_outage_and_is_not_recreated() {
    let db = TestDb::create("rename").await;
    let mut sink = opened(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=3)).await.unwrap();
    db.exec("RENAME TABLE events TO away").await;
    for batch in [json_batch(4..=6), json_batch(4..=6), json_batch(4..=100)] {
        match sink.write_batch(&batch).await {
            Err(SinkError::Transient { .. }) => {}
            other => panic!("expected transient, got {other:?}"),
        }
    }
    assert_eq!(db.count("events").await, -1, "not re-created");
    db.exec("RENAME TABLE away TO events").await;
    sink.write_batch(&json_batch(4..=100)).await.unwrap();
    assert_eq!(db.count("events").await, 100);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_transient() {
    let mut cfg: MysqlConfig =
        serde_json::from_value(json!({"host": "127.0.0.1", "port": free_port(), "database": "x"}))
            .unwrap();
    cfg.connect_timeout_ms = 1_000;
    match MysqlSink::new(cfg).open().await {
        Err(SinkError::Transient { message }) => assert!(message.contains("mysql"), "{message}"),
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
    create_stream(&js, "MYCRASH", "mycrash.>").await;
    publish_n(&js, "mycrash.x", N).await;
    let mut cfg = config(
        &server,
        "MYCRASH",
        "mycrash.>",
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
        consumer_state(&js, "MYCRASH", "jetsink").await == (0, 0)
    })
    .await;
    let mut c = db.conn().await;
    let row: Option<(i64, u64, u64)> = c
        .query_first(
            "SELECT COUNT(DISTINCT idempotency_key), MIN(stream_sequence), MAX(stream_sequence) FROM events",
        )
        .await
        .unwrap();
    assert_eq!(row, Some((N as i64, 1, N as u64)));
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn table_renamed_away_mid_drain_holds_the_batch_and_drains_after_it_returns() {
    let db = TestDb::create("outage").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "MYFAIL", "myfail.>").await;
    publish_n(&js, "myfail.x", 500).await;
    let mut cfg = config(
        &server,
        "MYFAIL",
        "myfail.>",
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
        consumer_state(&js, "MYFAIL", "jetsink").await == (0, 0)
    })
    .await;

    db.exec("RENAME TABLE events TO away").await;
    publish_n(&js, "myfail.x", 300).await;
    eventually(Duration::from_secs(10), "a batch is held", || async {
        consumer_state(&js, "MYFAIL", "jetsink").await.1 > 0
    })
    .await;
    assert_batch_held(&js, &daemon, "MYFAIL", 300).await;
    assert_eq!(db.count("away").await, 500);

    db.exec("RENAME TABLE away TO events").await;
    eventually(
        Duration::from_secs(30),
        "all 800 stored after the fix",
        || async { db.count("events").await == 800 },
    )
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "MYFAIL", "jetsink").await == (0, 0)
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
    orders_table(&db, "orders").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "MYBAD", "mybad.>").await;
    publish_orders(&js, "mybad.orders", 1..301, 137).await;
    let cfg = config(
        &server,
        "MYBAD",
        "mybad.>",
        db.destination(json!({"table": "orders", "columns": orders_columns()})),
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
            let (pending, ack_pending) = consumer_state(&js, "MYBAD", "jetsink").await;
            pending + ack_pending as u64 == 1
        },
    )
    .await;
    assert_eq!(db.count("orders WHERE order_id = 137").await, 0);
    let log = daemon.log_text();
    assert!(log.contains("stream_sequence=137"), "{log}");
    assert!(log.contains("4025"), "{log}");
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn column_mapping_fills_a_typed_user_table() {
    let db = TestDb::create("mapping").await;
    orders_table(&db, "orders").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "MYMAP", "mymap.>").await;
    publish_orders(&js, "mymap.orders", 1..201, -1).await;
    let mut columns = orders_columns();
    columns["note"] = json!("$header:x-note");
    let cfg = config(
        &server,
        "MYMAP",
        "mymap.>",
        db.destination(json!({"table": "orders", "columns": columns, "mode": "upsert"})),
        json!({"batch_size": 150, "batch_timeout_ms": 200}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "200 rows", || async {
        db.count("orders").await == 200
    })
    .await;
    let mut c = db.conn().await;
    type Row = (
        String,
        Option<String>,
        Option<i64>,
        Option<String>,
        String,
        u64,
        Option<String>,
    );
    let r: Option<Row> = c
        .query_first(
            "SELECT CAST(amount AS CHAR), customer, paid, tags, subject, seq, note \
             FROM orders WHERE order_id = 42",
        )
        .await
        .unwrap();
    let r = r.expect("row 42");
    assert_eq!(r.0, "42.25");
    assert_eq!(r.1.as_deref(), Some("c42"));
    assert_eq!(r.2, Some(1));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(r.3.as_deref().unwrap_or("null")).unwrap(),
        json!(["t42"])
    );
    assert_eq!(r.4, "mymap.orders");
    assert_eq!(r.5, 42);
    assert_eq!(r.6.as_deref(), Some("note 42"));
    let recent: Option<i64> = c
        .query_first(
            "SELECT COUNT(*) FROM orders WHERE published > UTC_TIMESTAMP(6) - INTERVAL 10 MINUTE \
             AND published < UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE",
        )
        .await
        .unwrap();
    assert_eq!(recent, Some(200), "published_at is stored in UTC");
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "MYMAP", "jetsink").await == (0, 0)
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
        "MYEXIT",
        "myexit.>",
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
        "MYEXIT",
        "myexit.>",
        json!({"type": "mysql", "port": free_port(), "database": "x", "connect_timeout_ms": 1000}),
        json!({}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &unreachable), dir.path());
    let status = daemon.wait_exit(Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(69), "{}", daemon.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn stored_keys_counts_one_stream_and_declines_a_mapping_without_the_key() {
    let db = TestDb::create("keys").await;
    let mut sink = opened(db.config(json!({}))).await;
    sink.write_batch(&json_batch(1..=5)).await.unwrap();
    sink.write_batch(&json_batch(4..=7)).await.unwrap();
    assert_eq!(sink.stored_keys("ORDERS").await.unwrap(), Some(7));
    assert_eq!(sink.stored_keys("OTHER").await.unwrap(), Some(0));
    orders_table(&db, "orders").await;
    let mut mapped =
        opened(db.config(json!({"table": "orders", "columns": orders_columns()}))).await;
    assert_eq!(mapped.stored_keys("ORDERS").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_of_a_configured_mysql_sink_verifies_every_stored_key() {
    let db = TestDb::create("bench").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = bench_configured_sink(&server, dir.path(), db.destination(json!({})), 300);
    assert!(out.contains("verified: 300 distinct keys stored"), "{out}");
    assert_eq!(db.count("events").await, 300);
}
