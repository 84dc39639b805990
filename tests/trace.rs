//! `jetsink trace` against a real server, after a daemon drained a SQLite sink with a
//! dead-letter queue and stopped: a stored message is ACKed and stored (table and key), a
//! poison is ACKed and dead-lettered with its reason (never its payload), a message
//! published after the stop is pending and not stored, a sequence past the stream's end is
//! exit 65; `--json` carries the same facts, and `--msg-id` finds the sequence through the
//! stored row or the dead-letter copy.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const STREAM: &str = "TRACE";
const TABLE: &str = "events";
/// The `traceparent` message 6 carries.
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Publishes message `i` with `Nats-Msg-Id: order-<i>`; its stream sequence.
async fn publish(js: &async_nats::jetstream::Context, i: usize, poison: bool) -> u64 {
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", format!("order-{i}").as_str());
    if i == 6 {
        headers.insert("traceparent", TRACEPARENT);
    }
    let body = if poison {
        format!("{{\"i\":{i},\"note\":\"POISON secret-payload\"}}")
    } else {
        format!("{{\"i\":{i},\"note\":\"secret-payload\"}}")
    };
    js.publish_with_headers("trace.orders", headers, body.into())
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence
}

struct Traced {
    _server: NatsServer,
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Traced {
    fn trace(&self, args: &[&str]) -> (i32, String, String) {
        let config = self.config.to_string_lossy().into_owned();
        let mut all = vec!["trace", "--config", &config, "--sink", "main"];
        all.extend(args);
        let out = jetsink(&all, self.dir.path());
        eprintln!("$ jetsink {}\n{}{}", all.join(" "), out.1, out.2);
        assert!(
            !out.1.contains("secret-payload") && !out.2.contains("secret-payload"),
            "a trace never prints a payload: {out:?}"
        );
        out
    }

    fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let (code, out, err) = self.trace(&all);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }
}

/// Messages 1..=5 with the poison at sequence 3, drained by a daemon that then stopped,
/// and sequence 6 published after it stopped.
async fn drained_then_one_more() -> Traced {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, STREAM, "trace.>").await;
    let db = dir.path().join("data/t.db");
    poison_table(&db);
    for i in 1..=5 {
        assert_eq!(publish(&js, i, i == 3).await, i as u64);
    }
    let mut cfg = config(
        &server,
        STREAM,
        "trace.>",
        json!({"type": "sqlite", "path": "data/t.db", "table": TABLE}),
        json!({"batch_size": 10}),
    );
    cfg["sinks"]["main"]["dead_letter"] =
        json!({"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}});
    let config = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&config, dir.path());
    eventually(
        Duration::from_secs(60),
        "4 rows, 1 copy, all ACKed",
        || async {
            sqlite_count(&db, TABLE) == 4
                && stored(&js, "DLQ").await == 1
                && consumer_state(&js, STREAM, "jetsink").await == (0, 0)
        },
    )
    .await;
    daemon.stop_cleanly();
    assert_eq!(publish(&js, 6, false).await, 6);
    Traced {
        _server: server,
        dir,
        config,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_tells_stored_dead_lettered_pending_and_missing_messages_apart() {
    let t = drained_then_one_more().await;

    let (code, out, err) = t.trace(&["--seq", "1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("summary      ACKed, stored\n"), "{out}");
    assert!(
        out.contains("table events, row idempotency_key = \"TRACE:1\""),
        "{out}"
    );
    assert!(out.contains("written by delivery 1"), "{out}");
    assert!(out.contains("headers Nats-Msg-Id\n"), "{out}");
    assert!(
        !out.contains("order-1"),
        "header values are not printed: {out}"
    );
    assert!(
        out.contains("no copy with Nats-Msg-Id main:TRACE:1"),
        "{out}"
    );

    let (code, out, err) = t.trace(&["--seq", "3"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("summary      ACKed, not stored, dead-lettered (reason destination)\n"),
        "{out}"
    );
    assert!(
        out.contains("dead-lettered: stream DLQ seq 1, subject dlq.main.trace.orders"),
        "{out}"
    );
    assert!(out.contains("Jetsink-Error-Class: permanent"), "{out}");
    assert!(out.contains("poison payload refused"), "{out}");

    let (code, out, err) = t.trace(&["--seq", "6"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("summary      pending, not stored\n"), "{out}");
    assert!(
        out.contains("jetsink: pending: not delivered yet (delivered up to 5, ack floor 5"),
        "{out}"
    );

    let (code, out, err) = t.trace(&["--seq", "99"]);
    assert_eq!(
        code, 65,
        "a sequence past the end is EX_DATAERR: {out}{err}"
    );
    assert!(
        out.contains("holds no sequence 99 (first 1, last 6)"),
        "{out}"
    );
    assert!(err.contains("stream TRACE holds no sequence 99"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_json_carries_the_same_facts_and_msg_id_finds_the_sequence() {
    let t = drained_then_one_more().await;

    let stored = t.json(&["--seq", "1"]);
    assert_eq!(stored["sequence"], 1);
    assert_eq!(stored["message"]["subject"], "trace.orders");
    assert_eq!(stored["message"]["idempotency_key"], "TRACE:1");
    assert_eq!(stored["consumers"][0]["name"], "jetsink");
    assert_eq!(stored["consumers"][0]["position"], "acked");
    assert_eq!(stored["destination"]["state"], "stored");
    assert_eq!(stored["destination"]["delivered"], 1);
    assert_eq!(stored["dead_letter"]["state"], "not_found");

    let poison = t.json(&["--seq", "3"]);
    assert_eq!(poison["consumers"][0]["position"], "acked");
    assert_eq!(poison["destination"]["state"], "absent");
    assert_eq!(poison["dead_letter"]["state"], "dead_lettered");
    assert_eq!(poison["dead_letter"]["stream"], "DLQ");
    let headers = poison["dead_letter"]["headers"].as_array().unwrap();
    assert!(
        headers.contains(&json!(["Jetsink-Reason", "destination"])),
        "{headers:?}"
    );
    assert!(
        headers.contains(&json!(["Jetsink-Original-Sequence", "3"])),
        "{headers:?}"
    );

    let pending = t.json(&["--seq", "6"]);
    assert_eq!(pending["consumers"][0]["position"], "pending");
    assert_eq!(
        pending["message"]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736",
        "the trace id its span and row would carry"
    );
    assert_eq!(t.json(&["--seq", "1"])["message"]["trace_id"], Value::Null);
    assert_eq!(pending["destination"]["state"], "absent");

    // By id: the stored row's message_id, the dead-letter copy's Jetsink-Original-Msg-Id.
    assert_eq!(t.json(&["--msg-id", "order-2"])["sequence"], 2);
    assert_eq!(t.json(&["--msg-id", "order-3"])["sequence"], 3);
    let (code, out, err) = t.trace(&["--msg-id", "order-6"]);
    assert_eq!(code, 65, "a pending message has no index by id: {out}{err}");
    assert!(err.contains("trace it by --seq"), "{err}");

    let (code, _, err) = t.trace(&["--seq", "1", "--msg-id", "order-1"]);
    assert_eq!(code, 2, "--seq and --msg-id exclude each other: {err}");
    let config = t.config.to_string_lossy().into_owned();
    let (code, _, err) = jetsink(
        &["trace", "--config", &config, "--sink", "nope", "--seq", "1"],
        t.dir.path(),
    );
    assert_eq!(code, 78, "{err}");
    assert!(err.contains("no sink named \"nope\""), "{err}");
}
