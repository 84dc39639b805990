//! Failure handling against a real server: a poison message is isolated and
//! dead-lettered while the rest of its batch commits; without a working dead-letter queue
//! nothing is ACKed that was not stored somewhere; MaxDeliver hands the message to the
//! queue on its last delivery; an outage dead-letters nothing; replay puts a fixed message
//! back through the sink.
//!
//! The poison is a SQLite trigger that refuses payloads containing `POISON`, which the
//! destination reports as a permanent (constraint) error; dropping the trigger fixes it.

use crate::common;

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use serde_json::json;

const TABLE: &str = "events";

fn cure(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch("DROP TRIGGER refuse_poison").unwrap();
}

/// Publishes `n` messages with one poison payload at position `poison_at`.
async fn publish_with_poison(js: &jetstream::Context, subject: &str, n: usize, poison_at: usize) {
    for i in 0..n {
        let body = if i == poison_at {
            format!("{{\"i\":{i},\"note\":\"POISON\"}}")
        } else {
            format!("{{\"i\":{i}}}")
        };
        js.publish(subject.to_string(), body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

fn sink_config(
    server: &NatsServer,
    dead_letter: Option<serde_json::Value>,
    max_deliver: i64,
) -> serde_json::Value {
    let mut cfg = config(
        server,
        "POISON",
        "poison.>",
        json!({"type": "sqlite", "path": "data/p.db", "table": TABLE}),
        json!({"batch_size": 500, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 1000}}),
    );
    cfg["sinks"]["main"]["source"]["max_deliver"] = json!(max_deliver);
    if let Some(dl) = dead_letter {
        cfg["sinks"]["main"]["dead_letter"] = dl;
    }
    cfg
}

fn dlq_config() -> serde_json::Value {
    json!({
        "subject": "dlq.{sink}.{subject}",
        "create_stream": {"name": "DLQ"}
    })
}

async fn dlq_messages(
    js: &jetstream::Context,
) -> Vec<async_nats::jetstream::message::StreamMessage> {
    stream_messages(js, "DLQ", "dlq.>").await
}

/// The highest stream sequence below which every message is ACKed.
async fn ack_floor(js: &jetstream::Context) -> u64 {
    common::consumer_info(js, "POISON", "jetsink")
        .await
        .ack_floor
        .stream_sequence
}

async fn metric(listen: &str, needle: &str) -> Option<f64> {
    metric_value(listen, needle).await
}

#[tokio::test(flavor = "multi_thread")]
async fn one_poison_among_500_commits_499_and_dead_letters_one_with_every_header() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    let db = dir.path().join("data/p.db");
    poison_table(&db);
    publish_with_poison(&js, "poison.orders", 500, 137).await;
    let cfg = sink_config(&server, Some(dlq_config()), -1);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "499 rows", || async {
        sqlite_count(&db, TABLE) == 499
    })
    .await;
    eventually(Duration::from_secs(15), "one dead letter", || async {
        dlq_messages(&js).await.len() == 1
    })
    .await;
    eventually(Duration::from_secs(15), "everything acked", || async {
        consumer_state(&js, "POISON", "jetsink").await == (0, 0)
    })
    .await;
    let dl = &dlq_messages(&js).await[0];
    assert_eq!(dl.subject.as_str(), "dlq.main.poison.orders");
    assert_eq!(&dl.payload[..], br#"{"i":137,"note":"POISON"}"#);
    let h = |n: &str| {
        dl.headers
            .get(n)
            .map(|v| v.as_str().to_string())
            .unwrap_or_default()
    };
    assert_eq!(h("Jetsink-Error-Class"), "permanent");
    assert!(
        h("Jetsink-Error").contains("poison payload refused"),
        "{}",
        h("Jetsink-Error")
    );
    assert_eq!(h("Jetsink-Sink"), "main");
    assert_eq!(h("Jetsink-Original-Subject"), "poison.orders");
    assert_eq!(h("Jetsink-Original-Stream"), "POISON");
    assert_eq!(h("Jetsink-Original-Sequence"), "138");
    assert_eq!(h("Jetsink-Delivered"), "1");
    assert!(!h("Jetsink-Failed-At").is_empty());
    assert_eq!(h("Nats-Msg-Id"), "main:POISON:138");
    // Nothing is redelivered: the consumer never delivered a message twice.
    let info = common::consumer_info(&js, "POISON", "jetsink").await;
    assert_eq!(info.num_redelivered, 0);
    assert_eq!(
        metric(
            &listen,
            "jetsink_dlq_published_total{reason=\"destination\",sink=\"main\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric(&listen, "jetsink_poison_isolated_total{sink=\"main\"}").await,
        Some(1.0)
    );
    d.stop_cleanly();

    // Replay: fix the cause, put the message back, and the sink commits it.
    cure(&db);
    let path = dir.path().join("jetsink.json");
    let (code, out, err) = jetsink(
        &[
            "dlq",
            "replay",
            "--config",
            path.to_str().unwrap(),
            "--sink",
            "main",
            "--dry-run",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("would replay 1 of 1"), "{out}");
    assert_eq!(
        dlq_messages(&js).await.len(),
        1,
        "a dry run changes nothing"
    );
    let mut d = Daemon::start(&path, dir.path());
    let (code, out, err) = jetsink(
        &[
            "dlq",
            "replay",
            "--config",
            path.to_str().unwrap(),
            "--sink",
            "main",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("replayed 1 of 1"), "{out}");
    eventually(
        Duration::from_secs(20),
        "the replayed message committed",
        || async { sqlite_count(&db, TABLE) == 500 },
    )
    .await;
    assert!(
        dlq_messages(&js).await.is_empty(),
        "the dead-letter stream is empty after replay"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let headers: String = conn
        .query_row(
            &format!("SELECT headers FROM {TABLE} WHERE stream_sequence = 501"),
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        !headers.contains("Jetsink-"),
        "replay drops the context headers: {headers}"
    );
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_dead_letter_queue_the_poison_stays_unacked_and_comes_back() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    let db = dir.path().join("data/p.db");
    poison_table(&db);
    publish_with_poison(&js, "poison.orders", 50, 10).await;
    let cfg = sink_config(&server, None, -1);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "49 rows", || async {
        sqlite_count(&db, TABLE) == 49
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "the poison is redelivered",
        || async {
            let info = common::consumer_info(&js, "POISON", "jetsink").await;
            info.num_redelivered >= 1 || info.delivered.consumer_sequence > 51
        },
    )
    .await;
    // The poison (stream sequence 11) is never ACKed, everything before it is; a NAKed
    // message waiting for its redelivery is in neither pending count, so the ack floor is
    // what proves it.
    assert_eq!(ack_floor(&js).await, 10, "only the poison is outstanding");
    assert!(
        d.log_text().contains("no dead-letter queue configured")
            || d.log_text().contains("message refused")
    );
    d.stop_cleanly();
    assert_eq!(sqlite_count(&db, TABLE), 49);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_letter_subject_without_a_stream_acks_nothing_that_was_not_stored() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    let db = dir.path().join("data/p.db");
    poison_table(&db);
    publish_with_poison(&js, "poison.orders", 50, 20).await;
    let cfg = sink_config(
        &server,
        Some(json!({"subject": "nowhere.{sink}", "publish_timeout_ms": 500})),
        -1,
    );
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "49 rows", || async {
        sqlite_count(&db, TABLE) == 49
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "the failed dead-letter publish is counted",
        || async {
            metric(&listen, "jetsink_dlq_publish_failures_total{sink=\"main\"}")
                .await
                .unwrap_or(0.0)
                >= 1.0
        },
    )
    .await;
    assert_eq!(
        ack_floor(&js).await,
        20,
        "the poison (sequence 21) is not ACKed"
    );
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_refused_on_every_delivery_is_dead_lettered_on_its_last() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    let db = dir.path().join("data/p.db");
    poison_table(&db);
    publish_with_poison(&js, "poison.orders", 5, 2).await;
    let mut dl = dlq_config();
    dl["max_attempts"] = json!(10);
    // max_deliver 3 caps the attempts: the copy is made on delivery 3, not 10.
    let mut cfg = sink_config(&server, Some(dl), 3);
    cfg["sinks"]["main"]["delivery"]["retry"]["max_backoff_ms"] = json!(200);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "one dead letter", || async {
        dlq_messages(&js).await.len() == 1
    })
    .await;
    let dl = &dlq_messages(&js).await[0];
    assert_eq!(
        dl.headers.get("Jetsink-Delivered").map(|v| v.as_str()),
        Some("3")
    );
    eventually(Duration::from_secs(10), "everything acked", || async {
        consumer_state(&js, "POISON", "jetsink").await == (0, 0)
    })
    .await;
    assert_eq!(sqlite_count(&db, TABLE), 4);
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outage_of_several_seconds_dead_letters_nothing_and_loses_nothing() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    publish_n(&js, "poison.orders", 200).await;
    let mut cfg = sink_config(&server, Some(dlq_config()), 3);
    cfg["sinks"]["main"]["destination"]["path"] = json!("data/db/p.db");
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let data = dir.path().join("data/db");
    let db = data.join("p.db");
    eventually(Duration::from_secs(30), "200 rows", || async {
        sqlite_count(&db, TABLE) == 200
    })
    .await;
    let away = dir.path().join("away");
    std::fs::rename(&data, &away).unwrap();
    // Watch the daemon's acknowledgements: while the batch is held, +WPI keeps it from
    // being redelivered, one every half AckWait.
    let client = server.client().await;
    let mut acks = client.subscribe("$JS.ACK.POISON.>").await.unwrap();
    client.flush().await.unwrap();
    publish_n(&js, "poison.orders", 200).await;
    // The outage lasts until one held message has been kept alive over more AckWaits
    // than max_deliver (3) redeliveries would take: 2 × 3 + 1 progress ACKs.
    let mut progress: std::collections::HashMap<String, u32> = Default::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        use futures::StreamExt;
        let m = tokio::time::timeout(Duration::from_secs(10), acks.next())
            .await
            .ok()
            .flatten()
            .expect("acknowledgements while the destination is away");
        if m.payload.as_ref() == b"+WPI" {
            let n = progress.entry(m.subject.to_string()).or_default();
            *n += 1;
            if *n >= 7 {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the held batch is kept alive"
        );
    }
    std::fs::rename(&away, &data).unwrap();
    eventually(
        Duration::from_secs(30),
        "400 rows after the outage",
        || async { sqlite_count(&db, TABLE) == 400 },
    )
    .await;
    assert!(
        dlq_messages(&js).await.is_empty(),
        "an outage is not a reason to dead-letter"
    );
    let info = common::consumer_info(&js, "POISON", "jetsink").await;
    assert_eq!(info.num_redelivered, 0, "no delivery budget was burnt");
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_the_server_gave_up_on_is_rescued_from_the_stream_by_the_advisory() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    // Another worker on the same durable consumer takes the message twice and crashes
    // each time (never ACKs): its deliveries are used up without jetsink seeing them.
    let consumer = js
        .get_stream("POISON")
        .await
        .unwrap()
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("jetsink".into()),
            filter_subject: "poison.>".into(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(3),
            max_deliver: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    js.publish("poison.jobs", "lost job".into())
        .await
        .unwrap()
        .await
        .unwrap();
    // A pull that waits in the server until a delivery is due: the redelivery comes when
    // the server's AckWait ends, with no sleep on this side.
    let take = || async {
        use futures::StreamExt;
        let mut batch = consumer
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(20))
            .messages()
            .await
            .unwrap();
        batch.next().await.expect("a delivery").unwrap()
    };
    let first = take().await;
    assert_eq!(first.info().unwrap().delivered, 1);
    let second = take().await;
    assert_eq!(second.info().unwrap().delivered, 2);
    // jetsink starts while the last delivery is still out; when its AckWait ends the
    // server gives up and says so in an advisory.
    let mut cfg = sink_config(&server, Some(dlq_config()), 2);
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(3_000);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let db = dir.path().join("data/p.db");
    poison_table(&db);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(20), "the dead letter", || async {
        dlq_messages(&js).await.len() == 1
    })
    .await;
    let dl = &dlq_messages(&js).await[0];
    assert_eq!(&dl.payload[..], b"lost job");
    let h = |n: &str| {
        dl.headers
            .get(n)
            .map(|v| v.as_str().to_string())
            .unwrap_or_default()
    };
    assert_eq!(h("Jetsink-Reason"), "max_deliveries");
    assert_eq!(h("Jetsink-Original-Sequence"), "1");
    assert_eq!(h("Jetsink-Delivered"), "2");
    assert_eq!(
        metric(&listen, "jetsink_max_deliveries_total{sink=\"main\"}").await,
        Some(1.0)
    );
    assert_eq!(sqlite_count(&db, TABLE), 0, "the message was never written");
    d.stop_cleanly();
}
