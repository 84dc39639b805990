//! What jetsink does with what the server version allows: several `source.subjects` make
//! one consumer with `filter_subjects` and the consumer names its owner in `metadata` on
//! nats-server 2.10+; on 2.9, which would silently drop both, several subjects are refused
//! at start-up with exit 78 naming the server version. Each test says so and returns when
//! the server binary is on the other side of 2.10.

use crate::common;

use std::time::Duration;

use async_nats::jetstream::consumer::pull;
use common::*;
use serde_json::json;

fn modern() -> bool {
    nats_server_version().is_some_and(|v| v >= (2, 10, 0))
}

/// A config reading subjects `a.>` and `b.>` of stream MULTI (which also captures `c.>`).
async fn two_subject_setup(server: &NatsServer, dir: &std::path::Path) -> std::path::PathBuf {
    let js = server.js().await;
    js.get_or_create_stream(async_nats::jetstream::stream::Config {
        name: "MULTI".into(),
        subjects: vec!["a.>".into(), "b.>".into(), "c.>".into()],
        ..Default::default()
    })
    .await
    .expect("create stream");
    publish_n(&js, "a.x", 30).await;
    publish_n(&js, "b.y", 20).await;
    publish_n(&js, "c.z", 10).await;
    let mut cfg = config(
        server,
        "MULTI",
        "a.>",
        json!({"type": "sqlite", "path": "data/m.db", "table": "events"}),
        json!({"batch_size": 25}),
    );
    cfg["sinks"]["main"]["source"]["subjects"] = json!(["a.>", "b.>"]);
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .expect("source")
        .remove("create_stream");
    write_config(dir, &cfg)
}

#[tokio::test(flavor = "multi_thread")]
async fn several_subjects_drain_through_one_consumer_on_2_10_and_later() {
    if !modern() {
        eprintln!(
            "skipped: several filter subjects need nats-server 2.10+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = two_subject_setup(&server, dir.path()).await;
    let mut daemon = Daemon::start(&path, dir.path());
    let db = dir.path().join("data/m.db");
    let js = server.js().await;
    eventually(
        Duration::from_secs(30),
        "every a.> and b.> message acknowledged",
        || async {
            sqlite_count(&db, "events") == 50
                && consumer_state(&js, "MULTI", "jetsink").await == (0, 0)
        },
    )
    .await;
    daemon.stop_cleanly();
    let stream = js.get_stream("MULTI").await.expect("stream");
    let info = stream.consumer_info("jetsink").await.expect("consumer");
    let mut filters = info.config.filter_subjects.clone();
    filters.sort();
    assert_eq!(filters, vec!["a.>", "b.>"]);
    assert_eq!(stream.cached_info().state.consumer_count, 1, "one consumer");
    assert_eq!(sqlite_count(&db, "events"), 50, "no c.> message was read");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_consumer_names_its_owner_in_metadata_on_2_10_and_later() {
    if !modern() {
        eprintln!(
            "skipped: consumer metadata needs nats-server 2.10+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = two_subject_setup(&server, dir.path()).await;
    let js = server.js().await;
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "the consumer exists", || async {
        let s = js.get_stream("MULTI").await.expect("stream");
        s.consumer_info("jetsink").await.is_ok()
    })
    .await;
    daemon.stop_cleanly();
    let s = js.get_stream("MULTI").await.expect("stream");
    let meta = s
        .consumer_info("jetsink")
        .await
        .expect("consumer")
        .config
        .metadata;
    assert_eq!(meta.get("jetsink.sink").map(String::as_str), Some("main"));
    assert_eq!(
        meta.get("jetsink.version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let hash = meta.get("jetsink.config_hash").cloned().unwrap_or_default();
    assert!(
        hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{meta:?}"
    );

    // A changed sink section restamps the consumer at the next start.
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    cfg["sinks"]["main"]["delivery"]["batch_size"] = json!(10);
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "a new config hash", || async {
        let s = js.get_stream("MULTI").await.expect("stream");
        let m = s
            .consumer_info("jetsink")
            .await
            .expect("consumer")
            .config
            .metadata;
        m.get("jetsink.config_hash").is_some_and(|h| *h != hash)
    })
    .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn several_subjects_are_refused_on_2_9_with_exit_78_naming_the_server_version() {
    if modern() {
        eprintln!(
            "skipped: this server ({:?}) filters several subjects; the refusal is for 2.9",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = two_subject_setup(&server, dir.path()).await;
    let mut daemon = Daemon::start(&path, dir.path());
    let status = daemon.wait_exit(Duration::from_secs(30));
    let log = daemon.log_text();
    assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
    assert!(log.contains("source.subjects lists 2 subjects"), "{log}");
    assert!(log.contains("nats-server 2.9"), "{log}");
    let js = server.js().await;
    let s = js.get_stream("MULTI").await.expect("stream");
    assert_eq!(
        s.cached_info().state.consumer_count,
        0,
        "nothing was created"
    );

    // Why the refusal: this server takes `filter_subjects` and `metadata` and drops them,
    // so the consumer would read every subject of the stream.
    let made = s
        .create_consumer(pull::Config {
            durable_name: Some("probe".into()),
            filter_subjects: vec!["a.>".into(), "b.>".into()],
            metadata: [("k".to_string(), "v".to_string())].into(),
            ..Default::default()
        })
        .await;
    match made {
        Ok(mut c) => {
            let info = c.info().await.expect("probe info");
            assert!(info.config.filter_subjects.is_empty() && info.config.metadata.is_empty());
            eprintln!("nats-server 2.9 accepted filter_subjects and metadata and dropped both");
        }
        Err(e) => eprintln!("nats-server 2.9 refused filter_subjects and metadata: {e}"),
    }
}
