//! `jetsink replay` against a real nats-server, SQLite and PostgreSQL: a truncated table restored
//! exactly, a replay over existing rows changing nothing, a `--to-seq` bound written
//! exactly, a dry run writing nothing, a file directory a running instance holds refused;
//! the sink's durable consumer never moves and no replay consumer is left behind.

use crate::common;

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use common::pg::PgDatabase;
use common::*;
use futures::TryStreamExt;
use serde_json::json;
use time::format_description::well_known::Rfc3339;

const N: usize = 10_000;

/// Runs `jetsink replay` with `args` after `--config CONFIG --sink main`, in a blocking
/// thread (it waits for the child): (exit code, stdout, stderr).
async fn replay(dir: &Path, config: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<String> = vec![
        "replay".into(),
        "--config".into(),
        config.display().to_string(),
        "--sink".into(),
        "main".into(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        jetsink_within(&refs, &dir, Duration::from_secs(180)).expect("replay finishes")
    })
    .await
    .expect("replay thread")
}

/// The consumers of `stream`, sorted.
async fn consumers(js: &jetstream::Context, stream: &str) -> Vec<String> {
    let s = js.get_stream(stream).await.expect("stream");
    let mut names: Vec<String> = s.consumer_names().try_collect().await.expect("names");
    names.sort();
    names
}

/// (delivered stream sequence, ack floor stream sequence) of the sink's durable consumer.
async fn durable(js: &jetstream::Context, stream: &str) -> (u64, u64) {
    let i = common::consumer_info(js, stream, "jetsink").await;
    (i.delivered.stream_sequence, i.ack_floor.stream_sequence)
}

/// (rows, lowest and highest stream sequence) of the table.
fn rows(db: &Path) -> (i64, i64, i64) {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.query_row(
        "SELECT COUNT(*), COALESCE(MIN(stream_sequence), 0), COALESCE(MAX(stream_sequence), 0) FROM events",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .expect("count")
}

fn truncate(db: &Path) {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.execute("DELETE FROM events", []).expect("delete");
}

/// A stream of `n` messages drained by a daemon into SQLite, the daemon stopped: the
/// server, the directory, the config and the database.
async fn drained_into_sqlite(
    stream: &str,
    n: usize,
) -> (
    NatsServer,
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let subject = format!("{}.>", stream.to_lowercase());
    create_stream(&js, stream, &subject).await;
    publish_n(&js, &format!("{}.x", stream.to_lowercase()), n).await;
    let cfg = config(
        &server,
        stream,
        &subject,
        json!({"type": "sqlite", "path": "data/out.db", "table": "events"}),
        json!({"batch_size": 500}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    let db = dir.path().join("data/out.db");
    eventually(Duration::from_secs(60), "every row", || async {
        sqlite_count(&db, "events") == n as u64
    })
    .await;
    eventually(Duration::from_secs(10), "consumer drained", || async {
        consumer_state(&js, stream, "jetsink").await == (0, 0)
    })
    .await;
    let status = daemon.terminate(Duration::from_secs(15)).expect("exits");
    assert!(status.success(), "{}", daemon.log_text());
    (server, dir, path, db)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_table_is_restored_exactly_and_a_second_replay_changes_nothing() {
    // A time before the first publish (the stream is new, so nothing is older).
    let since = (time::OffsetDateTime::now_utc() - time::Duration::seconds(1))
        .format(&Rfc3339)
        .unwrap();
    let (server, dir, config, db) = drained_into_sqlite("REPLAY", N).await;
    let js = server.js().await;
    let position = durable(&js, "REPLAY").await;
    truncate(&db);
    assert_eq!(rows(&db).0, 0);

    let (code, out, err) = replay(dir.path(), &config, &["--since", &since]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows(&db), (N as i64, 1, N as i64), "{out}");
    assert!(
        out.contains(
            "sequences 1..=10000: read 10000, written 10000, already present 0, dead-lettered 0"
        ),
        "{out}"
    );

    let (code, out, err) = replay(dir.path(), &config, &["--from-seq", "1"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows(&db), (N as i64, 1, N as i64), "{out}");
    assert!(
        out.contains("written 10000, already present 10000, dead-lettered 0"),
        "{out}"
    );
    assert_eq!(
        durable(&js, "REPLAY").await,
        position,
        "the sink's consumer never moves"
    );
    assert_eq!(consumer_state(&js, "REPLAY", "jetsink").await, (0, 0));
    assert_eq!(consumers(&js, "REPLAY").await, vec!["jetsink".to_string()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_to_seq_bound_writes_exactly_its_range_and_a_dry_run_writes_nothing() {
    let (server, dir, config, db) = drained_into_sqlite("BOUND", 3_000).await;
    let js = server.js().await;
    truncate(&db);

    let (code, out, err) = replay(
        dir.path(),
        &config,
        &["--from-seq", "1001", "--to-seq", "2000", "--dry-run"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "would replay 1000 message(s) of sink main from stream BOUND sequences 1001..=2000"
        ),
        "{out}"
    );
    assert_eq!(rows(&db).0, 0, "a dry run writes nothing");
    assert_eq!(consumers(&js, "BOUND").await, vec!["jetsink".to_string()]);

    let (code, out, err) = replay(
        dir.path(),
        &config,
        &["--from-seq", "1001", "--to-seq", "2000"],
    )
    .await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(rows(&db), (1000, 1001, 2000), "{out}");
    assert!(out.contains("written 1000, already present 0"), "{out}");
    assert_eq!(consumers(&js, "BOUND").await, vec!["jetsink".to_string()]);

    let later = (time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .format(&Rfc3339)
        .unwrap();
    let (code, out, err) = replay(dir.path(), &config, &["--since", &later]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("nothing to replay"), "{out}");
    assert_eq!(rows(&db).0, 1000);
    assert_eq!(consumers(&js, "BOUND").await, vec!["jetsink".to_string()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_directory_a_running_instance_holds_is_refused_naming_it() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "FILED", "filed.>").await;
    publish_n(&js, "filed.x", 10).await;
    let cfg = config(
        &server,
        "FILED",
        "filed.>",
        json!({"type": "file", "directory": "out"}),
        json!({}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "drained", || async {
        drained(&js, "FILED").await
    })
    .await;
    let (code, out, err) = replay(dir.path(), &path, &["--from-seq", "1"]).await;
    assert_eq!(code, 75, "{out}\n{err}");
    assert!(
        err.contains("refusing to replay while a running jetsink writes")
            && err.contains("holds the lock"),
        "{err}"
    );
    assert_eq!(consumers(&js, "FILED").await, vec!["jetsink".to_string()]);
    let _ = daemon.terminate(Duration::from_secs(15));
}

#[test]
fn wrong_flags_are_usage_errors_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = jetsink(
        &[
            "replay",
            "--config",
            "x.json",
            "--sink",
            "main",
            "--from-seq",
            "9",
            "--to-seq",
            "5",
        ],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--to-seq: 5 is before --from-seq 9"), "{err}");
    let (code, _, err) = jetsink(
        &[
            "replay",
            "--config",
            "x.json",
            "--sink",
            "main",
            "--since",
            "yesterday",
        ],
        dir.path(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--since: \"yesterday\" is not an RFC 3339 time"),
        "{err}"
    );
    let (code, _, err) = jetsink(
        &["replay", "--config", "x.json", "--sink", "main"],
        dir.path(),
    );
    assert_eq!(code, 2, "a start is required: {err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_the_destination_refuses_is_dead_lettered_by_the_sinks_own_rules() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "POISON", "poison.>").await;
    let db = dir.path().join("data/out.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    // The sink's table, with a trigger that refuses payloads holding POISON (a permanent
    // error of that message alone).
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE events (idempotency_key TEXT PRIMARY KEY NOT NULL, stream TEXT NOT NULL,
               stream_sequence INTEGER NOT NULL, consumer_sequence INTEGER NOT NULL,
               subject TEXT NOT NULL, delivered INTEGER NOT NULL, published_at TEXT NOT NULL,
               written_at TEXT NOT NULL, message_id TEXT, headers TEXT NOT NULL, priority TEXT,
               lane TEXT, classification TEXT, labels TEXT NOT NULL DEFAULT '[]',
               payload BLOB NOT NULL);
             CREATE TRIGGER refuse_poison BEFORE INSERT ON events
               WHEN instr(CAST(NEW.payload AS TEXT), 'POISON') > 0
               BEGIN SELECT RAISE(ABORT, 'poison payload refused'); END;",
        )
        .unwrap();
    for i in 0..200 {
        let body = if i == 50 {
            r#"{"note":"POISON"}"#.to_string()
        } else {
            format!("{{\"i\":{i}}}")
        };
        js.publish("poison.x", body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let mut cfg = config(
        &server,
        "POISON",
        "poison.>",
        json!({"type": "sqlite", "path": "data/out.db", "table": "events"}),
        json!({"batch_size": 100}),
    );
    cfg["sinks"]["main"]["dead_letter"] =
        json!({"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}});
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "drained", || async {
        drained(&js, "POISON").await && sqlite_count(&db, "events") == 199
    })
    .await;
    let status = daemon.terminate(Duration::from_secs(15)).expect("exits");
    assert!(status.success(), "{}", daemon.log_text());
    truncate(&db);

    let (code, out, err) = replay(dir.path(), &path, &["--from-seq", "1"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("read 200, written 199, already present 0, dead-lettered 1"),
        "{out}"
    );
    assert_eq!(rows(&db), (199, 1, 200));
    assert_eq!(consumers(&js, "POISON").await, vec!["jetsink".to_string()]);
}

/// A database of its own, with the two statements the test runs on it.
struct Pg(PgDatabase);

impl Pg {
    async fn create() -> Pg {
        Pg(PgDatabase::create("replay").await)
    }

    async fn exec(&self, sql: &str) {
        self.0.client().await.batch_execute(sql).await.expect(sql);
    }

    async fn rows(&self) -> (i64, i64, i64) {
        let r = self
            .0
            .client()
            .await
            .query_one(
                "SELECT COUNT(*), COALESCE(MIN(stream_sequence), 0), COALESCE(MAX(stream_sequence), 0) FROM events",
                &[],
            )
            .await
            .expect("count");
        (r.get(0), r.get(1), r.get(2))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_postgres_table_is_restored_exactly_and_a_second_replay_changes_nothing() {
    let pg = Pg::create().await;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PGREPLAY", "pgreplay.>").await;
    publish_n(&js, "pgreplay.x", N).await;
    let cfg = config(
        &server,
        "PGREPLAY",
        "pgreplay.>",
        json!({"type": "postgres", "host": "127.0.0.1", "port": 5432, "user": "postgres",
               "database": pg.0.name, "table": "events"}),
        json!({"batch_size": 500}),
    );
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "drained", || async {
        drained(&js, "PGREPLAY").await
    })
    .await;
    let status = daemon.terminate(Duration::from_secs(15)).expect("exits");
    assert!(status.success(), "{}", daemon.log_text());
    assert_eq!(pg.rows().await, (N as i64, 1, N as i64));
    pg.exec("TRUNCATE events").await;

    let (code, out, err) = replay(dir.path(), &path, &["--from-seq", "1"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(pg.rows().await, (N as i64, 1, N as i64), "{out}");
    assert!(
        out.contains("written 10000, already present 0, dead-lettered 0"),
        "{out}"
    );
    let (code, out, err) = replay(dir.path(), &path, &["--from-seq", "1"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(pg.rows().await, (N as i64, 1, N as i64), "{out}");
    assert!(
        out.contains("written 10000, already present 10000, dead-lettered 0"),
        "{out}"
    );
    assert_eq!(
        consumers(&js, "PGREPLAY").await,
        vec!["jetsink".to_string()]
    );
}
