//! A failing destination holds its batch: nothing is ACKed, fetching stops so delivery
//! counts do not climb, and everything drains once the destination is back.
//!
//! Tests run as root in CI, where permission bits do not stop writes, so the failure is
//! made by moving the destination's directory away (a vanished volume) and back.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::json;

async fn hold_while_missing(
    destination: serde_json::Value,
    data_dir: &str,
    count: impl Fn(&Path) -> u64,
) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "FAIL", "fail.>").await;
    publish_n(&js, "fail.x", 500).await;
    // ack_wait 2 s: without progress ACKs a held batch would be redelivered within the hold.
    let mut cfg = config(
        &server,
        "FAIL",
        "fail.>",
        destination,
        json!({"batch_size": 100, "batch_timeout_ms": 200,
        "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 300}}),
    );
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    let data = dir.path().join(data_dir);
    eventually(Duration::from_secs(30), "first 500 stored", || async {
        count(&data) == 500
    })
    .await;
    eventually(Duration::from_secs(10), "acked", || async {
        consumer_state(&js, "FAIL", "jetsink").await == (0, 0)
    })
    .await;

    let away = dir.path().join("moved-away");
    std::fs::rename(&data, &away).unwrap();
    publish_n(&js, "fail.x", 300).await;
    // Let the daemon fetch one batch and fail on it.
    eventually(Duration::from_secs(10), "a batch is held", || async {
        consumer_state(&js, "FAIL", "jetsink").await.1 > 0
    })
    .await;
    assert_batch_held(&js, &daemon, "FAIL", 300).await;

    std::fs::rename(&away, &data).unwrap();
    eventually(
        Duration::from_secs(30),
        "all 800 stored after the fix",
        || async { count(&data) == 800 },
    )
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "FAIL", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn sqlite_directory_gone_holds_the_batch_and_drains_after_it_returns() {
    hold_while_missing(
        json!({"type": "sqlite", "path": "data/db/f.db", "table": "events"}),
        "data/db",
        |d| sqlite_count(&d.join("f.db"), "events"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn file_directory_gone_holds_the_batch_and_drains_after_it_returns() {
    hold_while_missing(
        json!({"type": "file", "directory": "data/events"}),
        "data/events",
        |d| distinct_keys(&jsonl_lines(d)).len() as u64,
    )
    .await;
}
