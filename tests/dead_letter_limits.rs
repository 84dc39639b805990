//! Dead-lettering at the edges: a copy too large for the server's `max_payload` is stored
//! without its payload instead of being handed back forever; two sinks dead-lettering the
//! same original into one stream keep a copy each; and a PostgreSQL key over the btree
//! index limit (SQLSTATE 54000) is isolated and dead-lettered while its batch-mates land.
//!
//! The SQLite poison is a trigger refusing payloads that contain `POISON`, a permanent
//! (constraint) error. The PostgreSQL test needs the server on 127.0.0.1:5432 (user
//! `postgres`, trust auth) and works in a database of its own, dropped at the end.

use crate::common;

use std::time::Duration;

use async_nats::jetstream;
use async_nats::HeaderMap;
use common::*;
use serde_json::json;

/// Every message of stream DLQ, in order.
async fn dlq_messages(js: &jetstream::Context) -> Vec<jetstream::message::StreamMessage> {
    stream_messages(js, "DLQ", "dlq.>").await
}

/// Whether `consumer` exists and has nothing pending or unacknowledged.
async fn all_acked(js: &jetstream::Context, stream: &str, consumer: &str) -> bool {
    let Ok(s) = js.get_stream(stream).await else {
        return false;
    };
    match s.consumer_info(consumer).await {
        Ok(info) => {
            info.num_pending == 0 && info.num_ack_pending == 0 && info.delivered.stream_sequence > 0
        }
        Err(_) => false,
    }
}

fn header(m: &jetstream::message::StreamMessage, name: &str) -> Option<String> {
    m.headers.get(name).map(|v| v.as_str().to_string())
}

/// A sink reading POISON into its own SQLite file, dead-lettering to `dlq.{sink}.>`.
fn sqlite_sink(consumer: &str, db: &str, dead_letter: serde_json::Value) -> serde_json::Value {
    json!({
        "source": {"stream": "POISON", "subjects": "poison.>", "consumer": consumer,
                   "ack_wait_ms": 5000},
        "delivery": {"batch_size": 100, "batch_timeout_ms": 200,
                     "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 1000}},
        "destination": {"type": "sqlite", "path": db, "table": "events"},
        "dead_letter": dead_letter
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_over_max_payload_is_dead_lettered_without_its_payload() {
    let server = NatsServer::start_with_config(Some("max_payload: 8192\n"));
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    poison_table(&dir.path().join("data/p.db"));
    // Just under the server's limit: the copy's headers and error text push it over.
    let mut body = String::from("{\"note\":\"POISON\",\"pad\":\"");
    body.push_str(&"x".repeat(8_000 - body.len() - 2));
    body.push_str("\"}");
    assert_eq!(body.len(), 8_000);
    js.publish("poison.big", body.into())
        .await
        .expect("publish")
        .await
        .expect("puback");
    publish_n(&js, "poison.small", 3).await;
    let cfg = json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": format!("127.0.0.1:{}", free_port())},
        "logging": {"level": "info"},
        "sinks": {"main": sqlite_sink("jetsink", "data/p.db",
            json!({"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}}))}
    });
    let listen = cfg["http"]["listen"].as_str().expect("listen").to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "the copy in the DLQ", || async {
        dlq_messages(&js).await.len() == 1
    })
    .await;
    eventually(Duration::from_secs(15), "everything acked", || async {
        consumer_state(&js, "POISON", "jetsink").await == (0, 0)
    })
    .await;
    let copy = &dlq_messages(&js).await[0];
    assert!(copy.payload.is_empty(), "the copy carries no payload");
    assert_eq!(
        header(copy, "Jetsink-Payload-Omitted").as_deref(),
        Some("8000")
    );
    assert_eq!(
        header(copy, "Jetsink-Original-Sequence").as_deref(),
        Some("1")
    );
    assert_eq!(
        header(copy, "Jetsink-Error-Class").as_deref(),
        Some("permanent")
    );
    assert_eq!(sqlite_count(&dir.path().join("data/p.db"), "events"), 3);
    assert_eq!(
        metric_value(
            &listen,
            "jetsink_dead_letter_payload_omitted_total{sink=\"main\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric_value(&listen, "jetsink_dlq_publish_failures_total{sink=\"main\"}").await,
        Some(0.0),
        "the whole copy was never sent and refused"
    );
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn two_sinks_dead_lettering_one_original_into_one_stream_keep_a_copy_each() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    create_stream(&js, "DLQ", "dlq.>").await;
    poison_table(&dir.path().join("data/a.db"));
    poison_table(&dir.path().join("data/b.db"));
    js.publish("poison.x", "{\"note\":\"POISON\"}".into())
        .await
        .expect("publish")
        .await
        .expect("puback");
    publish_n(&js, "poison.ok", 2).await;
    let dl = json!({"subject": "dlq.{sink}.{subject}"});
    let cfg = json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": format!("127.0.0.1:{}", free_port())},
        "logging": {"level": "info"},
        "sinks": {
            "a": sqlite_sink("jetsink-a", "data/a.db", dl.clone()),
            "b": sqlite_sink("jetsink-b", "data/b.db", dl),
        }
    });
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    for consumer in ["jetsink-a", "jetsink-b"] {
        eventually(Duration::from_secs(30), "everything acked", || async {
            all_acked(&js, "POISON", consumer).await
        })
        .await;
    }
    let copies = dlq_messages(&js).await;
    let mut sinks: Vec<String> = copies
        .iter()
        .filter_map(|m| header(m, "Jetsink-Sink"))
        .collect();
    sinks.sort();
    assert_eq!(sinks, vec!["a", "b"], "one copy per sink");
    for m in &copies {
        assert_eq!(header(m, "Jetsink-Original-Sequence").as_deref(), Some("1"));
    }
    d.stop_cleanly();
}

use common::pg::PgDatabase;

/// `n` characters PostgreSQL cannot compress, so the index row keeps their full size.
fn incompressible(n: usize) -> String {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"0123456789abcdefghijklmnopqrstuvwxyz"[(x % 36) as usize])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_key_over_the_btree_limit_is_dead_lettered_and_its_batch_mates_land() {
    let db = PgDatabase::create("btree").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_stream(&js, "PGKEY", "pgkey.>").await;
    let long_id = incompressible(4_000);
    for i in 0..20 {
        let mut h = HeaderMap::new();
        let id = if i == 7 {
            long_id.clone()
        } else {
            format!("id-{i}")
        };
        h.insert("Nats-Msg-Id", id.as_str());
        js.publish_with_headers("pgkey.x", h, format!("{{\"i\":{i}}}").into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
    let mut cfg = config(
        &server,
        "PGKEY",
        "pgkey.>",
        json!({"type": "postgres", "host": "127.0.0.1", "port": 5432, "user": "postgres",
               "database": db.name, "table": "events"}),
        json!({"batch_size": 100, "batch_timeout_ms": 200, "idempotency_key": "message_id",
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 1000}}),
    );
    cfg["sinks"]["main"]["dead_letter"] =
        json!({"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}});
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(60), "the copy in the DLQ", || async {
        dlq_messages(&js).await.len() == 1
    })
    .await;
    eventually(Duration::from_secs(15), "everything acked", || async {
        consumer_state(&js, "PGKEY", "jetsink").await == (0, 0)
    })
    .await;
    let rows: i64 = db
        .client()
        .await
        .query_one("SELECT COUNT(*) FROM events", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 19, "every batch-mate landed");
    let copy = &dlq_messages(&js).await[0];
    assert_eq!(
        header(copy, "Jetsink-Original-Sequence").as_deref(),
        Some("8")
    );
    assert_eq!(
        header(copy, "Jetsink-Error-Class").as_deref(),
        Some("permanent")
    );
    let error = header(copy, "Jetsink-Error").unwrap_or_default();
    assert!(error.contains("54000"), "{error}");
    assert!(
        !error.contains(&long_id[..64]),
        "the key is not quoted: {error}"
    );
    d.stop_cleanly();
}
