//! The metrics snapshot file (`metrics.snapshot_file`): a running daemon writes it, and
//! `jetsink metrics get` / `metrics show` read a value back from it, as seed 003's
//! `show <metrics.json>` and `get <metric> --default 0` do.

use crate::common;

use std::time::Duration;

use common::*;

#[tokio::test(flavor = "multi_thread")]
async fn metrics_get_reads_the_acked_count_from_the_snapshot_file() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SNAP", "snap.>").await;
    publish_n(&js, "snap.x", 7).await;
    let mut cfg = config(
        &server,
        "SNAP",
        "snap.>",
        serde_json::json!({"type": "file", "directory": "out"}),
        serde_json::json!({}),
    );
    cfg["metrics"] =
        serde_json::json!({"snapshot_file": "state/metrics.json", "snapshot_interval_ms": 1000});
    std::fs::create_dir(dir.path().join("state")).unwrap();
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let get = |args: &[&str]| {
        let mut all = vec!["metrics", "get"];
        all.extend_from_slice(args);
        jetsink(&all, dir.path())
    };

    daemon
        .eventually(
            Duration::from_secs(60),
            "the snapshot shows 7 acked",
            || async {
                let (code, out, _) = get(&["jetsink_messages_acked_total", "state/metrics.json"]);
                code == 0 && out.trim() == "7"
            },
        )
        .await;
    // With its label, and without the prefix: the same one value.
    let (code, out, err) = get(&[
        "messages_acked_total",
        "state/metrics.json",
        "--label",
        "sink=main",
    ]);
    assert_eq!((code, out.trim()), (0, "7"), "{err}");

    let (code, out, err) = get(&[
        "jetsink_no_such_metric",
        "state/metrics.json",
        "--default",
        "0",
    ]);
    assert_eq!((code, out.as_str()), (0, "0\n"), "{err}");
    // Seed 003's own order, FILE then NAME: its command as written, and a value read back.
    let (code, out, err) = get(&[
        "state/metrics.json",
        "current_priority_lanes_active",
        "--default",
        "0",
    ]);
    assert_eq!((code, out.as_str()), (0, "0\n"), "{err}");
    let (code, out, err) = get(&[
        "state/metrics.json",
        "messages_acked_total",
        "--label",
        "sink=main",
    ]);
    assert_eq!((code, out.trim()), (0, "7"), "{err}");
    let (code, out, err) = get(&["jetsink_no_such_metric", "state/metrics.json"]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("no metric jetsink_no_such_metric"), "{err}");

    let (code, out, err) = jetsink(
        &[
            "metrics",
            "show",
            "state/metrics.json",
            "--metric",
            "messages_acked_*",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("counter  jetsink_messages_acked_total{sink=\"main\"}  7"),
        "{out}"
    );

    daemon.stop_cleanly();
    // The last snapshot, written at shutdown, still reads; no temporary file is left.
    let (code, out, err) = get(&["jetsink_messages_acked_total", "state/metrics.json"]);
    assert_eq!((code, out.trim()), (0, "7"), "{err}");
    let names: Vec<String> = std::fs::read_dir(dir.path().join("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["metrics.json"]);
}

#[test]
fn a_missing_snapshot_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = jetsink(
        &["metrics", "get", "x", "nope.json", "--default", "0"],
        dir.path(),
    );
    assert_eq!(code, 1);
    assert!(err.contains("nope.json"), "{err}");
}

#[test]
fn two_arguments_that_could_each_be_the_metric_are_a_usage_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = jetsink(
        &["metrics", "get", "up", "snapshot", "--default", "0"],
        dir.path(),
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("\"up\" \"snapshot\": cannot tell which is the metric NAME"),
        "{err}"
    );
}
