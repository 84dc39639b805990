//! A write that blocks longer than AckWait — here SQLite waiting on another connection's
//! write lock — must not get its batch, or the batch pulled ahead, redelivered: the
//! keep-alive sends `+WPI` while the runner's thread is blocked in the write.

use crate::common;

use std::time::Duration;

use common::*;

const N: usize = 300;

#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_write_blocked_past_ack_wait_is_kept_alive_and_nothing_is_redelivered() {
    blocked_past_redelivery(serde_json::json!({"ack_wait_ms": 2000})).await;
}

/// With `backoff_ms` the server redelivers after the step of each delivery (2 s here),
/// whatever `ack_wait_ms` says: the keep-alive follows the step.
#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_write_blocked_past_the_first_backoff_step_is_kept_alive_too() {
    blocked_past_redelivery(serde_json::json!({
        "ack_wait_ms": 30000, "max_deliver": 10, "backoff_ms": [2000, 30000, 30000]
    }))
    .await;
}

/// Waits for four more `+WPI` rounds of sink `db`, one every half redelivery interval: two
/// redelivery intervals pass, observed, not slept.
async fn four_more_wpi_rounds(listen: &str) {
    let series = "jetsink_progress_acks_total{sink=\"db\"}";
    let before = metric_value(listen, series).await.unwrap_or(0.0);
    eventually(Duration::from_secs(60), "four more +WPI rounds", || async {
        metric_value(listen, series).await.unwrap_or(0.0) >= before + 4.0
    })
    .await;
}

/// A write blocked for two redelivery intervals of the consumer (`consumer`): no message
/// is delivered twice.
async fn blocked_past_redelivery(consumer: serde_json::Value) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SLOW", "slow.>").await;
    // Another writer takes the database's write lock and keeps it.
    let BlockedSqliteSink {
        mut daemon,
        db,
        listen,
        blocker,
    } = blocked_sqlite_sink(
        &js,
        &server.url(),
        dir.path(),
        "SLOW",
        "slow.x",
        consumer,
        N - 1,
    )
    .await;
    // The write has been blocked for two redelivery intervals with its batch (and those
    // pulled ahead) held.
    four_more_wpi_rounds(&listen).await;
    let (_, ack_pending) = consumer_state(&js, "SLOW", "to-db").await;
    assert!(ack_pending > 0, "a batch is held by the blocked write");
    assert_eq!(
        sqlite_count(&db, "events"),
        1,
        "nothing was written while the lock was held"
    );
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);

    eventually(Duration::from_secs(60), "every row", || async {
        sqlite_count(&db, "events") == N as u64
    })
    .await;
    eventually(Duration::from_secs(30), "the consumer drained", || async {
        consumer_state(&js, "SLOW", "to-db").await == (0, 0)
    })
    .await;
    let info = common::consumer_info(&js, "SLOW", "to-db").await;
    // One delivery per message: had AckWait run out during the blocked write, the
    // server would have delivered some messages again.
    assert_eq!(
        info.delivered.consumer_sequence, N as u64,
        "deliveries: {info:?}"
    );
    assert_eq!(info.delivered.stream_sequence, N as u64);
    daemon.stop_cleanly();
}

/// With a backlog, a sink keeps four batches pulled ahead of the one it writes, no more:
/// while its write is blocked, the consumer has delivered exactly five batches through
/// four `+WPI` rounds, and once the write ends every message lands, delivered once.
#[tokio::test(flavor = "multi_thread")]
async fn a_sink_with_a_backlog_keeps_four_batches_pulled_ahead_while_its_write_is_blocked() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "AHEAD", "ahead.>").await;
    // The database and its table exist, and another writer holds the write lock.
    let BlockedSqliteSink {
        mut daemon,
        db,
        listen,
        blocker,
    } = blocked_sqlite_sink(
        &js,
        &server.url(),
        dir.path(),
        "AHEAD",
        "ahead.x",
        serde_json::json!({"ack_wait_ms": 2000}),
        0,
    )
    .await;
    daemon.stop_cleanly();
    // A backlog of six batches of 50, stored before the sink pulls: every pull is full.
    publish_n(&js, "ahead.x", N).await;
    let mut daemon = Daemon::start(&dir.path().join("jetsink.json"), dir.path());
    let delivered = || async {
        common::consumer_info(&js, "AHEAD", "to-db")
            .await
            .delivered
            .stream_sequence
    };
    daemon
        .eventually(
            Duration::from_secs(60),
            "one batch in hand and four pulled ahead",
            || async { delivered().await == 1 + 250 },
        )
        .await;
    four_more_wpi_rounds(&listen).await;
    assert_eq!(delivered().await, 1 + 250, "nothing more pulled ahead");
    assert_eq!(sqlite_count(&db, "events"), 1);
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    daemon
        .eventually(Duration::from_secs(60), "every row", || async {
            sqlite_count(&db, "events") == 1 + N as u64
        })
        .await;
    daemon
        .eventually(Duration::from_secs(30), "the consumer drained", || async {
            consumer_state(&js, "AHEAD", "to-db").await == (0, 0)
        })
        .await;
    let info = common::consumer_info(&js, "AHEAD", "to-db").await;
    assert_eq!(
        info.delivered.consumer_sequence,
        1 + N as u64,
        "one delivery per message: {info:?}"
    );
    daemon.stop_cleanly();
}
