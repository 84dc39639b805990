//! Per-lane consumer mode: each lane's subjects get their own filtered durable consumer
//! and pulls alternate between lanes by weight, so urgent messages published behind a
//! deep routine backlog are committed long before that backlog is drained.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn urgent_messages_behind_a_routine_backlog_commit_early_with_per_lane_consumers() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "WORK", "work.>").await;
    publish_n(&js, "work.routine", 3_000).await;
    publish_n(&js, "work.urgent", 30).await;
    let mut cfg = config(
        &server,
        "WORK",
        "work.>",
        json!({"type": "sqlite", "path": "data/w.db", "table": "events"}),
        json!({
            "batch_size": 100,
            "priority_lanes": {
                "enabled": true,
                "default_lane": "routine",
                "lanes": [
                    {"name": "urgent", "weight": 3, "subjects": ["work.urgent"]},
                    {"name": "routine", "weight": 1, "subjects": ["work.routine"]}
                ]
            }
        }),
    );
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("subjects");
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/w.db");
    eventually(Duration::from_secs(60), "every message", || async {
        sqlite_count(&db, "events") == 3_030
    })
    .await;
    for name in ["jetsink-lane-urgent-0", "jetsink-lane-routine-0"] {
        eventually(Duration::from_secs(10), "lane consumer drained", || async {
            consumer_state(&js, "WORK", name).await == (0, 0)
        })
        .await;
    }
    d.stop_cleanly();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (urgent, last_urgent_position): (i64, i64) = conn
        .query_row(
            "SELECT COUNT(*), MAX(pos) FROM (SELECT subject, lane, ROW_NUMBER() OVER (ORDER BY rowid) AS pos FROM events) WHERE subject = 'work.urgent' AND lane = 'urgent'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(urgent, 30);
    assert!(
        last_urgent_position <= 500,
        "urgent messages were written among the first batches, not after the backlog (last at {last_urgent_position})"
    );
    let routine_lane: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM events WHERE lane = 'routine'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(routine_lane, 3_000);
}

#[test]
fn per_lane_consumer_mode_needs_subjects_on_every_lane() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.json");
    std::fs::write(
        &path,
        r#"{"nats": {}, "sinks": {"w": {
            "source": {"stream": "WORK", "consumer": "c"},
            "delivery": {"priority_lanes": {"enabled": true, "default_lane": "routine", "lanes": [
                {"name": "urgent", "subjects": ["work.urgent"]},
                {"name": "routine"}]}},
            "destination": {"type": "file", "directory": "out"}}}}"#,
    )
    .unwrap();
    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(code, 78);
    assert!(
        format!("{out}{err}").contains("sinks.w.delivery.priority_lanes.lanes[1].subjects"),
        "{out}{err}"
    );
}
