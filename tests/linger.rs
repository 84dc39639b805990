//! `delivery.linger_ms` end to end: a trickle written with a linger loses and duplicates
//! nothing, every written batch is counted in `jetsink_batch_messages`, and a batch still
//! lingering at SIGTERM is handed back like any other, never lost. Nothing here depends on
//! how the pulls happen to fall: the assertions hold under any scheduling.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// `jetsink_batch_messages`' count, its sum and the written batches of sink `main`.
async fn batch_figures(listen: &str) -> (f64, f64, f64) {
    let series = |s: &'static str| async move { metric_value(listen, s).await.unwrap_or(-1.0) };
    let count = series("jetsink_batch_messages_count{sink=\"main\"}").await;
    let sum = series("jetsink_batch_messages_sum{sink=\"main\"}").await;
    let committed = series("jetsink_batches_total{outcome=\"committed\",sink=\"main\"}").await;
    let isolated = series("jetsink_batches_total{outcome=\"isolated\",sink=\"main\"}").await;
    (count, sum, committed + isolated)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trickle_with_a_linger_is_written_exactly_once_and_every_batch_is_counted_by_size() {
    const N: usize = 200;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let cfg = config(
        &server,
        "TRICKLE",
        "trickle.>",
        json!({"type": "file", "directory": "data/events", "fsync": true}),
        json!({"batch_size": 50, "linger_ms": 1000}),
    );
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    daemon
        .wait_for_log(Duration::from_secs(30), "sink running")
        .await;
    let publisher = publish_paced(&js, "trickle.x", N, 400);
    let out = dir.path().join("data/events");
    eventually(Duration::from_secs(60), "every message written", || async {
        distinct_keys(&jsonl_lines(&out)).len() == N
    })
    .await;
    publisher.await.expect("publisher");
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "TRICKLE", "jetsink").await == (0, 0)
    })
    .await;
    // Each batch is counted once it is written, before its ACKs: wait until the
    // histogram holds the batches the counters hold.
    eventually(
        Duration::from_secs(10),
        "each written batch counted by size",
        || async {
            let (count, sum, written) = batch_figures(&listen).await;
            count > 0.0 && count == written && sum >= N as f64
        },
    )
    .await;
    daemon.stop_cleanly();
    assert_eq!(jsonl_lines(&out).len(), N, "no duplicates without crashes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_lingering_at_sigterm_is_handed_back_and_written_after_a_restart() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    // A linger far longer than the publishing, so the batch is most likely still lingering
    // at SIGTERM; whether it is or was already written, nothing may be lost.
    let cfg = config(
        &server,
        "LINGER",
        "linger.>",
        json!({"type": "file", "directory": "data/events", "fsync": true}),
        json!({"batch_size": 100, "linger_ms": 2400}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    daemon
        .wait_for_log(Duration::from_secs(30), "sink running")
        .await;
    publish_n(&js, "linger.x", 3).await;
    // The first message is delivered and its batch lingers for the others.
    eventually(
        Duration::from_secs(30),
        "the first message delivered",
        || async {
            let info = consumer_info(&js, "LINGER", "jetsink").await;
            info.delivered.stream_sequence >= 1
        },
    )
    .await;
    daemon.stop_cleanly();
    let out = dir.path().join("data/events");
    let mut again = Daemon::start(&path, dir.path());
    again
        .wait_for_log(Duration::from_secs(30), "sink running")
        .await;
    eventually(
        Duration::from_secs(30),
        "the three messages written",
        || async { distinct_keys(&jsonl_lines(&out)).len() == 3 },
    )
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "LINGER", "jetsink").await == (0, 0)
    })
    .await;
    again.stop_cleanly();
    assert_eq!(jsonl_lines(&out).len(), 3, "each message written once");
}

#[test]
fn bench_at_a_fixed_rate_publishes_from_a_process_of_its_own_and_loses_nothing() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url();
    let args = [
        "bench",
        "--server",
        &url,
        "--rate",
        "2000",
        "--messages",
        "2000",
        "--destination",
        "file",
        "--linger-ms",
        "5",
        "--json",
    ];
    let (code, out, err) =
        jetsink_within(&args, dir.path(), Duration::from_secs(120)).expect("bench ends");
    assert_eq!(code, 0, "{out}\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(report["publisher_separate"], true, "{report}");
    assert_eq!(report["linger_ms"], 5, "{report}");
    assert!(
        report["verified"]
            .as_str()
            .is_some_and(|v| v.contains("2000 distinct keys stored")),
        "{report}"
    );
}
