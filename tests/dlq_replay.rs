//! `jetsink dlq replay` against a real server: a replay interrupted between the republish
//! and the removal of the copy, then run again, lands in the original stream once; a copy
//! stored without its payload is not replayed without `--force`.
//!
//! The copies are published by the test with the headers jetsink's dead-letter queue
//! writes, so the interrupted run is reproduced exactly: the copy is put back into the
//! dead-letter stream after the first replay removed it, which is the state a crash
//! between the republish and the delete leaves.

use crate::common;

use std::path::Path;

use async_nats::jetstream;
use async_nats::HeaderMap;
use common::*;
use serde_json::json;

/// A config whose sink `main` reads ORDERS and dead-letters to `dlq.main.<subject>`.
fn replay_config(server: &NatsServer, dir: &Path) -> std::path::PathBuf {
    let mut cfg = config(
        server,
        "ORDERS",
        "orders.>",
        json!({"type": "file", "directory": "out"}),
        json!({}),
    );
    cfg["sinks"]["main"]["dead_letter"] = json!({"subject": "dlq.{sink}.{subject}"});
    write_config(dir, &cfg)
}

async fn streams(js: &jetstream::Context) {
    create_stream(js, "ORDERS", "orders.>").await;
    create_stream(js, "DLQ", "dlq.>").await;
}

/// Publishes the original of sequence `original` and its dead-letter copy, as jetsink's
/// dead-letter queue would have made it; `omitted` adds `Jetsink-Payload-Omitted`.
async fn copy(js: &jetstream::Context, original: u64, omitted: bool) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("Jetsink-Error-Class", "permanent");
    h.insert("Jetsink-Error", "poison payload refused");
    h.insert("Jetsink-Sink", "main");
    h.insert("Jetsink-Original-Subject", "orders.eu");
    h.insert("Jetsink-Original-Stream", "ORDERS");
    h.insert("Jetsink-Original-Sequence", original.to_string().as_str());
    h.insert("Jetsink-Reason", "destination");
    let payload: &'static [u8] = if omitted {
        h.insert("Jetsink-Payload-Omitted", "include_payload is false");
        b""
    } else {
        br#"{"i":1}"#
    };
    js.publish_with_headers("dlq.main.orders.eu".to_string(), h.clone(), payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
    h
}

async fn last_sequence(js: &jetstream::Context, stream: &str) -> (u64, u64) {
    let mut s = js.get_stream(stream).await.unwrap();
    let info = s.info().await.unwrap();
    (info.state.last_sequence, info.state.messages)
}

fn replay(config: &Path, dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "dlq",
        "replay",
        "--config",
        config.to_str().unwrap(),
        "--sink",
        "main",
    ];
    args.extend_from_slice(extra);
    jetsink(&args, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replay_interrupted_before_removing_the_copy_and_run_again_lands_once() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    streams(&js).await;
    // The original, without a Nats-Msg-Id, at ORDERS sequence 1.
    js.publish("orders.eu".to_string(), br#"{"i":1}"#.as_slice().into())
        .await
        .unwrap()
        .await
        .unwrap();
    let headers = copy(&js, 1, false).await;
    let path = replay_config(&server, dir.path());

    let (code, out, err) = replay(&path, dir.path(), &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("replayed 1 of 1"), "{out}");
    assert_eq!(
        last_sequence(&js, "ORDERS").await,
        (2, 2),
        "the replay landed"
    );
    assert_eq!(last_sequence(&js, "DLQ").await.1, 0, "the copy is removed");
    let replayed = js
        .get_stream("ORDERS")
        .await
        .unwrap()
        .get_raw_message(2)
        .await
        .unwrap();
    assert_eq!(
        replayed.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some("ORDERS:1"),
        "a replay of an original without an id carries <stream>:<sequence> of the original"
    );

    // The state a crash between the republish and the delete leaves: the copy is still
    // in the dead-letter stream (stored again under a new dead-letter sequence).
    let mut again = headers.clone();
    again.insert("Jetsink-Error", "poison payload refused (again)");
    js.publish_with_headers(
        "dlq.main.orders.eu".to_string(),
        again,
        br#"{"i":1}"#.as_slice().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    assert_eq!(last_sequence(&js, "DLQ").await.1, 1);

    let (code, out, err) = replay(&path, dir.path(), &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("already replayed (stream ORDERS sequence 2"),
        "{out}"
    );
    assert_eq!(
        last_sequence(&js, "ORDERS").await,
        (2, 2),
        "the second replay of the same copy did not land again"
    );
    assert_eq!(
        last_sequence(&js, "DLQ").await.1,
        0,
        "the copy of a replay that already landed is removed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_stored_without_its_payload_is_replayed_only_with_force() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    streams(&js).await;
    js.publish("orders.eu".to_string(), br#"{"i":1}"#.as_slice().into())
        .await
        .unwrap()
        .await
        .unwrap();
    copy(&js, 1, true).await;
    let path = replay_config(&server, dir.path());

    let (code, out, err) = replay(&path, dir.path(), &[]);
    assert_ne!(code, 0, "a refused copy fails the run: {out}{err}");
    assert!(out.contains("refused (dlq seq 1"), "{out}");
    assert!(
        err.contains("dlq seq 1") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        last_sequence(&js, "ORDERS").await,
        (1, 1),
        "nothing republished"
    );
    assert_eq!(last_sequence(&js, "DLQ").await.1, 1, "the copy stays");

    let (code, out, err) = replay(&path, dir.path(), &["--force"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("replayed 1 of 1"), "{out}");
    assert_eq!(last_sequence(&js, "ORDERS").await, (2, 2));
    assert_eq!(last_sequence(&js, "DLQ").await.1, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_another_run_removed_first_is_recognised_from_the_servers_answer() {
    // What the server answers when a copy is deleted twice, as a second replay run that
    // lost the race to remove it sees: recognised as "already gone", not as a failure.
    let server = NatsServer::start();
    let js = server.js().await;
    streams(&js).await;
    copy(&js, 1, false).await;
    let dlq = js.get_stream("DLQ").await.unwrap();
    assert!(dlq.delete_message(1).await.unwrap());
    let again = dlq.delete_message(1).await.expect_err("deleted already");
    assert!(
        jetsink::cmd::dlq_replay::already_removed(&again),
        "not recognised: {again:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_replays_land_each_copy_once_and_all_exit_0() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    streams(&js).await;
    const COPIES: u64 = 300;
    // The originals (ORDERS 1..=300, without ids), then their dead-letter copies.
    for _ in 1..=COPIES {
        js.publish("orders.eu".to_string(), br#"{"i":1}"#.as_slice().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    for original in 1..=COPIES {
        copy(&js, original, false).await;
    }
    let path = replay_config(&server, dir.path());
    // Three runs started together read the same copies and race to remove them.
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let (path, dir) = (path.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || replay(&path, &dir, &[]))
        })
        .collect();
    for run in runs {
        let (code, out, err) = run.join().unwrap();
        assert_eq!(
            code, 0,
            "a run that lost a race failed although nothing did:\n{out}{err}"
        );
    }
    let mut replayed = stream_messages(&js, "ORDERS", "orders.>").await;
    replayed.retain(|m| m.sequence > COPIES);
    let ids: std::collections::BTreeSet<String> = replayed
        .iter()
        .filter_map(|m| m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string()))
        .collect();
    assert_eq!(replayed.len() as u64, COPIES, "each copy landed once");
    assert_eq!(ids.len() as u64, COPIES, "{ids:?}");
    assert_eq!(last_sequence(&js, "DLQ").await.1, 0, "every copy removed");
}
