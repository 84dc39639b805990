//! `format: "parquet"` of the `s3` and `file` destinations, read back by independent
//! readers — pyarrow and DuckDB, from `.ci/venv` (`JETSINK_TEST_PYTHON` to use another
//! interpreter) — not by jetsink's own reader:
//! - 20,000 messages across a SIGKILL mid-drain, with rollover, into moto and into a
//!   directory: exactly 20,000 rows, raw, one per message (and the documented
//!   deduplicating DuckDB query gives the same 20,000), with the documented column types
//!   and the published values;
//! - the same after a SIGKILL that certainly leaves files and objects written and never
//!   ACKed (a first jetsink whose ACKs the server refuses), drained by a second one cutting
//!   its batches elsewhere: the messages delivered again are found in the archive and
//!   ACKed without a second row (`jetsink_sink_already_stored_total`);
//! - a typed column mapping: a payload that is not JSON is dead-lettered and every other
//!   row lands, with its typed values;
//! - with encryption the payload column holds sealed values and `jetsink decrypt` reads an
//!   object back to clear payloads;
//! - `jetsink bench --config … --sink …` verifies a Parquet file sink's keys.

use crate::common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::moto::{destination, Moto};
use common::*;
use futures::StreamExt;
use jetsink::sinks::util::archive::Named;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::{json, Value};

const N: usize = 20_000;

/// What pyarrow and DuckDB read from the Parquet files under `dir`; `sql` runs in DuckDB
/// with `{files}` standing for them.
fn read_with_pyarrow_and_duckdb(dir: &Path, sql: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parquet_read.py");
    let out = std::process::Command::new(test_python())
        .arg(script)
        .arg(dir)
        .arg(sql)
        .output()
        .expect("run python (pip install pyarrow duckdb into .ci/venv: see .ci/run)");
    assert!(
        out.status.success(),
        "parquet_read.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// The documented query (one row per message, the first written): its rows, distinct
/// sequences, first and last; then the raw rows and distinct keys, which must be the same.
const DEDUPLICATED: &str = "SELECT d.*, r.* FROM (SELECT count(*), count(DISTINCT stream_sequence), min(stream_sequence), max(stream_sequence) FROM (SELECT * FROM {files} QUALIFY row_number() OVER (PARTITION BY idempotency_key ORDER BY written_at) = 1)) d, (SELECT count(*) AS raw, count(DISTINCT idempotency_key) AS keys FROM {files}) r";

/// The rows of every sequence read more than once, with the file each is in and its
/// delivery, for the message of a failed count: which write made the second copy.
fn repeated_rows(read: &Value) -> String {
    let (Some(rows), Some(files)) = (read["rows"].as_array(), read["row_files"].as_array()) else {
        return "(no rows)".into();
    };
    let mut by_seq: std::collections::BTreeMap<u64, Vec<String>> = Default::default();
    for (r, f) in rows.iter().zip(files) {
        by_seq
            .entry(r["stream_sequence"].as_u64().unwrap_or(0))
            .or_default()
            .push(format!(
                "{} delivered {} consumer sequence {} written {}",
                f.as_str().unwrap_or("?"),
                r["delivered"],
                r["consumer_sequence"],
                r["written_at"]
            ));
    }
    let repeated: Vec<String> = by_seq
        .into_iter()
        .filter(|(_, v)| v.len() > 1)
        .take(20)
        .map(|(s, v)| format!("{s}: [{}]", v.join("; ")))
        .collect();
    format!("{repeated:?}")
}

/// Every row holds what `publish_n` published on `subject` to the fresh stream `stream`,
/// in the documented types, and every message is there exactly once: one row each, raw.
fn assert_archive_holds_every_message(read: &Value, stream: &str, subject: &str) {
    let files = read["files"].as_array().unwrap();
    assert!(!files.is_empty());
    for f in files {
        let schema = &f["schema"];
        for (column, ty) in [
            ("idempotency_key", "string"),
            ("stream", "string"),
            ("stream_sequence", "int64"),
            ("consumer_sequence", "int64"),
            ("subject", "string"),
            ("delivered", "int64"),
            ("published_at", "timestamp[us, tz=UTC]"),
            ("written_at", "timestamp[us, tz=UTC]"),
            ("message_id", "string"),
            (
                "headers",
                "map<string, list<element: string not null> ('headers')>",
            ),
            ("priority", "string"),
            ("lane", "string"),
            ("classification", "string"),
            ("labels", "list<element: string not null>"),
            ("trace_id", "string"),
            ("payload", "binary"),
        ] {
            assert_eq!(schema[column], ty, "{column} in {}", f["name"]);
        }
        let stats: Vec<&str> = f["statistics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        for column in [
            "stream_sequence",
            "published_at",
            "subject",
            "idempotency_key",
        ] {
            assert!(stats.contains(&column), "{column} has min/max: {stats:?}");
        }
        assert_eq!(f["compression"], json!(["ZSTD"]), "{}", f["name"]);
    }
    let rows = read["rows"].as_array().unwrap();
    let mut keys = HashSet::new();
    for r in rows {
        let seq = r["stream_sequence"].as_u64().unwrap();
        assert_eq!(r["idempotency_key"], format!("{stream}:{seq}"));
        assert_eq!(r["stream"], stream);
        assert_eq!(r["subject"], subject);
        let payload = base64::engine::general_purpose::STANDARD
            .decode(r["payload"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            payload,
            format!("{{\"i\":{}}}", seq - 1).into_bytes(),
            "{r}"
        );
        assert!(
            r["published_at"].as_str().unwrap().ends_with("+00:00"),
            "{r}"
        );
        assert_eq!(r["headers"], json!({}), "published without headers");
        keys.insert(seq);
    }
    assert_eq!(
        keys.len(),
        N,
        "every message by key, in {} rows",
        rows.len()
    );
    assert_eq!(
        rows.len(),
        N,
        "pyarrow: one row per message, raw; sequences in more than one row: {}",
        repeated_rows(read)
    );
    assert_eq!(
        read["sql"],
        json!([[N, N, 1, N, N, N]]),
        "DuckDB: the deduplicating query and the raw rows both give one row per message"
    );
    assert_eq!(read["duckdb_types"]["stream_sequence"], "BIGINT");
    assert_eq!(
        read["duckdb_types"]["published_at"],
        "TIMESTAMP WITH TIME ZONE"
    );
    assert_eq!(read["duckdb_types"]["payload"], "BLOB");
    assert_eq!(read["duckdb_types"]["headers"], "MAP(VARCHAR, VARCHAR[])");
    assert_eq!(read["duckdb_types"]["labels"], "VARCHAR[]");
    println!(
        "{} files, {} rows, {} distinct keys",
        files.len(),
        rows.len(),
        keys.len()
    );
}

/// Copies every object of `store` into `into`, keeping their keys as paths.
async fn download(store: &Arc<dyn ObjectStore>, into: &Path) -> Vec<String> {
    let metas: Vec<_> = store.list(None).collect().await;
    let mut keys = Vec::new();
    for meta in metas {
        let meta = meta.expect("list");
        let key = meta.location.to_string();
        let body = store
            .get(&meta.location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        let path = into.join(&key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &body).unwrap();
        keys.push(key);
    }
    keys
}

/// Starts jetsink on `cfg`, SIGKILLs it once `stored` says something landed (with
/// messages still pending), starts it again and waits for the drain.
async fn drain_across_a_sigkill<F, Fut>(
    js: &async_nats::jetstream::Context,
    stream: &str,
    path: &Path,
    dir: &Path,
    stored: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut daemon = Daemon::start(path, dir);
    eventually(Duration::from_secs(120), "a first write landed", stored).await;
    daemon.kill();
    let (pending, _) = consumer_state(js, stream, "jetsink").await;
    assert!(
        pending > 0,
        "the SIGKILL came after the drain: nothing tested"
    );
    let mut daemon = Daemon::start(path, dir);
    eventually(Duration::from_secs(300), "the stream is drained", || {
        drained(js, stream)
    })
    .await;
    daemon.stop_cleanly();
}

fn rollover() -> Value {
    json!({"max_messages": 4000, "max_age_ms": 2000})
}

#[tokio::test(flavor = "multi_thread")]
async fn s3_parquet_objects_with_rollover_hold_every_message_across_a_sigkill() {
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("pq-kill");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PQS3", "pqs3.>").await;
    let cfg = config(
        &server,
        "PQS3",
        "pqs3.>",
        destination(
            &moto,
            dir.path(),
            "pq-kill",
            json!({"format": "parquet", "rollover": rollover(), "row_group_rows": 1000}),
        ),
        json!({"batch_size": 500}),
    );
    let path = write_config(dir.path(), &cfg);
    publish_n(&js, "pqs3.x", N).await;
    let store = moto.store("pq-kill");
    drain_across_a_sigkill(&js, "PQS3", &path, dir.path(), || async {
        store.list(None).next().await.is_some()
    })
    .await;
    let local = dir.path().join("objects");
    let keys = download(&store, &local).await;
    for key in &keys {
        assert!(
            key.starts_with("archive/PQS3/") && key.ends_with(".parquet"),
            "{key}"
        );
    }
    let read = read_with_pyarrow_and_duckdb(&local, DEDUPLICATED);
    assert_archive_holds_every_message(&read, "PQS3", "pqs3.x");
    for f in read["files"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap().rsplit('/').next().unwrap();
        let rows = f["rows"].as_u64().unwrap();
        assert!(rows <= 4000, "{name}: {rows} rows, at most max_messages");
        // The name is the range it holds; a hash follows it when the run has gaps (the
        // first start's redeliveries written beside new messages after the SIGKILL), so
        // only a gapless name says how many sequences the object spans.
        let named = Named::parse(name.trim_end_matches(".parquet")).expect(name);
        if !named.hashed {
            let span = named.last - named.first + 1;
            assert!(
                span <= rows,
                "{name}: a gapless run of {span} in {rows} rows"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn parquet_files_with_rollover_hold_every_message_across_a_sigkill() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PQFILE", "pqfile.>").await;
    let out = dir.path().join("archive");
    let cfg = config(
        &server,
        "PQFILE",
        "pqfile.>",
        json!({"type": "file", "directory": out, "format": "parquet", "rollover": rollover()}),
        json!({"batch_size": 500}),
    );
    let path = write_config(dir.path(), &cfg);
    publish_n(&js, "pqfile.x", N).await;
    let parquet_files = |dir: &Path| {
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".parquet"))
                    .count()
            })
            .unwrap_or(0)
    };
    drain_across_a_sigkill(&js, "PQFILE", &path, dir.path(), || {
        let n = parquet_files(&out);
        async move { n > 0 }
    })
    .await;
    let leftovers: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );
    let read = read_with_pyarrow_and_duckdb(&out, DEDUPLICATED);
    assert_archive_holds_every_message(&read, "PQFILE", "pqfile.x");
}

/// A user who may do everything but acknowledge: the server never sees its ACKs, so every
/// file it writes stays written and unacknowledged — what a SIGKILL between a write and
/// its ACKs leaves, with no window to hit.
const DENY_ACKS: &str = r#"
accounts {
  ARCHIVE {
    jetstream: enabled
    users: [
      {user: admin, password: admin}
      {user: noack, password: noack, permissions: {publish: {deny: ["$JS.ACK.>"]}}}
    ]
  }
}
"#;

/// The stream's JetStream context as `admin`.
async fn admin(server: &NatsServer) -> async_nats::jetstream::Context {
    let client = async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
        .connect(server.url())
        .await
        .expect("connect as admin");
    async_nats::jetstream::new(client)
}

/// A sink config reading `stream` into `destination` with `rollover` and `batch_size`,
/// connecting as `user`.
fn as_user(
    server: &NatsServer,
    stream: &str,
    subject: &str,
    destination: &Value,
    (max_messages, batch_size): (usize, usize),
    user: &str,
) -> Value {
    let rollover = json!({"rollover": {"max_messages": max_messages, "max_age_ms": 2000}});
    let mut cfg = config(
        server,
        stream,
        subject,
        with(destination.clone(), rollover),
        json!({"batch_size": batch_size}),
    );
    let env = format!("PARQUET_ARCHIVE_TEST_{}_PW", user.to_uppercase());
    std::env::set_var(&env, user);
    cfg["nats"]["user"] = json!(user);
    cfg["nats"]["password_env"] = json!(env);
    cfg
}

/// Drains `stream` into `destination` in two runs: first a jetsink whose ACKs the server
/// refuses (AckWait a minute, so nothing comes back to it), SIGKILLed once `rows` (the
/// rows the archive holds, read by jetsink's reader) sees a file; the consumer then shows
/// every message delivered and none acknowledged. Then a jetsink allowed to ACK, cutting
/// batches elsewhere (files of at most 2,500 where the first wrote up to 4,000), drains
/// the stream. Returns the rows the first left and what the second counted as already
/// stored.
async fn drain_after_writes_whose_acks_were_lost<F, Fut>(
    server: &NatsServer,
    js: &async_nats::jetstream::Context,
    (stream, subject): (&str, &str),
    dir: &Path,
    destination: Value,
    mut rows: F,
) -> (usize, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let mut first = as_user(server, stream, subject, &destination, (4000, 500), "noack");
    first["sinks"]["main"]["source"]["ack_wait_ms"] = json!(60_000);
    let mut daemon = Daemon::start(&write_config(dir, &first), dir);
    daemon
        .eventually(Duration::from_secs(120), "a first file is written", || {
            let n = rows();
            async move { n.await > 0 }
        })
        .await;
    daemon.kill();
    let first_log = daemon.log_text();
    let left = rows().await;
    let info = common::consumer_info(js, stream, "jetsink").await;
    assert_eq!(info.ack_floor.stream_sequence, 0, "nothing was ever ACKed");
    assert!(
        info.num_ack_pending >= left,
        "{left} rows written and unacknowledged: {info:?}"
    );
    let second = as_user(server, stream, subject, &destination, (2500, 300), "admin");
    let listen = second["http"]["listen"].as_str().unwrap().to_string();
    let mut daemon = Daemon::start(&write_config(dir, &second), dir);
    daemon
        .eventually(Duration::from_secs(300), "the stream is drained", || {
            drained(js, stream)
        })
        .await;
    let found = metric_value(&listen, "jetsink_sink_already_stored_total{sink=\"main\"}")
        .await
        .expect("the metric is exported");
    daemon.stop_cleanly();
    println!("{left} rows written and never ACKed before the SIGKILL; {found} found again");
    // What each run warned about, for a count that comes out wrong.
    for (run, log) in [("first", first_log), ("second", daemon.log_text())] {
        let warnings: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
        println!("the {run} run's warnings: {warnings:#?}");
    }
    (left, found)
}

/// The rows of the Parquet files in `dir` (none while it does not exist), by sequence.
fn rows_in(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            !name.starts_with('.') && name.ends_with(".parquet")
        })
        .map(|e| sequences_of(std::fs::read(e.path()).unwrap().into()))
        .sum()
}

fn sequences_of(data: bytes::Bytes) -> usize {
    jetsink::sinks::parquet::read::sequences(data)
        .expect("a readable Parquet file")
        .expect("with a stream_sequence column")
        .len()
}

/// The rows of the Parquet objects of `store`.
async fn rows_of(store: &Arc<dyn ObjectStore>) -> usize {
    let metas: Vec<_> = store.list(None).collect().await;
    let mut rows = 0;
    for meta in metas {
        let body = store
            .get(&meta.expect("list").location)
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body");
        rows += sequences_of(body);
    }
    rows
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_written_and_never_acked_before_a_sigkill_get_no_second_copy() {
    let server = NatsServer::start_with_config(Some(DENY_ACKS));
    let moto = Moto::start();
    moto.create_bucket("pq-lost");
    let dir = tempfile::tempdir().unwrap();
    let js = admin(&server).await;
    create_stream(&js, "PQLOST", "pqlost.>").await;
    publish_n(&js, "pqlost.x", N).await;
    let store = moto.store("pq-lost");
    let destination = destination(&moto, dir.path(), "pq-lost", json!({"format": "parquet"}));
    let (left, found) = drain_after_writes_whose_acks_were_lost(
        &server,
        &js,
        ("PQLOST", "pqlost.>"),
        dir.path(),
        destination,
        || rows_of(&store),
    )
    .await;
    let local = dir.path().join("objects");
    download(&store, &local).await;
    let read = read_with_pyarrow_and_duckdb(&local, DEDUPLICATED);
    assert_archive_holds_every_message(&read, "PQLOST", "pqlost.x");
    assert!(
        found >= left as f64,
        "every message of the {left} rows left was found again, not written: {found}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn parquet_files_written_and_never_acked_before_a_sigkill_get_no_second_copy() {
    let server = NatsServer::start_with_config(Some(DENY_ACKS));
    let dir = tempfile::tempdir().unwrap();
    let js = admin(&server).await;
    create_stream(&js, "PQFLOST", "pqflost.>").await;
    publish_n(&js, "pqflost.x", N).await;
    let out = dir.path().join("archive");
    let destination = json!({"type": "file", "directory": out, "format": "parquet"});
    let (left, found) = drain_after_writes_whose_acks_were_lost(
        &server,
        &js,
        ("PQFLOST", "pqflost.>"),
        dir.path(),
        destination,
        || {
            let rows = rows_in(&out);
            async move { rows }
        },
    )
    .await;
    let read = read_with_pyarrow_and_duckdb(&out, DEDUPLICATED);
    assert_archive_holds_every_message(&read, "PQFLOST", "pqflost.x");
    assert!(
        found >= left as f64,
        "every message of the {left} rows left was found again, not written: {found}"
    );
}

/// A typed mapping for the order payloads of the malformed-payload tests.
fn order_columns() -> Value {
    json!({
        "columns": {
            "key": "$idempotency_key",
            "stream": "$stream",
            "seq": "$stream_sequence",
            "at": "$published_at",
            "order_id": "/order/id",
            "total": "/order/total",
            "paid": "/paid",
            "day": "/day",
        },
        "column_types": {
            "order_id": "int64",
            "total": "double",
            "paid": "boolean",
            "day": "date",
        }
    })
}

fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

/// Publishes 200 order payloads on `subject`, the 101st (stream sequence 101) not JSON.
async fn publish_orders_with_one_malformed(js: &async_nats::jetstream::Context, subject: &str) {
    for i in 1..=200u64 {
        let payload = if i == 101 {
            "{\"order\": {\"id\": 101, broken".to_string()
        } else {
            format!(
                "{{\"order\":{{\"id\":{i},\"total\":{}.25}},\"paid\":{},\"day\":\"2026-11-{:02}\"}}",
                i * 10,
                i % 2 == 0,
                i % 28 + 1
            )
        };
        js.publish(subject.to_string(), payload.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

fn dead_letter(stream: &str) -> Value {
    json!({"subject": format!("dlq.{stream}"), "create_stream": {"name": format!("{stream}_DLQ")}, "max_attempts": 1})
}

/// The 199 good rows, typed; the malformed one only in the dead-letter stream.
async fn assert_typed_rows_and_one_dead_letter(
    js: &async_nats::jetstream::Context,
    stream: &str,
    read: &Value,
) {
    let schema = &read["files"][0]["schema"];
    assert_eq!(schema["order_id"], "int64");
    assert_eq!(schema["total"], "double");
    assert_eq!(schema["paid"], "bool");
    assert_eq!(schema["day"], "date32[day]");
    assert_eq!(schema["at"], "timestamp[us, tz=UTC]");
    assert_eq!(read["duckdb_types"]["day"], "DATE");
    let rows = read["rows"].as_array().unwrap();
    let seqs: HashSet<u64> = rows.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    let expected: HashSet<u64> = (1..=200).filter(|&i| i != 101).collect();
    assert_eq!(seqs, expected, "every row but the malformed one");
    for r in rows {
        let i = r["seq"].as_u64().unwrap();
        assert_eq!(r["order_id"], i);
        assert_eq!(r["total"], (i * 10) as f64 + 0.25);
        assert_eq!(r["paid"], i % 2 == 0);
        assert_eq!(r["day"], format!("2026-11-{:02}", i % 28 + 1));
        assert_eq!(r["key"], format!("{stream}:{i}"));
    }
    assert_eq!(read["sql"], json!([[199, 20_100 - 101]]));
    eventually(
        Duration::from_secs(30),
        "the malformed message is dead-lettered",
        || {
            let js = js.clone();
            let dlq = format!("{stream}_DLQ");
            async move { stored(&js, &dlq).await == 1 }
        },
    )
    .await;
    let copies = stream_messages(js, &format!("{stream}_DLQ"), ">").await;
    let reason = copies[0]
        .headers
        .get("Jetsink-Error")
        .map(|v| v.as_str().to_string())
        .unwrap_or_default();
    assert!(reason.contains("not JSON"), "{reason}");
    assert!(
        reason.contains("column mapping reads it with JSON pointers"),
        "{reason}"
    );
}

const TYPED_SQL: &str = "SELECT count(*), sum(order_id) FROM {files} WHERE paid IS NOT NULL";

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_payload_under_a_typed_mapping_is_dead_lettered_and_every_other_object_row_lands(
) {
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("pq-typed");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PQTYPED", "pqtyped.>").await;
    let mut cfg = config(
        &server,
        "PQTYPED",
        "pqtyped.>",
        with(
            destination(
                &moto,
                dir.path(),
                "pq-typed",
                json!({"format": "parquet", "compression": "snappy",
                       "rollover": {"max_messages": 150, "max_age_ms": 1000}}),
            ),
            order_columns(),
        ),
        json!({"batch_size": 50}),
    );
    cfg["sinks"]["main"]["dead_letter"] = dead_letter("PQTYPED");
    let path = write_config(dir.path(), &cfg);
    publish_orders_with_one_malformed(&js, "pqtyped.orders").await;
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "the stream is drained", || {
        drained(&js, "PQTYPED")
    })
    .await;
    daemon.stop_cleanly();
    let local = dir.path().join("objects");
    download(&moto.store("pq-typed"), &local).await;
    let read = read_with_pyarrow_and_duckdb(&local, TYPED_SQL);
    assert_eq!(read["files"][0]["compression"], json!(["SNAPPY"]));
    assert_typed_rows_and_one_dead_letter(&js, "PQTYPED", &read).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_payload_under_a_typed_mapping_is_dead_lettered_and_every_other_file_row_lands()
{
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PQTYPEDF", "pqtypedf.>").await;
    let out = dir.path().join("typed");
    let mut cfg = config(
        &server,
        "PQTYPEDF",
        "pqtypedf.>",
        with(
            json!({"type": "file", "directory": out, "format": "parquet",
                   "rollover": {"max_messages": 150, "max_age_ms": 1000}}),
            order_columns(),
        ),
        json!({"batch_size": 50}),
    );
    cfg["sinks"]["main"]["dead_letter"] = dead_letter("PQTYPEDF");
    let path = write_config(dir.path(), &cfg);
    publish_orders_with_one_malformed(&js, "pqtypedf.orders").await;
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "the stream is drained", || {
        drained(&js, "PQTYPEDF")
    })
    .await;
    daemon.stop_cleanly();
    let read = read_with_pyarrow_and_duckdb(&out, TYPED_SQL);
    assert_typed_rows_and_one_dead_letter(&js, "PQTYPEDF", &read).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_encrypted_parquet_object_holds_sealed_payloads_and_decrypts() {
    let server = NatsServer::start();
    let moto = Moto::start();
    moto.create_bucket("pq-enc");
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PQENC", "pqenc.>").await;
    let key = dir.path().join("a.key");
    let (code, out, err) = jetsink(&["keygen", "--out", key.to_str().unwrap()], dir.path());
    assert_eq!(code, 0, "{out}{err}");
    let mut cfg = config(
        &server,
        "PQENC",
        "pqenc.>",
        destination(
            &moto,
            dir.path(),
            "pq-enc",
            json!({"format": "parquet", "partition": "",
                   "rollover": {"max_messages": 100, "max_age_ms": 1000}}),
        ),
        json!({"batch_size": 10}),
    );
    cfg["sinks"]["main"]["encryption"] =
        json!({"active_key": "a", "keys": [{"id": "a", "file": key}]});
    let path = write_config(dir.path(), &cfg);
    for i in 0..10 {
        js.publish(
            "pqenc.x",
            format!("{{\"card\":\"4111-1111-1111-1111\",\"i\":{i}}}").into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "the stream is drained", || {
        drained(&js, "PQENC")
    })
    .await;
    daemon.stop_cleanly();
    let local = dir.path().join("objects");
    let keys = download(&moto.store("pq-enc"), &local).await;
    let read = read_with_pyarrow_and_duckdb(&local, "SELECT count(*) FROM {files}");
    assert_eq!(read["sql"], json!([[10]]));
    for r in read["rows"].as_array().unwrap() {
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(r["payload"].as_str().unwrap())
            .unwrap();
        assert!(sealed.starts_with(b"JSE\x01"), "a sealed value: {r}");
        assert!(!String::from_utf8_lossy(&sealed).contains("4111-1111"));
    }
    let mut clear = 0;
    for k in keys {
        let file = local.join(&k);
        let (code, out, err) = jetsink(
            &[
                "decrypt",
                "--config",
                path.to_str().unwrap(),
                "--sink",
                "main",
                file.to_str().unwrap(),
            ],
            dir.path(),
        );
        assert_eq!(code, 0, "{err}");
        for line in out.lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            assert_eq!(r["payload"]["card"], "4111-1111-1111-1111", "{r}");
            assert_eq!(r["payload_encoding"], "json");
            clear += 1;
        }
    }
    assert_eq!(clear, 10);
}

#[test]
fn bench_measures_a_parquet_file_sink_and_verifies_its_keys() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let out = bench_configured_sink(
        &server,
        dir.path(),
        json!({"type": "file", "directory": dir.path().join("bench"), "format": "parquet",
               "rollover": {"max_messages": 1000}}),
        3_000,
    );
    assert!(out.contains("3000 distinct keys stored"), "{out}");
}

#[test]
fn validate_names_a_mapping_parquet_cannot_hold_and_a_pointer_into_an_encrypted_payload() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("a.key");
    let (code, out, err) = jetsink(&["keygen", "--out", key.to_str().unwrap()], dir.path());
    assert_eq!(code, 0, "{out}{err}");
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
        "sinks": {"main": {
            "source": {"stream": "S", "consumer": "c"},
            "encryption": {"active_key": "a", "keys": [{"id": "a", "file": key}]},
            "destination": {"type": "file", "directory": dir.path().join("out"), "format": "parquet",
                            "columns": {"id": "/id", "subject": "$subject"},
                            "column_types": {"id": "int64", "subject": "int64"}}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(code, 78, "{out}{err}");
    for needle in [
        "sinks.main.destination.columns.id",
        "the payload is encrypted",
        "sinks.main.destination.column_types.subject",
        "a int64 column cannot hold text ($subject)",
    ] {
        assert!(
            err.contains(needle) || out.contains(needle),
            "{needle} in {out}{err}"
        );
    }
}

/// A Parquet file sink without a `rollover` of its own gathers several pulls per file (half
/// the consumer's `max_ack_pending`), so a stream of small pulls does not become a file
/// per pull; `validate` says what the default is.
#[tokio::test(flavor = "multi_thread")]
async fn parquet_files_without_a_rollover_gather_several_pulls_per_file_by_default() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PQDEF", "pqdef.>").await;
    let out = dir.path().join("archive");
    let mut cfg = config(
        &server,
        "PQDEF",
        "pqdef.>",
        json!({"type": "file", "directory": out, "format": "parquet"}),
        json!({"batch_size": 50}),
    );
    cfg["sinks"]["main"]["source"]["max_ack_pending"] = json!(400);
    let path = write_config(dir.path(), &cfg);
    let (code, summary, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(code, 0, "{summary}{err}");
    assert!(
        summary
            .contains("rollover:    default: a write per 200 messages, 67108864 bytes or 60000 ms"),
        "{summary}"
    );
    publish_n(&js, "pqdef.x", 1_000).await;
    let mut daemon = Daemon::start(&path, dir.path());
    daemon
        .eventually(Duration::from_secs(120), "the stream is drained", || {
            drained(&js, "PQDEF")
        })
        .await;
    daemon.stop_cleanly();
    let files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    assert!(
        files.len() <= 6,
        "1,000 messages in pulls of 50 gathered 200 per file, not one file per pull: {files:?}"
    );
    assert_eq!(rows_in(&out), 1_000);
}
