//! The delayed-NAK randomizer against a real server: every message lands exactly once
//! (checked through the server's delivery count and ACK floor, not the table's key),
//! the committed order measurably differs from the publish order, no message is delayed
//! twice, the delayed window stays within `max_window`, and a consumer that cannot carry
//! the window is refused at start with the reason.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

const N: usize = 5_000;
const MAX_WINDOW: u64 = 1_000;

fn randomized(server: &NatsServer, max_ack_pending: i64) -> serde_json::Value {
    let mut cfg = config(
        server,
        "SHUFFLE",
        "shuffle.>",
        json!({"type": "sqlite", "path": "data/r.db", "table": "events"}),
        json!({
            "batch_size": 500,
            "batch_timeout_ms": 200,
            "randomizer": {
                "enabled": true,
                "process_immediately_probability": 0.5,
                "min_delay_ms": 50,
                "max_delay_ms": 500,
                "max_window": MAX_WINDOW
            }
        }),
    );
    cfg["sinks"]["main"]["source"]["max_ack_pending"] = json!(max_ack_pending);
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(10_000);
    cfg
}

async fn window_gauge(listen: &str) -> Option<u64> {
    metric_value(listen, "jetsink_randomizer_window{sink=\"main\"}")
        .await
        .map(|v| v as u64)
}

/// Pairs out of order, over all pairs: 0 for identical order, about 0.5 for a shuffle.
fn normalized_kendall_tau(order: &[i64]) -> f64 {
    let n = order.len();
    let mut inversions = 0u64;
    for i in 0..n {
        for j in i + 1..n {
            if order[i] > order[j] {
                inversions += 1;
            }
        }
    }
    inversions as f64 / (n as f64 * (n as f64 - 1.0) / 2.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn randomized_delivery_lands_everything_once_out_of_order_within_the_window() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUFFLE", "shuffle.>").await;
    publish_n(&js, "shuffle.jobs", N).await;
    let cfg = randomized(&server, 5_000);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/r.db");
    let mut max_window = 0u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while sqlite_count(&db, "events") < N as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out draining\n{}",
            d.log_text()
        );
        if let Some(w) = window_gauge(&listen).await {
            max_window = max_window.max(w);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eventually(Duration::from_secs(20), "consumer drained", || async {
        consumer_state(&js, "SHUFFLE", "jetsink").await == (0, 0)
    })
    .await;
    assert!(max_window > 0, "the randomizer delayed something");
    assert!(max_window <= MAX_WINDOW, "window reached {max_window}");

    let conn = rusqlite::Connection::open(&db).unwrap();
    let (rows, distinct, max_delivered): (i64, i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), COUNT(DISTINCT idempotency_key), MAX(delivered) FROM events",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (rows, distinct),
        (N as i64, N as i64),
        "every message exactly once"
    );
    assert!(
        max_delivered <= 2,
        "no message was delayed twice (max delivered {max_delivered})"
    );
    let mut stmt = conn
        .prepare("SELECT stream_sequence FROM events ORDER BY rowid")
        .unwrap();
    let order: Vec<i64> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let tau = normalized_kendall_tau(&order);
    assert!(
        tau > 0.01,
        "committed order is measurably shuffled (tau {tau})"
    );
    let delayed: i64 = conn
        .query_row("SELECT COUNT(*) FROM events WHERE delivered = 2", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(delayed > 0, "some messages were delayed once");
    // Written once, judged by the server rather than by the table's unique key (which
    // would absorb a second write): every message is ACKed, and the server made exactly
    // one delivery per message plus one per randomizer delay. A message committed and then
    // delivered again (a lost or late ACK) would be one delivery more.
    let info = common::consumer_info(&js, "SHUFFLE", "jetsink").await;
    assert_eq!(
        info.ack_floor.stream_sequence, N as u64,
        "every message ACKed"
    );
    assert_eq!(
        info.delivered.consumer_sequence,
        N as u64 + delayed as u64,
        "deliveries: one per message plus one per delayed message ({delayed})"
    );
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_whose_max_ack_pending_cannot_hold_the_window_is_refused_at_start() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = randomized(&server, 1_200);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let status = d
        .wait_exit(Duration::from_secs(15))
        .expect("exits by itself");
    assert_eq!(status.code(), Some(78));
    let (code, out, err) = jetsink(
        &[
            "validate",
            "--config",
            dir.path().join("jetsink.json").to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code, 78);
    let text = format!("{out}{err}");
    assert!(text.contains("sinks.main.delivery.randomizer"), "{text}");
    assert!(text.contains("max_ack_pending"), "{text}");
}

/// With `adaptive_source: "server"` the randomizer counts what the server holds
/// outstanding on the consumer, so messages another reader holds unacknowledged (here the
/// test, standing in for a second instance) fill the window: P = 0 would delay every first
/// delivery, and with the consumer's window full it delays none. With the default source
/// the same run delays. Both are certain, not likely: P = 0 delays with probability 1 while
/// the window has room, and the server's count is read at binding, before the first pull.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_fed_randomizer_counts_another_readers_outstanding_messages_as_its_window() {
    let (server_fed, by_own_window) = tokio::join!(
        delayed_while_another_reader_holds("server", "SRVFED"),
        delayed_while_another_reader_holds("window", "OWNWIN")
    );
    assert_eq!(
        server_fed, 0.0,
        "the consumer's window was full: nothing delayed"
    );
    assert!(
        by_own_window > 0.0,
        "the own window was empty: first deliveries delayed"
    );
}

/// Publishes 200 messages, holds 50 of them unacknowledged on the sink's consumer, runs a
/// P = 0 randomizer (max_window 20, batch 10: the server's 50 less 2 × 10 in hand fill it)
/// with `source` until the other 150 are rows, then NAKs the 50 and waits for all 200.
/// Returns how many first deliveries the randomizer delayed meanwhile.
async fn delayed_while_another_reader_holds(source: &str, stream: &str) -> f64 {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let subject = format!("{}.x", stream.to_lowercase());
    create_stream(&js, stream, &subject).await;
    publish_n(&js, &subject, 200).await;
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream(stream)
        .await
        .unwrap()
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("jetsink".into()),
            filter_subject: subject.clone(),
            ack_wait: Duration::from_secs(60),
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .expect("the sink's consumer");
    let mut held = Vec::new();
    while held.len() < 50 {
        let mut batch = consumer
            .fetch()
            .max_messages(50 - held.len())
            .messages()
            .await
            .expect("fetch");
        while let Some(m) = futures::StreamExt::next(&mut batch).await {
            held.push(m.expect("a message"));
        }
    }
    let mut cfg = config(
        &server,
        stream,
        &subject,
        json!({"type": "sqlite", "path": "data/r.db", "table": "events"}),
        json!({
            "batch_size": 10,
            "batch_timeout_ms": 200,
            "randomizer": {
                "enabled": true,
                "process_immediately_probability": 0.0,
                "min_delay_ms": 50,
                "max_delay_ms": 200,
                "max_window": 20,
                "adaptive": true,
                "adaptive_source": source
            }
        }),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(60_000);
    cfg["sinks"]["main"]["source"]["max_ack_pending"] = json!(-1);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/r.db");
    d.eventually(
        Duration::from_secs(60),
        "the 150 not held are rows",
        || async { sqlite_count(&db, "events") == 150 },
    )
    .await;
    let delayed = metric_value(&listen, "jetsink_randomizer_delayed_total{sink=\"main\"}")
        .await
        .expect("the randomizer's counter");
    for m in held {
        m.ack_with(async_nats::jetstream::AckKind::Nak(None))
            .await
            .expect("NAK a held message");
    }
    d.eventually(Duration::from_secs(60), "all 200 are rows", || async {
        sqlite_count(&db, "events") == 200
    })
    .await;
    d.stop_cleanly();
    delayed
}

#[test]
fn kendall_tau_of_known_orders() {
    assert_eq!(normalized_kendall_tau(&[1, 2, 3, 4]), 0.0);
    assert_eq!(normalized_kendall_tau(&[4, 3, 2, 1]), 1.0);
    assert!((normalized_kendall_tau(&[2, 1, 3, 4]) - 1.0 / 6.0).abs() < 1e-9);
}
