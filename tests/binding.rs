//! Binding against a real server refuses, with exit 78 and both values named, what would
//! silently break a sink: an existing consumer that delivers headers only or limits pulls
//! below what the sink asks for, a stream whose subjects overlap another stream's (the
//! server's refusal), and a stream that would hand the sink its own dead-letter copies.

use crate::common;

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::AckPolicy};
use common::*;
use serde_json::json;

fn sink(server: &NatsServer) -> serde_json::Value {
    let mut cfg = config(
        server,
        "ORDERS",
        "orders.>",
        json!({"type": "file", "directory": "out"}),
        json!({"batch_size": 200, "max_batch_bytes": 1_000_000, "batch_timeout_ms": 1000}),
    );
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("create_stream");
    cfg
}

/// Starts the daemon and waits for it to stop by itself: (code, its log). A daemon that
/// is still running after the failure guard is stopped and reported with code -1.
fn run(dir: &Path, cfg: &serde_json::Value) -> (i32, String) {
    let path = write_config(dir, cfg);
    let mut d = Daemon::start(&path, dir);
    let code = match d.wait_exit(Duration::from_secs(30)) {
        Some(status) => status.code().unwrap_or(-1),
        None => {
            d.kill();
            -1
        }
    };
    (code, d.log_text())
}

async fn consumer(js: &jetstream::Context, tweak: impl FnOnce(&mut pull::Config)) {
    let stream = js.get_stream("ORDERS").await.unwrap();
    let _ = stream.delete_consumer("jetsink").await;
    let mut c = pull::Config {
        durable_name: Some("jetsink".into()),
        filter_subject: "orders.>".into(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: Duration::from_millis(5000),
        ..Default::default()
    };
    tweak(&mut c);
    stream.create_consumer(c).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_headers_only_consumer_is_refused_with_exit_78() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "ORDERS", "orders.>").await;
    consumer(&js, |c| c.headers_only = true).await;
    publish_n(&js, "orders.eu", 3).await;
    let (code, out) = run(dir.path(), &sink(&server));
    assert_eq!(code, 78, "{out}");
    assert!(out.contains("headers_only = true"), "{out}");
    assert!(out.contains("headers_only = false"), "{out}");
    assert!(
        !out.contains("closed for good"),
        "a start-up refusal closes its connection as its own doing: {out}"
    );
    assert_eq!(
        consumer_state(&js, "ORDERS", "jetsink").await,
        (3, 0),
        "nothing was pulled, nothing acked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_limits_below_the_configured_pull_are_refused_naming_both_values() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "ORDERS", "orders.>").await;
    let cfg = sink(&server);

    consumer(&js, |c| c.max_batch = 50).await;
    let (code, out) = run(dir.path(), &cfg);
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains("max_batch = 50") && out.contains("delivery.batch_size = 200"),
        "{out}"
    );

    consumer(&js, |c| c.max_bytes = 4096).await;
    let (code, out) = run(dir.path(), &cfg);
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains("max_bytes = 4096") && out.contains("delivery.max_batch_bytes = 1000000"),
        "{out}"
    );

    consumer(&js, |c| c.max_expires = Duration::from_millis(500)).await;
    let (code, out) = run(dir.path(), &cfg);
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains("max_expires = 500 ms") && out.contains("delivery.batch_timeout_ms = 1000"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_whose_subjects_overlap_another_is_a_config_error() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "OTHER", "orders.>").await;
    let mut cfg = sink(&server);
    cfg["sinks"]["main"]["source"]["create_stream"] = json!({"subjects": ["orders.>"]});
    let (code, out) = run(dir.path(), &cfg);
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains("creating stream ORDERS refused by the server"),
        "{out}"
    );
    assert!(out.contains("10065"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unfiltered_consumer_on_the_stream_holding_its_dead_letters_is_refused() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    js.get_or_create_stream(jetstream::stream::Config {
        name: "ORDERS".into(),
        subjects: vec!["orders.>".into(), "dlq.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut cfg = sink(&server);
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("subjects");
    cfg["sinks"]["main"]["dead_letter"] = json!({"subject": "dlq.{sink}.{subject}"});
    let (code, out) = run(dir.path(), &cfg);
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains("captures the dead-letter subject dlq.main.>"),
        "{out}"
    );
    assert!(out.contains("a loop"), "{out}");
}
