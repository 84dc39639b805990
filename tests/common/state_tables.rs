//! The conformance bodies of state tables (an ordered upsert and its delete marker), run
//! on every database destination through `conformance_suite!`: the newest message of a
//! key stays whatever order the writes come in — written out of order by hand on every
//! write path, replayed from an old range, shuffled, randomized, committed two batches at
//! a time, cut short by a SIGKILL — and a delete stays deleted when an older update
//! arrives after it.
//!
//! Every daemon test publishes `N` updates `{"k": i % KEYS, "v": i}` (the last of some
//! keys a delete), so the newest of key `k` is message `N - KEYS + k`, stream sequence
//! one more.

use std::time::Duration;

use async_nats::HeaderMap;
use bytes::Bytes;
use jetsink::envelope::Envelope;
use jetsink::sinks::Sink;
use serde_json::{json, Value};

use super::conformance::TestDatabase;
use super::database::envelope;
use super::*;

/// Updates each daemon test publishes, over `KEYS` keys; the last message of the first
/// `DELETED` keys deletes them.
const N: usize = 2_000;
const KEYS: usize = 20;
const DELETED: usize = 5;

/// Creates `name (k key, v, version, seq, gone)`: `gone` is the delete marker's column.
async fn state_table<D: TestDatabase>(db: &D, name: &str) {
    db.exec(&format!(
        "CREATE TABLE {name} (k BIGINT PRIMARY KEY, v BIGINT, version BIGINT, \
         seq BIGINT NOT NULL, gone {} NULL)",
        D::TIMESTAMP
    ))
    .await;
}

/// The destination keys of an upsert into state table `table`, ordered by
/// `$stream_sequence` (`version: None`) or by the payload's `/version`, with a delete
/// marker (`delete`) into `gone`.
fn state_destination(table: &str, version: bool, delete: Value) -> Value {
    let mut d = json!({"table": table, "mode": "upsert", "delete": delete,
                       "columns": {"k": "/k", "v": "/v", "seq": "$stream_sequence"}});
    if version {
        d["columns"]["version"] = json!("/version");
        d["order"] = json!({"column": "version"});
    }
    d
}

fn merged(mut base: Value, extra: &str) -> Value {
    let extra: Value = serde_json::from_str(extra).expect("config extra");
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

async fn opened<D: TestDatabase>(config: D::Config) -> D::Sink {
    let mut sink = D::sink(config);
    sink.open().await.expect("open");
    sink
}

/// Envelope `seq` updating key `k` to `v`, at `version`.
fn update(seq: u64, k: i64, v: i64, version: i64) -> Envelope {
    envelope(
        seq,
        format!(r#"{{"k":{k},"v":{v},"version":{version}}}"#).as_bytes(),
    )
}

/// Envelope `seq` deleting key `k` at `version`: the `Jetsink-Op: delete` header, and
/// `"op": "d"` for a marker read from the payload.
fn delete(seq: u64, k: i64, version: i64) -> Envelope {
    let mut e = envelope(
        seq,
        format!(r#"{{"k":{k},"version":{version},"op":"d"}}"#).as_bytes(),
    );
    e.headers.push(("Jetsink-Op".into(), vec!["delete".into()]));
    e
}

/// Whether the sink's consumer exists and has every message ACKed (false before the
/// daemon created it).
async fn drained(js: &async_nats::jetstream::Context, stream: &str) -> bool {
    match js.get_stream(stream).await {
        Ok(s) => s
            .consumer_info("jetsink")
            .await
            .is_ok_and(|i| i.num_pending == 0 && i.num_ack_pending == 0),
        Err(_) => false,
    }
}

/// Rows of `table` matching `condition`.
async fn rows<D: TestDatabase>(db: &D, table: &str, condition: &str) -> i64 {
    db.count(&format!("{table} WHERE {condition}")).await
}

pub async fn an_ordered_upsert_keeps_the_newest_whatever_the_write_order_on_every_write_path<
    D: TestDatabase,
>() {
    let db = D::create("newest").await;
    for (i, path) in D::WRITE_PATHS.iter().enumerate() {
        let table = format!("s{i}");
        state_table(&db, &table).await;
        let dest = merged(state_destination(&table, false, Value::Null), path);
        let mut sink = opened::<D>(db.config(dest)).await;
        // Three versions of key 42, the newest written first: the older ones, alone or
        // together, change nothing.
        sink.write_batch(&[update(3, 42, 30, 0)]).await.unwrap();
        sink.write_batch(&[update(1, 42, 10, 0), update(2, 42, 20, 0)])
            .await
            .unwrap();
        sink.write_batch(&[update(1, 42, 10, 0)]).await.unwrap();
        assert_eq!(
            rows(&db, &table, "k = 42 AND v = 30 AND seq = 3").await,
            1,
            "{path}"
        );
        // One batch holding three versions of each of ten keys, the newest first: each key
        // keeps its newest, whatever its place in the batch.
        let batch: Vec<Envelope> = (0..10i64)
            .flat_map(|k| {
                let base = 100 + 3 * k as u64;
                [2, 0, 1].map(|d| update(base + d, k, (base + d) as i64, 0))
            })
            .collect();
        sink.write_batch(&batch).await.unwrap();
        let newest = (0..10)
            .map(|k| format!("(k = {k} AND v = {0} AND seq = {0})", 102 + 3 * k))
            .collect::<Vec<_>>()
            .join(" OR ");
        assert_eq!(rows(&db, &table, &newest).await, 10, "{path}");
    }
}

pub async fn a_delete_then_an_older_update_leaves_the_key_deleted_and_a_newer_one_revives_it<
    D: TestDatabase,
>() {
    let db = D::create("delete").await;
    let markers = [
        ("by_header", json!({"column": "gone"})),
        (
            "by_payload",
            json!({"pointer": "/op", "value": "d", "column": "gone"}),
        ),
    ];
    for (table, marker) in markers {
        state_table(&db, table).await;
        let mut sink = opened::<D>(db.config(state_destination(table, true, marker))).await;
        let row = |c: &str| format!("k = 1 AND {c}");
        sink.write_batch(&[update(1, 1, 20, 2)]).await.unwrap();
        // The delete keeps the row, its values and its order, as a tombstone.
        sink.write_batch(&[delete(2, 1, 3)]).await.unwrap();
        let deleted = row("gone IS NOT NULL AND version = 3 AND v = 20");
        assert_eq!(rows(&db, table, &deleted).await, 1, "{table}");
        // Older updates, alone or together, arriving after it: still deleted.
        sink.write_batch(&[update(3, 1, 10, 1)]).await.unwrap();
        sink.write_batch(&[update(4, 1, 21, 2), update(5, 1, 22, 1)])
            .await
            .unwrap();
        assert_eq!(rows(&db, table, &deleted).await, 1, "{table}");
        // A delete of a key never stored leaves a tombstone an older update respects.
        sink.write_batch(&[delete(6, 2, 5)]).await.unwrap();
        sink.write_batch(&[update(7, 2, 40, 4)]).await.unwrap();
        let k2 = "k = 2 AND gone IS NOT NULL AND version = 5 AND v IS NULL";
        assert_eq!(rows(&db, table, k2).await, 1, "{table}");
        // A newer update brings the key back.
        sink.write_batch(&[update(8, 1, 50, 4)]).await.unwrap();
        let live = row("gone IS NULL AND version = 4 AND v = 50");
        assert_eq!(rows(&db, table, &live).await, 1, "{table}");
        // A delete and an older update in one batch, the update last: deleted.
        sink.write_batch(&[delete(9, 1, 6), update(10, 1, 60, 5)])
            .await
            .unwrap();
        let deleted = row("gone IS NOT NULL AND version = 6 AND v = 50");
        assert_eq!(rows(&db, table, &deleted).await, 1, "{table}");
        assert_eq!(db.count(table).await, 2);
    }
}

// ---------------------------------------------------------------- the whole daemon

pub async fn validate_online_shows_the_order_column_and_the_delete_marker_it_checked<
    D: TestDatabase,
>() {
    let db = D::create("vstate").await;
    state_table(&db, "state").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (stream, subjects) = (
        format!("{}VSTATE", D::STREAM),
        format!("{}vstate.>", D::KIND),
    );
    let dest = db.destination(state_destination("state", true, json!({"column": "gone"})));
    let path = write_config(
        dir.path(),
        &config(&server, &stream, &subjects, dest, json!({})),
    );
    let path = path.to_string_lossy().into_owned();
    let (code, out, err) = jetsink(&["validate", "--config", &path, "--online"], dir.path());
    assert_eq!(code, 0, "{out}\n{err}");
    for needle in [
        "(upsert, mapped columns, newest by version; deletes by header Jetsink-Op = \"delete\" into gone)",
        "may write it; newest by version (",
        "), ties by seq; deletes mark gone (",
    ] {
        assert!(out.contains(needle), "{out} lacks {needle}");
    }
    // An order column the table holds as text cannot be compared as a number or a time.
    db.exec("CREATE TABLE texts (k BIGINT PRIMARY KEY, v BIGINT, version TEXT, seq BIGINT)")
        .await;
    let dest = db.destination(state_destination("texts", true, Value::Null));
    let path = write_config(
        dir.path(),
        &config(&server, &stream, &subjects, dest, json!({})),
    );
    let path = path.to_string_lossy().into_owned();
    let (code, out, err) = jetsink(&["validate", "--config", &path, "--online"], dir.path());
    assert_eq!(code, 78, "{out}\n{err}");
    assert!(
        out.contains("the order column version has type text"),
        "{out}"
    );
}

/// Publishes the `N` updates (the last message of each of the first `DELETED` keys a
/// delete) on `subject`, awaiting every ack.
async fn publish_updates(js: &async_nats::jetstream::Context, subject: &str, n: usize) {
    let mut acks = Vec::with_capacity(256);
    for i in 0..n {
        let k = i % KEYS;
        let mut headers = HeaderMap::new();
        if i >= n - KEYS && k < DELETED {
            headers.insert("Jetsink-Op", "delete");
        }
        let payload = Bytes::from(format!(r#"{{"k":{k},"v":{i}}}"#));
        let ack = js
            .publish_with_headers(subject.to_string(), headers, payload)
            .await
            .expect("publish");
        acks.push(ack);
        if acks.len() == 256 {
            for ack in acks.drain(..) {
                ack.await.expect("puback");
            }
        }
    }
    for ack in acks {
        ack.await.expect("puback");
    }
}

/// True of each key's row as the newest of the `n` published updates left it: the last
/// update of a live key, the last sequence of a deleted one.
fn newest_of_each_key(n: usize) -> String {
    newest_where(n, |last| last + 1)
}

/// True of each key's row when the newest of `n` updates (the last one's value `last`)
/// was stored at stream sequence `seq_of(last)`.
fn newest_where(n: usize, seq_of: impl Fn(usize) -> usize) -> String {
    (0..KEYS)
        .map(|k| {
            let last = n - KEYS + k;
            let seq = seq_of(last);
            if k < DELETED {
                format!("(k = {k} AND seq = {seq} AND gone IS NOT NULL)")
            } else {
                format!("(k = {k} AND seq = {seq} AND v = {last} AND gone IS NULL)")
            }
        })
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// A daemon config writing the stream `<STREAM><tag>` into the state table with
/// `delivery`, and its stream and subject.
struct Run {
    stream: String,
    subject: String,
    config: Value,
}

fn run<D: TestDatabase>(db: &D, server: &NatsServer, tag: &str, delivery: Value) -> Run {
    let stream = format!("{}{}", D::STREAM, tag.to_uppercase());
    let subjects = format!("{}{tag}.>", D::KIND);
    let dest = db.destination(state_destination("state", false, json!({"column": "gone"})));
    let mut config = config(server, &stream, &subjects, dest, delivery);
    config["sinks"]["main"]["source"]["ack_wait_ms"] = json!(10_000);
    Run {
        subject: format!("{}{tag}.x", D::KIND),
        stream,
        config,
    }
}

/// Publishes the updates, drains them through a daemon with `delivery`, and checks that
/// every key holds the newest.
async fn drain_updates<D: TestDatabase>(tag: &str, delivery: Value) {
    let db = D::create(tag).await;
    state_table(&db, "state").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let r = run(&db, &server, tag, delivery);
    create_stream(&js, &r.stream, &format!("{}{tag}.>", D::KIND)).await;
    publish_updates(&js, &r.subject, N).await;
    let mut daemon = Daemon::start(&write_config(dir.path(), &r.config), dir.path());
    eventually(Duration::from_secs(60), "every update ACKed", || async {
        drained(&js, &r.stream).await
    })
    .await;
    assert_eq!(
        rows(&db, "state", &newest_of_each_key(N)).await,
        KEYS as i64,
        "{}",
        daemon.log_text()
    );
    daemon.stop_cleanly();
}

pub async fn shuffled_updates_leave_every_key_at_its_last_published_value<D: TestDatabase>() {
    let delivery = json!({"batch_size": 100, "batch_timeout_ms": 100,
                          "shuffle": {"buffer": 1000}});
    drain_updates::<D>("shuffled", delivery).await;
}

pub async fn randomized_updates_leave_every_key_at_its_last_published_value<D: TestDatabase>() {
    let delivery = json!({"batch_size": 100, "batch_timeout_ms": 100,
                          "randomizer": {"enabled": true, "process_immediately_probability": 0.5,
                                         "min_delay_ms": 20, "max_delay_ms": 300,
                                         "max_window": 1000}});
    drain_updates::<D>("randomized", delivery).await;
}

pub async fn two_batches_in_flight_leave_every_key_at_its_last_published_value<D: TestDatabase>() {
    let delivery = json!({"batch_size": 50, "batch_timeout_ms": 100, "batches_in_flight": 2});
    drain_updates::<D>("inflight2", delivery).await;
}

/// Runs `jetsink replay --config CONFIG --sink main ARGS` in a blocking thread: (exit code,
/// stdout, stderr).
async fn replay(
    dir: &std::path::Path,
    config: &std::path::Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut all: Vec<String> = ["replay", "--config"].map(String::from).to_vec();
    all.push(config.display().to_string());
    all.extend(["--sink", "main"].map(String::from));
    all.extend(args.iter().map(|a| a.to_string()));
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        jetsink_within(&refs, &dir, Duration::from_secs(120)).expect("replay finishes")
    })
    .await
    .expect("replay thread")
}

pub async fn replaying_an_old_range_leaves_every_key_at_its_newest<D: TestDatabase>() {
    let db = D::create("replayed").await;
    state_table(&db, "state").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let r = run(&db, &server, "replayed", json!({"batch_timeout_ms": 100}));
    create_stream(&js, &r.stream, &format!("{}replayed.>", D::KIND)).await;
    // Three versions of key 42 (10, 20, 30), then the updates of every key.
    for v in [10, 20, 30] {
        js.publish(r.subject.clone(), format!(r#"{{"k":42,"v":{v}}}"#).into())
            .await
            .expect("publish")
            .await
            .expect("puback");
    }
    publish_updates(&js, &r.subject, 200).await;
    let path = write_config(dir.path(), &r.config);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "every message ACKed", || async {
        drained(&js, &r.stream).await
    })
    .await;
    daemon.stop_cleanly();
    let k42 = "k = 42 AND v = 30 AND seq = 3";
    assert_eq!(rows(&db, "state", k42).await, 1);
    // The oldest version alone, then the whole stream again: nothing moves back.
    for args in [
        &["--from-seq", "1", "--to-seq", "1"][..],
        &["--from-seq", "1"],
    ] {
        let (code, out, err) = replay(dir.path(), &path, args).await;
        assert_eq!(code, 0, "{args:?}\n{out}\n{err}");
        assert_eq!(rows(&db, "state", k42).await, 1, "{args:?}: {out}");
    }
    // The updates were published after key 42's three, at sequences 4 onwards.
    let shifted = newest_where(200, |last| last + 4);
    assert_eq!(rows(&db, "state", &shifted).await, KEYS as i64);
}

pub async fn sigkill_mid_batch_of_updates_then_restart_leaves_every_key_at_its_newest<
    D: TestDatabase,
>() {
    let db = D::create("killed").await;
    state_table(&db, "state").await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let mut r = run(
        &db,
        &server,
        "killed",
        json!({"batch_size": 100, "batch_timeout_ms": 100}),
    );
    r.config["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2_000);
    create_stream(&js, &r.stream, &format!("{}killed.>", D::KIND)).await;
    let path = write_config(dir.path(), &r.config);
    let mut daemon = Daemon::start(&path, dir.path());
    // The first half is written; the second waits behind a lock on the table, delivered
    // and not written, when the daemon is killed.
    publish_updates(&js, &r.subject, N / 2).await;
    eventually(Duration::from_secs(30), "the first half ACKed", || async {
        drained(&js, &r.stream).await
    })
    .await;
    let lock = db.lock_writes("state").await;
    publish_updates(&js, &r.subject, N / 2).await;
    eventually(
        Duration::from_secs(30),
        "a batch held behind the lock",
        || async { consumer_state(&js, &r.stream, "jetsink").await.1 > 0 },
    )
    .await;
    daemon.kill();
    drop(lock);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "every update ACKed", || async {
        drained(&js, &r.stream).await
    })
    .await;
    daemon.stop_cleanly();
    // The second half repeats the first's keys and values one stream sequence range on.
    let newest = newest_where(N / 2, |last| N / 2 + last + 1);
    assert_eq!(rows(&db, "state", &newest).await, KEYS as i64);
}
