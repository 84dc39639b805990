//! `jetsink pause` and `jetsink resume` against a running daemon (nats-server 2.11+): the
//! daemon sees the consumer paused in the server (gauge, `/readyz`), writes nothing
//! published meanwhile while the backlog gauge follows it, and writes all of it once
//! resumed, by the command or at the deadline. On older servers both commands refuse
//! with exit 78, naming the version. Flag mistakes are exit 2 before anything connects.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::json;

const STREAM: &str = "PAUSE";
const SUBJECT: &str = "pause.x";
const PAUSED: &str = "jetsink_paused{sink=\"main\"}";
const PENDING: &str = "jetsink_consumer_pending_messages{consumer=\"jetsink\",sink=\"main\"}";

fn has_consumer_pause() -> bool {
    nats_server_version().is_some_and(|v| v >= (2, 11, 0))
}

/// Whether this server lacks consumer pause; says so, for a test that then skips.
fn skipped_without_consumer_pause() -> bool {
    if has_consumer_pause() {
        return false;
    }
    eprintln!(
        "skipped: consumer pause needs nats-server 2.11+, this one is {:?}",
        nats_server_version()
    );
    true
}

/// A daemon writing stream `PAUSE` into SQLite, with `first` messages already written.
struct Running {
    _server: NatsServer,
    js: async_nats::jetstream::Context,
    dir: tempfile::TempDir,
    config: PathBuf,
    db: PathBuf,
    listen: String,
    daemon: Daemon,
}

async fn running(first: usize) -> Running {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let cfg = config(
        &server,
        STREAM,
        "pause.>",
        json!({"type": "sqlite", "path": "data/p.db", "table": "events"}),
        json!({"batch_size": 50}),
    );
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let config = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&config, dir.path());
    daemon
        .wait_for_log(Duration::from_secs(30), "sink running")
        .await;
    publish_n(&js, SUBJECT, first).await;
    let db = dir.path().join("data/p.db");
    daemon
        .eventually(Duration::from_secs(60), "the first rows", || async {
            sqlite_count(&db, "events") == first as u64
        })
        .await;
    Running {
        _server: server,
        js,
        dir,
        config,
        db,
        listen,
        daemon,
    }
}

impl Running {
    fn jetsink(&self, args: &[&str]) -> (i32, String, String) {
        let config = self.config.to_string_lossy().into_owned();
        let mut all = args.to_vec();
        all.extend(["--config", &config, "--sink", "main"]);
        jetsink(&all, self.dir.path())
    }

    async fn metric(&self, series: &str) -> Option<f64> {
        metric_value(&self.listen, series).await
    }

    async fn readyz(&self) -> (u16, String) {
        http(
            reqwest::Method::GET,
            &format!("http://{}/readyz", self.listen),
        )
        .await
        .unwrap_or_default()
    }

    async fn consumer(&self) -> async_nats::jetstream::consumer::Info {
        common::consumer_info(&self.js, STREAM, "jetsink").await
    }

    async fn stream_messages(&self) -> u64 {
        stored(&self.js, STREAM).await
    }

    /// Waits until the daemon reports the sink paused: the gauge at 1 and `/readyz`
    /// still 200, naming the pause.
    async fn wait_paused(&mut self, line: &str) {
        let listen = self.listen.clone();
        let want = format!("\"paused\":[\"sink main: {line}\"]");
        self.daemon
            .eventually(Duration::from_secs(60), "the daemon sees the pause", || {
                let (listen, want) = (listen.clone(), want.clone());
                async move {
                    let gauge = metric_value(&listen, PAUSED).await;
                    let ready = http(reqwest::Method::GET, &format!("http://{listen}/readyz"))
                        .await
                        .unwrap_or_default();
                    gauge == Some(1.0) && ready.0 == 200 && ready.1.contains(&want)
                }
            })
            .await;
    }

    /// Waits until every one of `n` messages is a row and the sink is no longer paused.
    async fn wait_resumed_with(&mut self, n: u64) {
        let (listen, db) = (self.listen.clone(), self.db.clone());
        self.daemon
            .eventually(
                Duration::from_secs(90),
                "every row, and the gauge back at 0",
                || {
                    let (listen, db) = (listen.clone(), db.clone());
                    async move {
                        sqlite_count(&db, "events") == n
                            && metric_value(&listen, PAUSED).await == Some(0.0)
                    }
                },
            )
            .await;
        let (status, body) = self.readyz().await;
        assert_eq!(
            (status, body.as_str()),
            (200, r#"{"ok":true,"problems":[]}"#)
        );
    }
}

fn count(path: &Path) -> u64 {
    sqlite_count(path, "events")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_sink_writes_nothing_until_resumed_and_then_everything() {
    if skipped_without_consumer_pause() {
        return;
    }
    let mut r = running(10).await;
    assert_eq!(
        r.metric(PAUSED).await,
        Some(0.0),
        "the gauge exists from start-up"
    );

    let (code, out, err) = r.jetsink(&["pause"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        "paused sink main: consumer jetsink of stream PAUSE until resumed"
    );
    let info = r.consumer().await;
    assert!(info.paused, "the server has the consumer paused");
    // Published during the pause, most likely before the daemon has seen it (its pulls
    // then idle: the server answers them empty, which must not count as failed pulls):
    // stored in the stream, counted by the backlog gauge, and not written.
    publish_n(&r.js, SUBJECT, 25).await;
    assert_eq!(r.stream_messages().await, 35);
    r.wait_paused("paused until resumed").await;
    assert!(
        r.daemon.log_text().contains("sink paused"),
        "{}",
        r.daemon.log_text()
    );
    let listen = r.listen.clone();
    r.daemon
        .eventually(
            Duration::from_secs(60),
            "the pending gauge showing the new messages",
            || {
                let listen = listen.clone();
                async move { metric_value(&listen, PENDING).await == Some(25.0) }
            },
        )
        .await;
    assert_eq!(count(&r.db), 10, "nothing written while paused");
    let info = r.consumer().await;
    assert_eq!(
        (info.delivered.stream_sequence, info.num_pending),
        (10, 25),
        "the server delivered nothing while paused"
    );
    assert_eq!(
        r.metric("jetsink_fetch_errors_total{sink=\"main\"}").await,
        Some(0.0)
    );
    assert_eq!(r.metric(PAUSED).await, Some(1.0));

    // The pause is the server's: a daemon started again finds it (binding the consumer
    // again does not resume it), and still writes nothing.
    r.daemon.stop_cleanly();
    r.daemon = Daemon::start(&r.config, r.dir.path());
    r.wait_paused("paused until resumed").await;
    assert_eq!(count(&r.db), 10);
    assert!(r.consumer().await.paused);

    let (code, out, err) = r.jetsink(&["resume"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        "resumed sink main: consumer jetsink of stream PAUSE (it was paused until resumed)"
    );
    r.wait_resumed_with(35).await;
    assert!(r.daemon.log_text().contains("sink resumed"));
    let info = r.consumer().await;
    assert_eq!(
        (
            info.delivered.consumer_sequence,
            info.num_redelivered,
            info.paused
        ),
        (35, 0, false),
        "each message delivered once"
    );

    // Resuming a sink that is not paused says so and changes nothing.
    let (code, out, _) = r.jetsink(&["resume"]);
    assert_eq!(code, 0);
    assert!(out.contains("(it was not paused)"), "{out}");
    r.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_for_a_duration_ends_by_itself() {
    if skipped_without_consumer_pause() {
        return;
    }
    let mut r = running(5).await;
    // Long enough for the daemon's consumer info reads (every 5 s) to see it.
    let (code, out, err) = r.jetsink(&["pause", "--for", "20s"]);
    assert_eq!(code, 0, "{out}{err}");
    let until = out
        .trim()
        .strip_prefix("paused sink main: consumer jetsink of stream PAUSE until ")
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    r.wait_paused(&format!("paused until {until}")).await;
    publish_n(&r.js, SUBJECT, 15).await;

    // Nobody resumes it: the server does at the deadline, and the daemon follows.
    r.wait_resumed_with(20).await;
    let info = r.consumer().await;
    assert!(!info.paused);
    assert_eq!(info.num_redelivered, 0);
    let log = r.daemon.log_text();
    assert!(
        log.contains("sink paused") && log.contains("sink resumed"),
        "{log}"
    );
    r.daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_sink_holds_when_paused_is_still_written_and_acked() {
    if skipped_without_consumer_pause() {
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "HELD", "held.>").await;
    // Another writer holds the database: the sink holds a batch in its write (and four
    // pulled ahead, at most), and the rest waits in the stream.
    let BlockedSqliteSink {
        mut daemon,
        db,
        listen,
        blocker,
    } = blocked_sqlite_sink(
        &js,
        &server.url(),
        dir.path(),
        "HELD",
        "held.x",
        json!({}),
        200,
    )
    .await;
    let info = || async { common::consumer_info(&js, "HELD", "to-db").await };
    daemon
        .eventually(Duration::from_secs(60), "messages in hand", || async {
            info().await.num_ack_pending > 0
        })
        .await;
    let config = dir.path().join("jetsink.json");
    let config = config.to_string_lossy();
    let (code, out, err) = jetsink(&["pause", "--config", &config, "--sink", "db"], dir.path());
    assert_eq!(code, 0, "{out}{err}");
    daemon
        .eventually(
            Duration::from_secs(60),
            "the daemon sees the pause",
            || async { metric_value(&listen, "jetsink_paused{sink=\"db\"}").await == Some(1.0) },
        )
        .await;
    // Nothing is delivered from the moment the pause command returned: this is final.
    let delivered = info().await.delivered.stream_sequence;
    assert!(
        (2..=251).contains(&delivered),
        "the first row and at most five batches of 50 held (one in hand, four ahead): {delivered}"
    );

    // The destination comes back during the pause: what was in hand is committed and
    // ACKed, and nothing more is pulled.
    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    daemon
        .eventually(
            Duration::from_secs(60),
            "the held batches committed and ACKed",
            || async {
                let i = info().await;
                i.ack_floor.stream_sequence == delivered && i.num_ack_pending == 0
            },
        )
        .await;
    assert_eq!(sqlite_count(&db, "events"), delivered);
    let i = info().await;
    assert_eq!(
        (i.delivered.stream_sequence, i.num_pending),
        (delivered, 201 - delivered),
        "nothing more pulled"
    );
    assert_eq!(
        metric_value(&listen, "jetsink_paused{sink=\"db\"}").await,
        Some(1.0)
    );

    let (code, out, err) = jetsink(&["resume", "--config", &config, "--sink", "db"], dir.path());
    assert_eq!(code, 0, "{out}{err}");
    daemon
        .eventually(Duration::from_secs(60), "every row", || async {
            sqlite_count(&db, "events") == 201
        })
        .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bucket_consumer_of_a_sink_is_paused_and_resumed() {
    if skipped_without_consumer_pause() {
        return;
    }
    const BUCKETS: usize = 3;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "BPAUSE", "bp.*").await;
    let mut cfg = config(
        &server,
        "BPAUSE",
        "bp.*",
        json!({"type": "sqlite", "path": "data/b.db", "table": "events"}),
        json!({"batch_size": 50, "batch_timeout_ms": 300}),
    );
    let source = &mut cfg["sinks"]["main"]["source"];
    source.as_object_mut().unwrap().remove("subjects");
    source.as_object_mut().unwrap().remove("create_stream");
    source["buckets"] = json!({"prefix": "bp", "count": BUCKETS});
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let config = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&config, dir.path());
    daemon
        .wait_for_log(Duration::from_secs(30), "sink running")
        .await;
    let config = config.to_string_lossy();
    let (code, out, err) = jetsink(
        &["pause", "--config", &config, "--sink", "main"],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    let want: Vec<String> = (0..BUCKETS)
        .map(|i| {
            format!("paused sink main: consumer jetsink-bucket-{i} of stream BPAUSE until resumed")
        })
        .collect();
    assert_eq!(out.trim().lines().collect::<Vec<_>>(), want);
    daemon
        .eventually(
            Duration::from_secs(60),
            "the daemon sees the pause",
            || async { metric_value(&listen, PAUSED).await == Some(1.0) },
        )
        .await;
    for i in 0..BUCKETS {
        js.publish(format!("bp.{i}"), "{}".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    daemon
        .eventually(Duration::from_secs(60), "every bucket's backlog on its gauge", || async {
            let mut each = Vec::new();
            for i in 0..BUCKETS {
                let series = format!(
                    "jetsink_consumer_pending_messages{{consumer=\"jetsink-bucket-{i}\",sink=\"main\"}}"
                );
                each.push(metric_value(&listen, &series).await);
            }
            each.iter().all(|v| *v == Some(1.0))
        })
        .await;
    let db = dir.path().join("data/b.db");
    assert_eq!(
        sqlite_count(&db, "events"),
        0,
        "nothing written while paused"
    );

    let (code, out, err) = jetsink(
        &["resume", "--config", &config, "--sink", "main"],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim().lines().count(), BUCKETS, "{out}");
    daemon
        .eventually(
            Duration::from_secs(60),
            "every row, and the gauge at 0",
            || async {
                sqlite_count(&db, "events") == BUCKETS as u64
                    && metric_value(&listen, PAUSED).await == Some(0.0)
            },
        )
        .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_and_resume_are_refused_before_2_11_naming_the_version() {
    if has_consumer_pause() {
        eprintln!(
            "skipped: this server ({:?}) has consumer pause; the refusal is for 2.9 and 2.10",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, STREAM, "pause.>").await;
    let cfg = config(
        &server,
        STREAM,
        "pause.>",
        json!({"type": "sqlite", "path": "data/p.db", "table": "events"}),
        json!({}),
    );
    let config = write_config(dir.path(), &cfg);
    let config = config.to_string_lossy();
    let (major, minor, patch) = nats_server_version().unwrap();
    for command in ["pause", "resume"] {
        let (code, out, err) = jetsink(
            &[command, "--config", &config, "--sink", "main"],
            dir.path(),
        );
        assert_eq!(code, 78, "{out}{err}");
        assert_eq!(
            err.trim(),
            format!("error: sink main: jetsink {command} needs nats-server 2.11 or later (JetStream consumer pause); the server is {major}.{minor}.{patch}: upgrade it, or stop `jetsink run` instead (SIGTERM settles what it holds)")
        );
        assert!(out.is_empty());
    }
}

#[test]
fn wrong_flags_are_usage_errors_and_an_unknown_sink_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there: each of these is refused before connecting.
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:1"]},
        "sinks": {"main": {
            "source": {"stream": STREAM, "subjects": "pause.>", "consumer": "jetsink"},
            "destination": {"type": "sqlite", "path": "data/p.db"}
        }}
    });
    let config = write_config(dir.path(), &cfg);
    let config = config.to_string_lossy();
    let run = |extra: &[&str]| {
        let mut args = vec!["pause", "--config", &config];
        args.extend(extra);
        jetsink(&args, dir.path())
    };
    let (code, _, err) = run(&["--sink", "main", "--for", "10"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --for: \"10\" is not a duration such as 90s, 10m, 2h or 1h30m"),
        "{err}"
    );
    let (code, _, err) = run(&["--sink", "main", "--until", "2020-01-01T00:00:00Z"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("error: --until: 2020-01-01T00:00:00Z is not in the future"),
        "{err}"
    );
    let (code, _, err) = run(&["--sink", "main", "--until", "tomorrow"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not an RFC 3339 time"), "{err}");
    let (code, _, err) = run(&[
        "--sink",
        "main",
        "--for",
        "1m",
        "--until",
        "2099-01-01T00:00:00Z",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    let (code, _, err) = run(&["--sink", "nope"]);
    assert_eq!(code, 78, "{err}");
    assert!(
        err.contains("--sink: ") && err.contains("no sink named \"nope\" (it has main)"),
        "{err}"
    );
    let (code, _, err) = run(&["--sink", "main"]);
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("cannot connect to NATS"), "{err}");
}
