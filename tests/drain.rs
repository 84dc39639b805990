//! End to end against a real nats-server: a backlog drains completely into each
//! destination, odd messages are stored faithfully, SIGTERM stops cleanly, and SIGHUP with
//! an unchanged file reloads it without stopping anything.

use crate::common;

use std::time::Duration;

use async_nats::HeaderMap;
use base64::Engine;
use common::*;
use serde_json::json;

const N: usize = 10_000;

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_messages_become_ten_thousand_sqlite_rows_and_the_consumer_empties() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "DRAIN", "drain.>").await;
    publish_n(&js, "drain.x", N).await;
    let cfg = config(
        &server,
        "DRAIN",
        "drain.>",
        json!({"type": "sqlite", "path": "data/out.db", "table": "events"}),
        json!({"batch_size": 500}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/out.db");
    eventually(Duration::from_secs(60), "10000 rows", || async {
        sqlite_count(&db, "events") == N as u64
    })
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "DRAIN", "jetsink").await == (0, 0)
    })
    .await;
    let status = daemon
        .terminate(Duration::from_secs(15))
        .expect("exits on SIGTERM");
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        daemon.log_text()
    );

    let conn = rusqlite::Connection::open(&db).unwrap();
    let (distinct, min_seq, max_seq): (i64, i64, i64) = conn
        .query_row(
            "SELECT COUNT(DISTINCT idempotency_key), MIN(stream_sequence), MAX(stream_sequence) FROM events",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((distinct, min_seq, max_seq), (N as i64, 1, N as i64));
    let (key, subject, payload): (String, String, Vec<u8>) = conn
        .query_row(
            "SELECT idempotency_key, subject, payload FROM events WHERE stream_sequence = 7",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(key, "DRAIN:7");
    assert_eq!(subject, "drain.x");
    assert_eq!(payload, br#"{"i":6}"#);
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_messages_become_ten_thousand_distinct_file_lines() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "FILES", "files.>").await;
    publish_n(&js, "files.x", N).await;
    let cfg = config(
        &server,
        "FILES",
        "files.>",
        json!({"type": "file", "directory": "data/events", "fsync": true, "rotate_bytes": 262144}),
        json!({"batch_size": 500}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let out = dir.path().join("data/events");
    eventually(Duration::from_secs(60), "10000 lines", || async {
        distinct_keys(&jsonl_lines(&out)).len() == N
    })
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "FILES", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
    let lines = jsonl_lines(&out);
    assert_eq!(lines.len(), N, "no duplicates without crashes");
    let first = &lines[0];
    assert_eq!(first["payload_encoding"], "json");
    assert_eq!(first["payload"], json!({"i": 0}));
    assert_eq!(first["stream_sequence"], 1);
    let files = std::fs::read_dir(&out).unwrap().count();
    assert!(
        files > 1,
        "rotate_bytes = 256 KiB must have rotated, got {files} file(s)"
    );
}

/// Publishes messages that stress normalization: empty, binary, invalid UTF-8, 1 MiB,
/// many and odd headers.
async fn publish_odd_messages(js: &async_nats::jetstream::Context, subject: &str) -> Vec<Vec<u8>> {
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    let payloads: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0, 159, 146, 150, 255, 0],
        b"caf\xc3\xa9 \xff\xfe not utf8".to_vec(),
        "plain text, not json \u{1F600}".as_bytes().to_vec(),
        b"{\n  \"pretty\": [1, 2,\n 3]\n}".to_vec(),
        big,
    ];
    for p in &payloads {
        js.publish(subject.to_string(), p.clone().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut headers = HeaderMap::new();
    for i in 0..50 {
        headers.insert(
            format!("X-Many-{i}").as_str(),
            format!("value {i}").as_str(),
        );
    }
    headers.append("X-Repeated", "one");
    headers.append("X-Repeated", "two");
    headers.insert("X-Odd", "quotes \" backslash \\ json {\"a\":1} unicode é");
    headers.insert("Nats-Msg-Id", "odd-headers-1");
    js.publish_with_headers(subject.to_string(), headers, "with headers".into())
        .await
        .unwrap()
        .await
        .unwrap();
    let mut all = payloads;
    all.push(b"with headers".to_vec());
    all
}

fn bigger_batches() -> serde_json::Value {
    json!({"batch_size": 10, "max_batch_bytes": 65536})
}

#[tokio::test(flavor = "multi_thread")]
async fn odd_payloads_and_headers_are_stored_faithfully_in_sqlite() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "ODD", "odd.>").await;
    let sent = publish_odd_messages(&js, "odd.x").await;
    let cfg = config(
        &server,
        "ODD",
        "odd.>",
        json!({"type": "sqlite", "path": "data/odd.db", "table": "events"}),
        bigger_batches(),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/odd.db");
    eventually(Duration::from_secs(30), "all odd messages", || async {
        sqlite_count(&db, "events") == sent.len() as u64
    })
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "ODD", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare("SELECT payload, headers, message_id FROM events ORDER BY stream_sequence")
        .unwrap();
    let rows: Vec<(Vec<u8>, String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (i, (payload, _, _)) in rows.iter().enumerate() {
        assert_eq!(payload, &sent[i], "payload {i} differs");
    }
    let (_, headers, message_id) = rows.last().unwrap();
    let h: serde_json::Value = serde_json::from_str(headers).unwrap();
    assert_eq!(h["X-Repeated"], json!(["one", "two"]));
    assert_eq!(
        h["X-Odd"],
        json!(["quotes \" backslash \\ json {\"a\":1} unicode é"])
    );
    assert_eq!(h["X-Many-49"], json!(["value 49"]));
    assert_eq!(message_id.as_deref(), Some("odd-headers-1"));
}

#[tokio::test(flavor = "multi_thread")]
async fn odd_payloads_and_headers_are_stored_faithfully_in_files() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "ODDF", "oddf.>").await;
    let sent = publish_odd_messages(&js, "oddf.x").await;
    let cfg = config(
        &server,
        "ODDF",
        "oddf.>",
        json!({"type": "file", "directory": "data/events"}),
        bigger_batches(),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let out = dir.path().join("data/events");
    eventually(Duration::from_secs(30), "all odd messages", || async {
        jsonl_lines(&out).len() == sent.len()
    })
    .await;
    daemon.stop_cleanly();
    let lines = jsonl_lines(&out);
    let decode = |v: &serde_json::Value| -> Vec<u8> {
        match v["payload_encoding"].as_str().unwrap() {
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(v["payload"].as_str().unwrap())
                .unwrap(),
            "utf8" => v["payload"].as_str().unwrap().as_bytes().to_vec(),
            "json" => serde_json::to_vec(&v["payload"]).unwrap(),
            other => panic!("unknown encoding {other}"),
        }
    };
    assert_eq!(decode(&lines[0]), sent[0], "empty payload");
    assert_eq!(lines[1]["payload_encoding"], "base64");
    assert_eq!(decode(&lines[1]), sent[1], "binary payload");
    assert_eq!(lines[2]["payload_encoding"], "base64");
    assert_eq!(decode(&lines[2]), sent[2], "invalid UTF-8");
    assert_eq!(lines[3]["payload_encoding"], "utf8");
    assert_eq!(decode(&lines[3]), sent[3]);
    assert_eq!(lines[4]["payload_encoding"], "json");
    assert_eq!(lines[4]["payload"], json!({"pretty": [1, 2, 3]}));
    assert_eq!(decode(&lines[5]), sent[5], "1 MiB payload");
    let last = lines.last().unwrap();
    assert_eq!(last["headers"]["X-Repeated"], json!(["one", "two"]));
    assert_eq!(last["message_id"], "odd-headers-1");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_drain_exits_zero_and_a_restart_completes_the_drain() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "TERM", "term.>").await;
    let cfg = config(
        &server,
        "TERM",
        "term.>",
        json!({"type": "sqlite", "path": "data/t.db", "table": "events"}),
        json!({"batch_size": 100, "batch_timeout_ms": 100, "shutdown_timeout_ms": 3000}),
    );
    let path = write_config(dir.path(), &cfg);
    let db = dir.path().join("data/t.db");
    let mut daemon = Daemon::start(&path, dir.path());
    // Messages keep arriving while the daemon is stopped: the stop is mid-drain.
    let publisher = publish_paced(&js, "term.x", 6_000, 2_000);
    eventually(Duration::from_secs(30), "some rows", || async {
        sqlite_count(&db, "events") > 1_000
    })
    .await;
    let status = daemon
        .terminate(Duration::from_secs(3 + 5))
        .expect("exits within shutdown_timeout_ms plus margin");
    assert_eq!(status.code(), Some(0), "{}", daemon.log_text());
    assert!(
        !publisher.is_finished(),
        "the stop must happen while messages still arrive"
    );
    publisher.await.unwrap();
    assert!(sqlite_count(&db, "events") < 6_000);
    let mut again = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(60),
        "all rows after restart",
        || async { sqlite_count(&db, "events") == 6_000 },
    )
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, "TERM", "jetsink").await == (0, 0)
    })
    .await;
    again.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_with_an_unchanged_file_changes_no_sink_and_the_daemon_keeps_draining() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let cfg = config(
        &server,
        "HUP",
        "hup.>",
        json!({"type": "file", "directory": "out"}),
        json!({"batch_size": 100, "batch_timeout_ms": 100}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "the sink running", || async {
        daemon.log_text().contains("sink running")
    })
    .await;
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &daemon.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    eventually(Duration::from_secs(10), "the reload logged", || async {
        daemon
            .log_text()
            .contains("the reloaded config changes no sink")
    })
    .await;
    assert!(
        !daemon.log_text().contains("sink stopped"),
        "an unchanged sink is not touched by a reload:\n{}",
        daemon.log_text()
    );
    // Still draining after the signal: messages published now are written.
    publish_n(&js, "hup.x", 50).await;
    let out = dir.path().join("out");
    eventually(Duration::from_secs(30), "50 lines after SIGHUP", || async {
        jsonl_lines(&out).len() == 50
    })
    .await;
    daemon.stop_cleanly();
}
