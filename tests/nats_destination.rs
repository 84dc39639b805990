//! The `nats` republish destination end to end: every message lands in the target stream
//! exactly once across a SIGKILL (the duplicate window absorbs the copies published
//! again), with its headers; a target server that is down holds the batch without an ACK
//! until it is back; a copy the target refuses for its size is dead-lettered while the
//! rest land; a template the source stream would read back is refused at start-up.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use serde_json::json;

/// Publishes `count` messages on `subject`, each with a `Trace` header, awaiting PubAcks
/// in groups so the publish is quick.
async fn publish_traced(js: &jetstream::Context, subject: &str, count: usize) {
    let mut acks = Vec::with_capacity(512);
    for i in 0..count {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Trace", format!("t-{i}").as_str());
        let ack = js
            .publish_with_headers(subject.to_string(), h, format!("{{\"i\":{i}}}").into())
            .await
            .expect("publish");
        acks.push(ack);
        if acks.len() == 512 {
            for a in acks.drain(..) {
                a.await.expect("puback");
            }
        }
    }
    for a in acks {
        a.await.expect("puback");
    }
}

fn destination(server: &NatsServer, stream: &str, subject: &str) -> serde_json::Value {
    json!({"type": "nats", "servers": [server.url()], "stream": stream,
           "subject": subject, "request_timeout_ms": 1000, "reconnect_delay_max_ms": 500})
}

#[tokio::test(flavor = "multi_thread")]
async fn republish_across_a_sigkill_stores_each_message_once_with_its_headers() {
    const N: usize = 20_000;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SRC", "src.>").await;
    create_target_stream(&js, "DST", "copy.>", |_| {}).await;
    publish_traced(&js, "src.orders", N).await;
    let cfg = config(
        &server,
        "SRC",
        "src.>",
        destination(&server, "DST", "copy.{token[1]}.{sink}"),
        json!({"batch_size": 250, "batch_timeout_ms": 200}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "a part republished", || async {
        stored(&js, "DST").await >= (N / 4) as u64
    })
    .await;
    daemon.kill();
    assert!(
        stored(&js, "DST").await < N as u64,
        "the kill came before the end of the drain"
    );
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(40),
        "source consumer drained",
        || async { drained(&js, "SRC").await },
    )
    .await;
    daemon.stop_cleanly();
    assert_eq!(stored(&js, "DST").await, N as u64, "duplicates absorbed");

    let copies = read_ordered(&js, "DST", N).await;
    let mut sequences = HashSet::new();
    for m in &copies {
        assert_eq!(m.subject.as_str(), "copy.orders.main");
        assert_eq!(
            header_value(m, "Jetsink-Source-Stream").as_deref(),
            Some("SRC")
        );
        let seq = header_value(m, "Jetsink-Source-Sequence").expect("source sequence");
        assert_eq!(
            header_value(m, "Nats-Msg-Id").as_deref(),
            Some(format!("SRC:{seq}").as_str())
        );
        let i: u64 = seq.parse::<u64>().expect("a number") - 1;
        assert_eq!(
            header_value(m, "Trace"),
            Some(format!("t-{i}")),
            "header kept"
        );
        assert_eq!(m.payload.as_ref(), format!("{{\"i\":{i}}}").as_bytes());
        sequences.insert(seq);
    }
    assert_eq!(sequences.len(), N, "every source sequence once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_server_down_holds_the_batch_unacked_until_it_returns() {
    let server = NatsServer::start();
    let mut target = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "FAIL", "fail.>").await;
    create_target_stream(&target.js().await, "DST", "out.>", |_| {}).await;
    publish_n(&js, "fail.x", 200).await;
    let mut cfg = config(
        &server,
        "FAIL",
        "fail.>",
        destination(&target, "DST", "out.{subject}"),
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 300}}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "first 200 acked", || async {
        drained(&js, "FAIL").await
    })
    .await;
    assert_eq!(stored(&target.js().await, "DST").await, 200);

    target.kill();
    publish_n(&js, "fail.x", 300).await;
    eventually(Duration::from_secs(10), "a batch is held", || async {
        consumer_state(&js, "FAIL", "jetsink").await.1 > 0
    })
    .await;
    assert_batch_held(&js, &daemon, "FAIL", 300).await;

    target.restart();
    let tjs = target.js().await;
    eventually(Duration::from_secs(30), "all 500 in the target", || async {
        stored(&tjs, "DST").await == 500
    })
    .await;
    eventually(Duration::from_secs(10), "source drained", || async {
        drained(&js, "FAIL").await
    })
    .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_too_large_for_the_target_is_dead_lettered_and_the_rest_land() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "BIG", "big.>").await;
    create_target_stream(&js, "DST", "out.>", |c| c.max_message_size = 1024).await;
    publish_n(&js, "big.x", 20).await;
    js.publish("big.x", vec![b'x'; 4096].into())
        .await
        .unwrap()
        .await
        .unwrap();
    publish_n(&js, "big.x", 20).await;
    let mut cfg = config(
        &server,
        "BIG",
        "big.>",
        destination(&server, "DST", "out.{subject}"),
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 300}}),
    );
    cfg["sinks"]["main"]["dead_letter"] =
        json!({"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}});
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "source drained", || async {
        drained(&js, "BIG").await
    })
    .await;
    daemon.stop_cleanly();
    assert_eq!(stored(&js, "DST").await, 40, "the rest landed");
    assert_eq!(stored(&js, "DLQ").await, 1, "the large one dead-lettered");
    let dead = read_ordered(&js, "DLQ", 1).await;
    assert_eq!(dead[0].payload.len(), 4096);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_template_the_source_stream_would_read_back_is_refused_at_start() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "LOOP", "loop.>").await;
    let cfg = config(
        &server,
        "LOOP",
        "loop.>",
        destination(&server, "LOOP", "loop.again.{subject}"),
        json!({"batch_size": 10}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    let status = daemon
        .wait_exit(Duration::from_secs(20))
        .expect("jetsink exits");
    assert_eq!(status.code(), Some(78), "{}", daemon.log_text());
    assert!(
        daemon.log_text().contains("a loop"),
        "{}",
        daemon.log_text()
    );
}
