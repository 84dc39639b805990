//! Nothing is lost when the daemon is SIGKILLed or the broker dies mid-drain: everything
//! not ACKed is redelivered and written idempotently.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

const N: usize = 10_000;

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_three_times_mid_drain_loses_nothing_in_sqlite_or_files() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "CRASH", "crash.>").await;
    // Half the messages wait in the stream, the rest are published while the daemon is
    // killed and restarted.
    publish_n(&js, "crash.x", N / 2).await;
    let mut publisher = None;
    // Two sinks on the same stream, one per destination, each with its own consumer.
    let cfg = json!({
        "nats": {"servers": [server.url()]},
        "http": {"enabled": false},
        "sinks": {
            "db": {
                "source": {"stream": "CRASH", "consumer": "to-db", "ack_wait_ms": 2000},
                "delivery": {"batch_size": 200, "batch_timeout_ms": 200},
                "destination": {"type": "sqlite", "path": "data/c.db", "table": "events"}
            },
            "files": {
                // A consumer with a backoff, as production ones often have: the server
                // redelivers after the step of each delivery (2 s), not after AckWait.
                "source": {"stream": "CRASH", "consumer": "to-files", "ack_wait_ms": 30000,
                           "max_deliver": 100, "backoff_ms": [2000, 2000, 2000]},
                "delivery": {"batch_size": 200, "batch_timeout_ms": 200},
                "destination": {"type": "file", "directory": "data/events"}
            }
        }
    });
    let path = write_config(dir.path(), &cfg);
    let db = dir.path().join("data/c.db");
    let out = dir.path().join("data/events");
    for _round in 1..=3u64 {
        let mut daemon = Daemon::start(&path, dir.path());
        let target = sqlite_count(&db, "events") + 500;
        eventually(
            Duration::from_secs(60),
            "progress before the kill",
            || async { sqlite_count(&db, "events") >= target },
        )
        .await;
        daemon.kill();
        if publisher.is_none() {
            let js = js.clone();
            publisher = Some(tokio::spawn(async move {
                publish_n(&js, "crash.x", N / 2).await;
            }));
        }
    }
    assert!(
        sqlite_count(&db, "events") < N as u64,
        "the kills must happen mid-drain for this test to mean anything"
    );
    publisher.expect("publisher started").await.unwrap();
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(90), "every row", || async {
        sqlite_count(&db, "events") == N as u64
    })
    .await;
    eventually(Duration::from_secs(60), "every line", || async {
        distinct_keys(&jsonl_lines(&out)).len() == N
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "both consumers drained",
        || async {
            consumer_state(&js, "CRASH", "to-db").await == (0, 0)
                && consumer_state(&js, "CRASH", "to-files").await == (0, 0)
        },
    )
    .await;
    daemon.stop_cleanly();
    // The consumers were bound again at every start with the same settings: nothing to
    // update (the server reports a backoff's first step as AckWait, which jetsink expects).
    assert!(
        !daemon.log_text().contains("updating consumer settings"),
        "{}",
        daemon.log_text()
    );
    // Every line is complete JSON: torn lines from the kills were repaired on reopen.
    for f in std::fs::read_dir(&out).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'));
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).expect("every line parses");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn broker_killed_and_restarted_mid_drain_loses_nothing() {
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    {
        let js = server.js().await;
        create_stream(&js, "BROKER", "broker.>").await;
        publish_n(&js, "broker.x", N).await;
    }
    let cfg = config(
        &server,
        "BROKER",
        "broker.>",
        json!({"type": "sqlite", "path": "data/b.db", "table": "events"}),
        // Small batches make the drain long enough to kill the broker in the middle.
        json!({"batch_size": 10, "batch_timeout_ms": 200}),
    );
    let path = write_config(dir.path(), &cfg);
    let db = dir.path().join("data/b.db");
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(60),
        "progress before the broker dies",
        || async { sqlite_count(&db, "events") >= (N / 5) as u64 },
    )
    .await;
    server.kill();
    eventually(
        Duration::from_secs(30),
        "jetsink sees the broker gone",
        || async { daemon.log_text().contains("NATS connection lost") },
    )
    .await;
    server.restart();
    let js = server.js().await;
    eventually(
        Duration::from_secs(90),
        "every row after the broker restart",
        || async { sqlite_count(&db, "events") == N as u64 },
    )
    .await;
    eventually(Duration::from_secs(30), "consumer drained", || async {
        consumer_state(&js, "BROKER", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
}
