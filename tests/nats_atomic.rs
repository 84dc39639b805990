//! The `nats` republish destination with `atomic: true`: on nats-server 2.12.1+ every
//! batch lands whole (its copies share one `Nats-Batch-Id`, numbered 1..count), across a
//! SIGKILL of jetsink the target holds each message exactly once, and a batch holding a
//! copy the target already stored (a redelivery after a commit whose ACK was lost) is
//! absorbed; a target stream without `allow_atomic` is refused at start-up (exit 78), and
//! so is a server before 2.12.1 (tested on 2.9). Each test returns with a printed reason
//! when the server binary is on the other side of 2.12.1.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use common::*;
use serde_json::json;

fn atomic_capable() -> bool {
    nats_server_version().is_some_and(|v| v >= (2, 12, 1))
}

fn atomic_destination(server: &NatsServer, stream: &str) -> serde_json::Value {
    json!({"type": "nats", "servers": [server.url()], "stream": stream,
           "subject": "copy.{subject}", "atomic": true,
           "request_timeout_ms": 2000, "reconnect_delay_max_ms": 500})
}

#[tokio::test(flavor = "multi_thread")]
async fn atomic_batches_land_whole_and_a_redelivered_batch_is_absorbed_across_a_sigkill() {
    if !atomic_capable() {
        eprintln!(
            "skipped: atomic batch publish with Nats-Msg-Id needs nats-server 2.12.1+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    const N: usize = 10_000;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_stream(&js, "ASRC", "asrc.>").await;
    create_target_stream(&js, "ADST", "copy.>", |c| c.allow_atomic_publish = true).await;
    publish_n(&js, "asrc.x", N).await;
    // The copy of source message 7 is already in the target, as if a commit had been
    // stored and its ACK lost: the server refuses the atomic batch holding it (10201).
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", "ASRC:7");
    js.publish_with_headers("copy.asrc.x", h, "seeded".into())
        .await
        .expect("publish")
        .await
        .expect("puback");

    let cfg = config(
        &server,
        "ASRC",
        "asrc.>",
        atomic_destination(&server, "ADST"),
        json!({"batch_size": 250, "batch_timeout_ms": 200}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "a part republished", || async {
        stored(&js, "ADST").await >= (N / 4) as u64
    })
    .await;
    daemon.kill();
    assert!(
        daemon
            .log_text()
            .contains("publishing it message by message"),
        "the batch holding the stored copy was absorbed: {}",
        daemon.log_text()
    );
    assert!(
        stored(&js, "ADST").await < N as u64,
        "the kill came before the end of the drain"
    );
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(60),
        "source consumer drained",
        || async { drained(&js, "ASRC").await },
    )
    .await;
    daemon.stop_cleanly();
    assert_eq!(stored(&js, "ADST").await, N as u64, "each message once");

    let copies = read_ordered(&js, "ADST", N).await;
    let mut sequences = HashSet::new();
    // Batch id -> (batch sequences seen, the count its committing copy carries).
    let mut batches: BTreeMap<String, (Vec<u64>, bool)> = BTreeMap::new();
    for m in &copies {
        let id = header_value(m, "Nats-Msg-Id").expect("message id");
        sequences.insert(id.clone());
        if let Some(batch) = header_value(m, "Nats-Batch-Id") {
            let seq: u64 = header_value(m, "Nats-Batch-Sequence")
                .expect("batch sequence")
                .parse()
                .expect("a number");
            let entry = batches.entry(batch).or_default();
            entry.0.push(seq);
            entry.1 |= header_value(m, "Nats-Batch-Commit").as_deref() == Some("1");
        }
    }
    assert_eq!(sequences.len(), N, "every source sequence once");
    assert!(sequences.contains("ASRC:7"));
    assert!(batches.len() >= 10, "most copies came in atomic batches");
    for (id, (mut seqs, committed)) in batches {
        seqs.sort_unstable();
        let whole: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, whole, "batch {id} stored whole");
        assert!(committed, "batch {id} holds its commit");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_stream_without_allow_atomic_is_refused_at_start() {
    if !atomic_capable() {
        eprintln!(
            "skipped: atomic batch publish needs nats-server 2.12.1+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_target_stream(&js, "PLAIN", "copy.>", |_| {}).await;
    let cfg = config(
        &server,
        "NSRC",
        "nsrc.>",
        atomic_destination(&server, "PLAIN"),
        json!({"batch_size": 100}),
    );
    let log = refused_at_start(dir.path(), &cfg, 78);
    assert!(log.contains("stream PLAIN has allow_atomic false"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn atomic_is_refused_at_start_on_a_server_before_2_12_1() {
    if atomic_capable() {
        eprintln!(
            "skipped: this server ({:?}) supports atomic batches; the refusal is tested on 2.9",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let js = server.js().await;
    create_target_stream(&js, "OLD", "copy.>", |_| {}).await;
    let cfg = config(
        &server,
        "OSRC",
        "osrc.>",
        atomic_destination(&server, "OLD"),
        json!({"batch_size": 100}),
    );
    let log = refused_at_start(dir.path(), &cfg, 78);
    let (a, b, c) = nats_server_version().expect("version");
    assert!(log.contains("needs nats-server 2.12.1 or later"), "{log}");
    assert!(
        log.contains(&format!("{a}.{b}.{c}")),
        "names the version: {log}"
    );
}
