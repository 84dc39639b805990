//! `jetsink validate --online`: checks a config against a live server and its
//! destinations and changes nothing. All ok after a run; a missing stream is exit 69
//! naming it; a consumer whose filter differs is exit 78 naming it, one whose tunables
//! (ack_wait) differ is an exit-0 "would update"; an
//! unreachable database is exit 69 naming the sink; what is missing is reported as
//! "would create" and stays missing.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use common::*;
use futures::TryStreamExt;
use serde_json::json;

fn validate(path: &std::path::Path, dir: &std::path::Path) -> (i32, String) {
    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap(), "--online"],
        dir,
    );
    (code, format!("{out}{err}"))
}

/// A config reading `subject` of `stream` into SQLite, the stream not created by jetsink.
fn sqlite_config(server: &NatsServer, stream: &str, subject: &str) -> serde_json::Value {
    let mut cfg = config(
        server,
        stream,
        subject,
        json!({"type": "sqlite", "path": "data/v.db", "table": "events"}),
        json!({"batch_size": 10}),
    );
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("create_stream");
    cfg
}

async fn stream_names(js: &async_nats::jetstream::Context) -> Vec<String> {
    let mut names: Vec<String> = js.stream_names().try_collect().await.unwrap();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_jetsink_has_run_with_is_all_ok() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "VOK", "vok.>").await;
    let path = write_config(dir.path(), &sqlite_config(&server, "VOK", "vok.>"));
    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "the consumer exists", || async {
        let s = js.get_stream("VOK").await.unwrap();
        s.consumer_info("jetsink").await.is_ok() && dir.path().join("data/v.db").exists()
    })
    .await;
    d.stop_cleanly();

    let (code, out) = validate(&path, dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ok: NATS connection main: connected"), "{out}");
    assert!(
        out.contains("ok: sink main: stream VOK exists and captures vok.>"),
        "{out}"
    );
    assert!(
        out.contains("ok: sink main: consumer jetsink on stream VOK matches the config"),
        "{out}"
    );
    assert!(out.contains("is writable and table events fits"), "{out}");
    assert!(
        out.lines()
            .all(|l| !l.starts_with("FAIL:") && !l.starts_with("would create:")),
        "{out}"
    );
    assert!(
        out.contains("0 would create, 0 would update, 0 failed"),
        "{out}"
    );
    if nats_server_version().is_some_and(|v| v >= (2, 10, 0)) {
        assert!(out.contains("matches this config"), "owner metadata: {out}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_stream_without_create_stream_is_exit_69_naming_it() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), &sqlite_config(&server, "VMISSING", "vm.>"));
    let (code, out) = validate(&path, dir.path());
    assert_eq!(code, 69, "{out}");
    assert!(
        out.contains("FAIL: sink main: stream VMISSING does not exist"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_with_another_ack_wait_is_reported_as_an_update_and_left_alone() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "VTUNE", "vt.>").await;
    let stream = js.get_stream("VTUNE").await.unwrap();
    stream
        .create_consumer(pull::Config {
            durable_name: Some("jetsink".into()),
            filter_subject: "vt.>".into(),
            ack_wait: Duration::from_millis(1_000),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = stream.consumer_info("jetsink").await.unwrap().config;
    let path = write_config(dir.path(), &sqlite_config(&server, "VTUNE", "vt.>"));
    let (code, out) = validate(&path, dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("would update: sink main: consumer jetsink on stream VTUNE has ack_wait = 1000 ms; jetsink run sets it to 5000 ms"),
        "{out}"
    );
    let after = stream.consumer_info("jetsink").await.unwrap().config;
    assert_eq!(
        after.ack_wait, before.ack_wait,
        "the consumer was not updated"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_with_another_filter_is_exit_78_naming_it() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "VDRIFT", "vd.>").await;
    let stream = js.get_stream("VDRIFT").await.unwrap();
    stream
        .create_consumer(pull::Config {
            durable_name: Some("jetsink".into()),
            filter_subject: "vd.other".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = stream.consumer_info("jetsink").await.unwrap().config;
    let path = write_config(dir.path(), &sqlite_config(&server, "VDRIFT", "vd.>"));
    let (code, out) = validate(&path, dir.path());
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains("FAIL: sink main:") && out.contains("vd.other"),
        "{out}"
    );
    let after = stream.consumer_info("jetsink").await.unwrap().config;
    assert_eq!(
        after.filter_subject, before.filter_subject,
        "the consumer was not changed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_database_is_exit_69_naming_the_sink() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "VPG", "vpg.>").await;
    let mut cfg = sqlite_config(&server, "VPG", "vpg.>");
    cfg["sinks"]["main"]["destination"] = json!({
        "type": "postgres",
        "host": "127.0.0.1",
        "port": free_port(),
        "user": "postgres",
        "database": "postgres",
        "table": "jetsink_validate_online"
    });
    let path = write_config(dir.path(), &cfg);
    let (code, out) = validate(&path, dir.path());
    assert_eq!(code, 69, "{out}");
    assert!(out.contains("FAIL: sink main: destination"), "{out}");
    assert!(out.contains("ok: sink main: stream VPG exists"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn what_is_missing_would_be_created_and_nothing_is() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "VOTHER", "vother.>").await;
    let mut cfg = config(
        &server,
        "VNEW",
        "vnew.>",
        json!({"type": "file", "directory": "out/jsonl"}),
        json!({"batch_size": 10}),
    );
    cfg["sinks"]["main"]["dead_letter"] = json!({
        "subject": "vnew_dlq.{sink}",
        "create_stream": {"name": "VNEW_DLQ"}
    });
    let path = write_config(dir.path(), &cfg);
    let streams = stream_names(&js).await;

    let (code, out) = validate(&path, dir.path());
    assert_eq!(code, 0, "{out}");
    for line in [
        "would create: sink main: stream VNEW capturing vnew.>",
        "would create: sink main: consumer jetsink on stream VNEW",
        "would create: sink main: dead-letter stream VNEW_DLQ",
        "would create: sink main: destination",
    ] {
        assert!(out.contains(line), "{line} in {out}");
    }
    assert_eq!(stream_names(&js).await, streams, "no stream was created");
    let other = js.get_stream("VOTHER").await.unwrap();
    assert_eq!(other.cached_info().state.consumer_count, 0, "no consumer");
    assert!(!dir.path().join("out").exists(), "no directory was created");
}
