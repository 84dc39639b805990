//! A message whose header block the NATS client cannot read, published raw over a plain
//! TCP socket (well-behaved clients refuse to send one) between 200 good messages, against
//! a process running two sinks on two streams.
//!
//! The client drops the connection a delivery of such a message arrives on. Each sink has
//! its own connection, so the other sink sees no failed pull and no reconnect; the
//! affected sink reads its outstanding messages raw after the drop, dead-letters the
//! unreadable one with class `malformed_message` and its header block preserved, and
//! writes every good message, none of them dead-lettered.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use async_nats::jetstream;
use base64::Engine;
use common::*;
use serde_json::json;

/// Publishes one message with a raw header block, the way a misbehaving client would.
fn raw_hpub(server: &NatsServer, subject: &str, headers: &[u8], payload: &[u8]) {
    let stream = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("INFO");
    assert!(line.starts_with("INFO"), "{line}");
    let mut w = stream;
    w.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\n")
        .expect("CONNECT");
    let mut frame = format!(
        "HPUB {subject} {} {}\r\n",
        headers.len(),
        headers.len() + payload.len()
    )
    .into_bytes();
    frame.extend_from_slice(headers);
    frame.extend_from_slice(payload);
    frame.extend_from_slice(b"\r\nPING\r\n");
    w.write_all(&frame).expect("HPUB");
    loop {
        line.clear();
        reader.read_line(&mut line).expect("PONG");
        assert!(
            !line.starts_with("-ERR"),
            "server refused the publish: {line}"
        );
        if line.starts_with("PONG") {
            return;
        }
    }
}

async fn publish_good(js: &jetstream::Context, subject: &str, from: usize, to: usize) {
    for i in from..to {
        js.publish(subject.to_string(), format!("{{\"i\":{i}}}").into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
}

fn two_sinks(server: &NatsServer, listen: &str) -> serde_json::Value {
    let source = |stream: &str, subject: &str| {
        json!({
            "stream": stream,
            "subjects": subject,
            "consumer": "jetsink",
            // Short, so the batch-mates lost with the connection come back soon; the
            // test waits on what landed, never on this time.
            "ack_wait_ms": 3000,
            "max_deliver": 3,
            "create_stream": {"subjects": [subject]}
        })
    };
    let delivery = json!({"batch_size": 500, "batch_timeout_ms": 200,
                          "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 500}});
    json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": listen},
        "logging": {"level": "info"},
        "sinks": {
            "poisoned": {
                "source": source("POISONED", "bad.>"),
                "delivery": delivery,
                "destination": {"type": "file", "directory": "out-poisoned"},
                "dead_letter": {"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}}
            },
            "clean": {
                "source": source("CLEAN", "good.>"),
                "delivery": delivery,
                "destination": {"type": "file", "directory": "out-clean"}
            }
        }
    })
}

/// Every dead-letter copy: (its headers, its payload).
async fn dlq_copies(js: &jetstream::Context) -> Vec<(async_nats::HeaderMap, Vec<u8>)> {
    stream_messages(js, "DLQ", "dlq.>")
        .await
        .into_iter()
        .map(|m| (m.headers, m.payload.to_vec()))
        .collect()
}

async fn metric(listen: &str, series: &str) -> f64 {
    metric_value(listen, series).await.unwrap_or(-1.0)
}

async fn a_poison_disturbs_only_its_own_sink(poison_headers: &[u8]) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let js = server.js().await;
    create_stream(&js, "POISONED", "bad.>").await;
    create_stream(&js, "CLEAN", "good.>").await;
    publish_good(&js, "bad.x", 0, 100).await;
    raw_hpub(&server, "bad.x", poison_headers, b"{\"poison\":true}");
    publish_good(&js, "bad.x", 100, 200).await;
    publish_good(&js, "good.x", 0, 200).await;

    let cfg = write_config(dir.path(), &two_sinks(&server, &listen));
    let daemon = Daemon::start(&cfg, dir.path());
    let poisoned_out = dir.path().join("out-poisoned");
    let clean_out = dir.path().join("out-clean");
    eventually(
        Duration::from_secs(90),
        "200 good messages written by each sink, the poison dead-lettered",
        || async {
            distinct_keys(&jsonl_lines(&poisoned_out)).len() == 200
                && distinct_keys(&jsonl_lines(&clean_out)).len() == 200
                && dlq_copies(&js).await.len() == 1
        },
    )
    .await;
    eventually(Duration::from_secs(30), "every message settled", || async {
        consumer_state(&js, "POISONED", "jetsink").await == (0, 0)
            && consumer_state(&js, "CLEAN", "jetsink").await == (0, 0)
    })
    .await;

    let keys = distinct_keys(&jsonl_lines(&poisoned_out));
    assert!(
        !keys.contains("POISONED:101"),
        "the poison is never written"
    );
    assert!(keys.contains("POISONED:100") && keys.contains("POISONED:102"));

    let copies = dlq_copies(&js).await;
    assert_eq!(copies.len(), 1, "only the poison is dead-lettered");
    let (headers, payload) = &copies[0];
    let get = |n: &str| headers.get(n).map(|v| v.as_str().to_string());
    assert_eq!(
        get("Jetsink-Error-Class").as_deref(),
        Some("malformed_message")
    );
    assert_eq!(get("Jetsink-Original-Sequence").as_deref(), Some("101"));
    assert_eq!(get("Jetsink-Sink").as_deref(), Some("poisoned"));
    let raw = base64::engine::general_purpose::STANDARD
        .decode(get("Jetsink-Original-Headers-Base64").expect("raw header block"))
        .expect("base64");
    assert_eq!(
        raw, poison_headers,
        "the raw header block is recoverable byte for byte"
    );
    assert_eq!(payload, b"{\"poison\":true}");

    assert_eq!(
        metric(
            &listen,
            "jetsink_malformed_messages_total{sink=\"poisoned\"}"
        )
        .await,
        1.0
    );
    assert!(
        metric(
            &listen,
            "jetsink_nats_reconnects_total{connection=\"poisoned\"}"
        )
        .await
            >= 1.0,
        "the poison did drop its sink's connection"
    );
    assert_eq!(
        metric(
            &listen,
            "jetsink_dlq_published_total{reason=\"max_deliveries\",sink=\"poisoned\"}"
        )
        .await
        .max(0.0),
        0.0,
        "no good message exhausted its deliveries"
    );
    assert_eq!(
        metric(&listen, "jetsink_fetch_errors_total{sink=\"clean\"}").await,
        0.0,
        "the other sink saw no failed pull"
    );
    assert_eq!(
        metric(
            &listen,
            "jetsink_nats_reconnects_total{connection=\"clean\"}"
        )
        .await,
        0.0,
        "the other sink's connection never dropped"
    );
    assert_eq!(metric(&listen, "jetsink_nats_connected").await, 1.0);
    drop(daemon);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_name_with_a_space_is_dead_lettered_and_disturbs_no_other_sink() {
    a_poison_disturbs_only_its_own_sink(b"NATS/1.0\r\nBad Name: x\r\n\r\n").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_header_block_that_is_not_utf8_is_dead_lettered_and_disturbs_no_other_sink() {
    a_poison_disturbs_only_its_own_sink(b"NATS/1.0\r\nX-Bin: \xff\xfe\xfd\r\n\r\n").await;
}

/// A sink holding a work-queue stream's messages in a shuffle buffer when its connection
/// drops, with messages whose header blocks the client reads fine although a naive rule
/// would call them unreadable: a status on the version line (`NATS/1.0 200`, `NATS/1.0 503
/// …`), and more header values than the envelope keeps. The scan after the drop must
/// settle none of them (a TERM deletes from a work-queue stream): the status messages are
/// written, and the one with too many headers is refused by the pipeline's own rule and
/// stays in the stream.
#[tokio::test(flavor = "multi_thread")]
async fn messages_with_a_status_line_or_many_headers_survive_the_scan_after_a_drop() {
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    js.get_or_create_stream(jetstream::stream::Config {
        name: "JOBS".into(),
        subjects: vec!["jobs.>".into()],
        retention: jetstream::stream::RetentionPolicy::WorkQueue,
        ..Default::default()
    })
    .await
    .expect("work-queue stream");
    publish_good(&js, "jobs.a", 0, 5).await; // 1-5
    raw_hpub(
        &server,
        "jobs.a",
        b"NATS/1.0 200\r\nX-Kind: ok\r\n\r\n",
        b"{\"status\":200}",
    ); // 6
    publish_good(&js, "jobs.a", 5, 7).await; // 7-8
    raw_hpub(
        &server,
        "jobs.a",
        b"NATS/1.0 503 Odd Text\r\n\r\n",
        b"{\"status\":503}",
    ); // 9
    let mut many = b"NATS/1.0\r\n".to_vec();
    for i in 0..1_100 {
        many.extend_from_slice(format!("H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    raw_hpub(&server, "jobs.a", &many, b"{\"many\":true}"); // 10
    publish_good(&js, "jobs.a", 7, 10).await; // 11-13

    let url = server.url();
    let sink = |shuffle: bool, listen: &str| {
        let mut delivery = json!({"batch_size": 100, "batch_timeout_ms": 200});
        if shuffle {
            // Held far longer than the test: only the hand-back at SIGTERM empties it.
            delivery["shuffle"] = json!({"buffer": 500, "flush_ms": 600_000});
        }
        json!({
            "nats": {"servers": [url], "connect_timeout_ms": 2000},
            "http": {"listen": listen},
            "sinks": {"jobs": {
                // AckWait far beyond the test, so nothing comes back by the clock.
                "source": {"stream": "JOBS", "subjects": "jobs.>", "consumer": "jetsink",
                           "ack_wait_ms": 600_000},
                "delivery": delivery,
                "destination": {"type": "file", "directory": "out"}
            }}
        })
    };
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = write_config(dir.path(), &sink(true, &listen));
    let mut daemon = Daemon::start(&cfg, dir.path());
    let m = |series: &str| {
        let (listen, series) = (listen.clone(), series.to_string());
        async move { metric(&listen, &series).await }
    };
    eventually(
        Duration::from_secs(60),
        "the 12 readable messages held in the shuffle buffer, the 13th refused",
        || async {
            m("jetsink_shuffle_buffered{sink=\"jobs\"}").await == 12.0
                && m("jetsink_messages_rejected_total{sink=\"jobs\"}").await == 1.0
        },
    )
    .await;

    server.restart();
    eventually(
        Duration::from_secs(60),
        "a completed scan for unreadable messages after the drop",
        || async { m("jetsink_unreadable_scans_total{sink=\"jobs\"}").await >= 1.0 },
    )
    .await;
    assert_eq!(
        m("jetsink_malformed_messages_total{sink=\"jobs\"}").await,
        0.0
    );
    assert_eq!(
        m("jetsink_messages_terminated_total{sink=\"jobs\"}").await,
        0.0
    );
    daemon.stop_cleanly();
    let js = server.js().await;
    assert_eq!(
        stored(&js, "JOBS").await,
        13,
        "nothing deleted from the work queue"
    );

    // Written by a sink without a buffer: every readable message lands, once.
    let listen2 = format!("127.0.0.1:{}", free_port());
    let cfg2 = dir.path().join("plain.json");
    std::fs::write(&cfg2, sink(false, &listen2).to_string()).unwrap();
    let _daemon = Daemon::start(&cfg2, dir.path());
    let out = dir.path().join("out");
    eventually(Duration::from_secs(60), "12 messages written", || async {
        distinct_keys(&jsonl_lines(&out)).len() == 12
    })
    .await;
    let keys = distinct_keys(&jsonl_lines(&out));
    for seq in [6, 9] {
        assert!(
            keys.contains(&format!("JOBS:{seq}")),
            "JOBS:{seq} written: {keys:?}"
        );
    }
    assert!(
        !keys.contains("JOBS:10"),
        "too many headers: refused, never written"
    );
    eventually(Duration::from_secs(30), "the 12 ACKed", || async {
        stored(&server.js().await, "JOBS").await == 1
    })
    .await;
}
