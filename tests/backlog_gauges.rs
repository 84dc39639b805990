//! The consumer backlog gauges follow the server's consumer info: they rise while a
//! destination holds the sink back and fall to zero once it drains.

use crate::common;

use std::time::Duration;

use common::*;

const N: usize = 400;

#[tokio::test(flavor = "multi_thread")]
async fn backlog_gauges_show_a_held_sink_and_its_drain() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "BACKLOG", "backlog.>").await;
    // Another writer holds the database: the sink holds its batch and the rest waits.
    let BlockedSqliteSink {
        mut daemon,
        db,
        listen,
        blocker,
    } = blocked_sqlite_sink(
        &js,
        &server.url(),
        dir.path(),
        "BACKLOG",
        "backlog.x",
        serde_json::json!({}),
        N - 1,
    )
    .await;
    let series = |name: &str| format!("{name}{{consumer=\"to-db\",sink=\"db\"}}");
    eventually(
        Duration::from_secs(60),
        "a backlog on the gauges",
        || async {
            let pending = metric_value(&listen, &series("jetsink_consumer_pending_messages")).await;
            let unacked =
                metric_value(&listen, &series("jetsink_consumer_ack_pending_messages")).await;
            matches!((pending, unacked), (Some(p), Some(u)) if p > 0.0 && u > 0.0)
        },
    )
    .await;
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);

    eventually(Duration::from_secs(60), "every row", || async {
        sqlite_count(&db, "events") == N as u64
    })
    .await;
    eventually(
        Duration::from_secs(60),
        "the gauges back at zero",
        || async {
            let pending = metric_value(&listen, &series("jetsink_consumer_pending_messages")).await;
            let unacked =
                metric_value(&listen, &series("jetsink_consumer_ack_pending_messages")).await;
            pending == Some(0.0) && unacked == Some(0.0)
        },
    )
    .await;
    daemon.stop_cleanly();
}
