//! Per-lane consumer mode: each lane gets its own durable consumer filtering its subjects
//! and pulls alternate between lanes by weight, so urgent messages published behind a
//! deep routine backlog are committed long before that backlog is drained.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// Publishes 3,000 routine messages (`work.routine`) and then `urgent` urgent ones
/// (`work.urgent`), drains them into SQLite (`data/w.db`, batch 100) with `priority_lanes`
/// (two lanes `urgent` and `routine` with subjects), waits until both lane consumers have
/// nothing pending and stops the daemon cleanly. Returns the server and the directory.
async fn drain_lane_backlog(
    urgent: usize,
    priority_lanes: serde_json::Value,
) -> (NatsServer, tempfile::TempDir) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "WORK", "work.>").await;
    publish_n(&js, "work.routine", 3_000).await;
    publish_n(&js, "work.urgent", urgent).await;
    let mut cfg = config(
        &server,
        "WORK",
        "work.>",
        json!({"type": "sqlite", "path": "data/w.db", "table": "events"}),
        json!({"batch_size": 100, "priority_lanes": priority_lanes}),
    );
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("subjects");
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/w.db");
    let total = (3_000 + urgent) as u64;
    d.eventually(Duration::from_secs(60), "every message", || async {
        sqlite_count(&db, "events") == total
    })
    .await;
    for name in ["jetsink-lane-urgent-0", "jetsink-lane-routine-0"] {
        eventually(Duration::from_secs(10), "lane consumer drained", || async {
            consumer_state(&js, "WORK", name).await == (0, 0)
        })
        .await;
    }
    d.stop_cleanly();
    (server, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn urgent_messages_behind_a_routine_backlog_commit_early_with_per_lane_consumers() {
    let (_server, dir) = drain_lane_backlog(
        30,
        json!({
            "enabled": true,
            "default_lane": "routine",
            "lanes": [
                {"name": "urgent", "weight": 3, "subjects": ["work.urgent"]},
                {"name": "routine", "weight": 1, "subjects": ["work.routine"]}
            ]
        }),
    )
    .await;
    let db = dir.path().join("data/w.db");
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

/// With `consumer_pull: "strict"` every pull asks the urgent lane first, so while it has a
/// backlog no routine batch is written: 500 urgent messages published after 3,000 routine
/// ones are the first 500 rows. Certain, not likely: the wait bound (ten minutes here) is
/// the only thing that would put routine first, and a pull only falls through to routine
/// when the urgent lane answers empty.
#[tokio::test(flavor = "multi_thread")]
async fn strict_lane_pulls_write_the_whole_urgent_backlog_before_any_routine_message() {
    let (_server, dir) = drain_lane_backlog(
        500,
        json!({
            "enabled": true,
            "default_lane": "routine",
            "consumer_pull": "strict",
            "strict_max_wait_ms": 600_000,
            "lanes": [
                {"name": "urgent", "subjects": ["work.urgent"]},
                {"name": "routine", "weight": 3, "subjects": ["work.routine"]}
            ]
        }),
    )
    .await;
    let db = dir.path().join("data/w.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (urgent, last_urgent, first_routine): (i64, i64, i64) = conn
        .query_row(
            "SELECT COUNT(*) FILTER (WHERE subject = 'work.urgent'), \
                    MAX(pos) FILTER (WHERE subject = 'work.urgent'), \
                    MIN(pos) FILTER (WHERE subject = 'work.routine') \
             FROM (SELECT subject, ROW_NUMBER() OVER (ORDER BY rowid) AS pos FROM events)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(urgent, 500);
    assert_eq!(
        (last_urgent, first_routine),
        (500, 501),
        "every urgent row before every routine row"
    );
}

/// The subjects of each batch a strict pull handed back, in order.
fn batch_subjects(p: &jetsink::nats::StrictPull) -> Vec<Vec<String>> {
    p.batches
        .iter()
        .map(|b| b.iter().map(|m| m.subject.to_string()).collect())
        .collect()
}

/// A strict pull asks the first lane alone, falling through to the next only when it is
/// empty; asked together (after the first lane answered empty), both lanes are pulled at
/// once and both batches come back, the first lane's first. Driven pull by pull against a
/// real server, so each case is certain.
#[tokio::test(flavor = "multi_thread")]
async fn a_strict_pull_asks_the_first_lane_alone_or_beside_the_next_and_keeps_its_batch_first() {
    use async_nats::jetstream::consumer::{pull, AckPolicy};
    use jetsink::nats::{fetch_strict, FetchLimits};
    let server = NatsServer::start();
    let js = server.js().await;
    create_stream(&js, "WORK", "work.>").await;
    let stream = js.get_stream("WORK").await.unwrap();
    let mut consumers = Vec::new();
    for (name, filter) in [("urgent", "work.urgent"), ("routine", "work.routine")] {
        let config = pull::Config {
            durable_name: Some(name.into()),
            filter_subject: filter.into(),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        };
        consumers.push(stream.create_consumer(config).await.unwrap());
    }
    let limits = FetchLimits {
        max_messages: 100,
        max_bytes: 1 << 20,
        wait: Duration::from_millis(200),
        linger: Duration::ZERO,
    };
    let drops = Default::default();
    let urgent = |n| vec!["work.urgent".to_string(); n];
    let routine = |n| vec!["work.routine".to_string(); n];
    // A no-wait pull answers from what its consumer counts as pending, and CI once saw the
    // routine lane's pull come back empty just after its publish was acknowledged (nats-server
    // 2.14, a loaded machine): each pull waits until both consumers count what was published.
    let counted = |u: u64, r: u64| {
        let js = js.clone();
        async move {
            eventually(
                Duration::from_secs(30),
                "both lanes count their messages",
                || async {
                    let urgent = consumer_info(&js, "WORK", "urgent").await.num_pending;
                    let routine = consumer_info(&js, "WORK", "routine").await.num_pending;
                    (urgent, routine) == (u, r)
                },
            )
            .await;
        }
    };

    publish_n(&js, "work.routine", 10).await;
    counted(0, 10).await;
    let p = fetch_strict(&js, &consumers, &[0, 1], limits, &drops, false)
        .await
        .unwrap();
    assert_eq!(batch_subjects(&p), vec![routine(10)], "fell through");
    assert!(p.first_empty);

    publish_n(&js, "work.urgent", 3).await;
    publish_n(&js, "work.routine", 5).await;
    counted(3, 5).await;
    let p = fetch_strict(&js, &consumers, &[0, 1], limits, &drops, true)
        .await
        .unwrap();
    assert_eq!(
        batch_subjects(&p),
        vec![urgent(3), routine(5)],
        "both, urgent first"
    );
    assert!(!p.first_empty);

    publish_n(&js, "work.urgent", 2).await;
    publish_n(&js, "work.routine", 4).await;
    counted(2, 4).await;
    let p = fetch_strict(&js, &consumers, &[0, 1], limits, &drops, false)
        .await
        .unwrap();
    assert_eq!(batch_subjects(&p), vec![urgent(2)], "the first lane alone");
    assert!(!p.first_empty);
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

fn modern() -> bool {
    nats_server_version().is_some_and(|v| v >= (2, 10, 0))
}

/// A per-lane config whose `urgent` lane reads two subjects, on stream LANES2 (which also
/// captures `lane.other`).
async fn two_subject_lane_setup(server: &NatsServer, dir: &std::path::Path) -> std::path::PathBuf {
    let js = server.js().await;
    create_stream(&js, "LANES2", "lane.>").await;
    publish_n(&js, "lane.alert", 20).await;
    publish_n(&js, "lane.page", 10).await;
    publish_n(&js, "lane.routine", 30).await;
    publish_n(&js, "lane.other", 5).await;
    let mut cfg = config(
        server,
        "LANES2",
        "lane.>",
        json!({"type": "sqlite", "path": "data/l.db", "table": "events"}),
        json!({
            "batch_size": 20,
            "priority_lanes": {
                "enabled": true,
                "default_lane": "routine",
                "lanes": [
                    {"name": "urgent", "weight": 3, "subjects": ["lane.alert", "lane.page"]},
                    {"name": "routine", "weight": 1, "subjects": ["lane.routine"]}
                ]
            }
        }),
    );
    let source = cfg["sinks"]["main"]["source"].as_object_mut().unwrap();
    source.remove("subjects");
    source.remove("create_stream");
    write_config(dir, &cfg)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_with_several_subjects_reads_them_through_one_consumer_on_2_10_and_later() {
    if !modern() {
        eprintln!(
            "skipped: a lane consumer with several subjects needs nats-server 2.10+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = two_subject_lane_setup(&server, dir.path()).await;
    let js = server.js().await;
    let mut d = Daemon::start(&path, dir.path());
    let db = dir.path().join("data/l.db");
    eventually(Duration::from_secs(60), "every lane message", || async {
        sqlite_count(&db, "events") == 60
            && consumer_state(&js, "LANES2", "jetsink-lane-urgent-0").await == (0, 0)
            && consumer_state(&js, "LANES2", "jetsink-lane-routine-0").await == (0, 0)
    })
    .await;
    d.stop_cleanly();
    let stream = js.get_stream("LANES2").await.unwrap();
    assert_eq!(
        stream.cached_info().state.consumer_count,
        2,
        "one consumer per lane"
    );
    let info = stream.consumer_info("jetsink-lane-urgent-0").await.unwrap();
    let mut filters = info.config.filter_subjects.clone();
    filters.sort();
    assert_eq!(filters, vec!["lane.alert", "lane.page"]);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let urgent: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM events WHERE lane = 'urgent' AND subject IN ('lane.alert', 'lane.page')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(urgent, 30);
    assert_eq!(sqlite_count(&db, "events"), 60, "lane.other was not read");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lane_with_several_subjects_is_refused_on_2_9_naming_the_lane_and_the_version() {
    if modern() {
        eprintln!(
            "skipped: this server ({:?}) filters several subjects; the refusal is for 2.9",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = two_subject_lane_setup(&server, dir.path()).await;
    let mut d = Daemon::start(&path, dir.path());
    let status = d.wait_exit(Duration::from_secs(30));
    let log = d.log_text();
    assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
    assert!(
        log.contains("sinks.main.delivery.priority_lanes.lanes[0].subjects lists 2 subjects"),
        "{log}"
    );
    assert!(log.contains("nats-server 2.9"), "{log}");
    let js = server.js().await;
    let stream = js.get_stream("LANES2").await.unwrap();
    assert_eq!(
        stream.cached_info().state.consumer_count,
        0,
        "nothing was created"
    );
}
