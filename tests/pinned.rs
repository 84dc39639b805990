//! Active/standby with a pinned priority group (`source.pinned`, nats-server 2.11+): two
//! daemons with the same sink share one durable consumer, each writing its own SQLite file
//! (as two hosts would). The server delivers to the pinned one only; the standby writes
//! nothing. When the active one is SIGKILLed mid-drain, the standby is pinned after the
//! priority timeout and writes the rest, and the messages the dead one held come to it
//! after AckWait. Every message is committed; the only ones committed by both are those
//! the dead one had committed and not yet ACKed, counted and bounded. The takeover time is
//! printed, not asserted. A clean SIGTERM of the active one releases the pin, so the
//! standby takes over without waiting out the priority timeout, and nothing is committed
//! twice. On older servers `source.pinned` is refused at start-up.
//!
//! "Committed twice" is measured as in tests/cluster.rs: a trigger appends the stream
//! sequence of every row each instance commits to a plain `writes` table.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const STREAM: &str = "PINNED";
const SUBJECT: &str = "pinned.x";
const BATCH: usize = 10;
const MESSAGES: usize = 3_000;
/// `source.pinned.timeout_ms` and `source.ack_wait_ms`.
const PRIORITY_TIMEOUT_MS: u64 = 5_000;
const ACK_WAIT_MS: u64 = 5_000;

fn has_priority_groups() -> bool {
    nats_server_version().is_some_and(|v| v >= (2, 11, 0))
}

/// The `events` table as jetsink creates it, plus the audit of every commit.
const AUDITED_SCHEMA: &str = "
CREATE TABLE events (
    idempotency_key TEXT PRIMARY KEY NOT NULL,
    stream TEXT NOT NULL,
    stream_sequence INTEGER NOT NULL,
    consumer_sequence INTEGER NOT NULL,
    subject TEXT NOT NULL,
    delivered INTEGER NOT NULL,
    published_at TEXT NOT NULL,
    written_at TEXT NOT NULL,
    message_id TEXT,
    headers TEXT NOT NULL,
    priority TEXT,
    lane TEXT,
    classification TEXT,
    labels TEXT NOT NULL DEFAULT '[]',
    payload BLOB NOT NULL
);
CREATE TABLE writes (seq INTEGER NOT NULL);
CREATE TRIGGER audit_every_write BEFORE INSERT ON events
BEGIN
    INSERT INTO writes (seq) VALUES (NEW.stream_sequence);
END;
";

/// One instance: its own directory, SQLite file, HTTP port and config (the same sink).
struct Instance {
    dir: tempfile::TempDir,
    listen: String,
    config: PathBuf,
}

impl Instance {
    fn new(server: &NatsServer) -> Instance {
        Instance::with_priority_timeout(server, PRIORITY_TIMEOUT_MS)
    }

    fn with_priority_timeout(server: &NatsServer, timeout_ms: u64) -> Instance {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
        let conn = rusqlite::Connection::open(dir.path().join("data/pinned.db")).expect("db");
        conn.execute_batch(AUDITED_SCHEMA).expect("schema");
        let listen = format!("127.0.0.1:{}", free_port());
        let cfg = json!({
            "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
            "http": {"listen": listen},
            "sinks": {"main": {
                "source": {
                    "stream": STREAM,
                    "subjects": SUBJECT,
                    "consumer": "jetsink",
                    "ack_wait_ms": ACK_WAIT_MS,
                    "pinned": {"group": "pair", "timeout_ms": timeout_ms}
                },
                "delivery": {"batch_size": BATCH, "batch_timeout_ms": 500},
                "destination": {"type": "sqlite", "path": "data/pinned.db", "table": "events"}
            }}
        });
        let config = write_config(dir.path(), &cfg);
        Instance {
            dir,
            listen,
            config,
        }
    }

    fn start(&self) -> Daemon {
        Daemon::start(&self.config, self.dir.path())
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("data/pinned.db")
    }

    fn rows(&self) -> u64 {
        sqlite_count(&self.db(), "events")
    }

    async fn pinned(&self) -> Option<f64> {
        metric_value(&self.listen, "jetsink_pinned{sink=\"main\"}").await
    }
}

/// (every stream sequence committed, commits in all) of one instance's audit.
fn audit(db: &Path) -> (BTreeSet<u64>, u64) {
    let conn = rusqlite::Connection::open(db).expect("db");
    conn.busy_timeout(Duration::from_secs(5))
        .expect("busy timeout");
    let mut stmt = conn.prepare("SELECT seq FROM writes").expect("select");
    let seqs: Vec<u64> = stmt
        .query_map([], |r| r.get::<_, i64>(0))
        .expect("query")
        .map(|r| r.expect("row") as u64)
        .collect();
    let commits = seqs.len() as u64;
    (seqs.into_iter().collect(), commits)
}

async fn ready(listen: &str) -> u16 {
    let url = format!("http://{listen}/readyz");
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .into();
        agent
            .get(&url)
            .call()
            .map(|r| r.status().as_u16())
            .unwrap_or(0)
    })
    .await
    .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_standby_takes_over_after_the_active_instance_is_killed_and_every_message_is_committed()
{
    if !has_priority_groups() {
        eprintln!(
            "skipped: pinned priority groups need nats-server 2.11+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let js = server.js().await;
    create_stream(&js, STREAM, "pinned.>").await;
    let (a, b) = (Instance::new(&server), Instance::new(&server));

    // A starts alone and is pinned by the first delivery.
    let mut daemon_a = a.start();
    let publisher = publish_paced(&js, SUBJECT, MESSAGES, 400);
    eventually(
        Duration::from_secs(30),
        "A holds the pin and writes",
        || async { a.pinned().await == Some(1.0) && a.rows() > 0 },
    )
    .await;

    // B starts with the same sink and stands by: ready, not pinned, writing nothing.
    let mut daemon_b = b.start();
    eventually(Duration::from_secs(30), "B is up and ready", || async {
        b.pinned().await == Some(0.0) && ready(&b.listen).await == 200
    })
    .await;
    let a_before = a.rows();
    eventually(
        Duration::from_secs(30),
        "A writes more while B stands by",
        || async { a.rows() >= a_before + 200 },
    )
    .await;
    assert_eq!(b.rows(), 0, "the standby wrote:\n{}", daemon_b.log_text());
    assert_eq!(b.pinned().await, Some(0.0));

    // SIGKILL A mid-drain; B must take over.
    let rows_at_kill = a.rows();
    assert!(
        rows_at_kill < MESSAGES as u64,
        "the kill must land mid-drain ({rows_at_kill} of {MESSAGES} written)"
    );
    daemon_a.kill();
    let killed = Instant::now();
    eventually(
        Duration::from_secs(60),
        "B is pinned after A died",
        || async { b.pinned().await == Some(1.0) },
    )
    .await;
    let pinned_after = killed.elapsed();
    eventually(Duration::from_secs(60), "B writes after A died", || async {
        b.rows() > 0
    })
    .await;
    let writing_after = killed.elapsed();
    publisher.await.expect("publisher");

    eventually(
        Duration::from_secs(90),
        "every message committed and acknowledged",
        || async {
            consumer_state(&js, STREAM, "jetsink").await == (0, 0) && {
                let (sa, _) = audit(&a.db());
                let (sb, _) = audit(&b.db());
                sa.union(&sb).count() == MESSAGES
            }
        },
    )
    .await;
    let all_redelivered_after = killed.elapsed();
    daemon_b.stop_cleanly();

    let (sa, commits_a) = audit(&a.db());
    let (sb, commits_b) = audit(&b.db());
    let union: BTreeSet<u64> = sa.union(&sb).copied().collect();
    let expected: BTreeSet<u64> = (1..=MESSAGES as u64).collect();
    assert_eq!(
        union, expected,
        "every message committed by one of the pair"
    );
    let both = sa.intersection(&sb).count() as u64;
    let rewrites = (commits_a - sa.len() as u64) + (commits_b - sb.len() as u64);
    println!(
        "active/standby takeover (priority timeout {PRIORITY_TIMEOUT_MS} ms, AckWait {ACK_WAIT_MS} ms, batch {BATCH}): \
         standby pinned {:.2} s after SIGKILL, first row written by it {:.2} s after, \
         every message committed {:.2} s after; A committed {} messages ({rows_at_kill} at the kill), B {}; \
         committed by both: {both}; committed twice by one instance: {rewrites}",
        pinned_after.as_secs_f64(),
        writing_after.as_secs_f64(),
        all_redelivered_after.as_secs_f64(),
        sa.len(),
        sb.len()
    );
    // Only what A had committed but not ACKed when it died comes to B again: the batch
    // just committed plus the two batches whose ACKs may still be in flight.
    assert!(
        both <= 3 * BATCH as u64,
        "{both} messages committed by both instances (at most 3 batches of {BATCH} expected)"
    );
    assert_eq!(rewrites, 0, "no instance committed a message twice");
    assert!(
        !daemon_b.log_text().contains("pull failed"),
        "the standby's pulls did not fail:\n{}",
        daemon_b.log_text()
    );
}

/// Far longer than the test waits for the standby: only the UNPIN at shutdown can move
/// the pin in time.
const LONG_PRIORITY_TIMEOUT_MS: u64 = 600_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_sigterm_of_the_active_instance_releases_the_pin_and_nothing_is_committed_twice() {
    if !has_priority_groups() {
        eprintln!(
            "skipped: pinned priority groups need nats-server 2.11+, this one is {:?}",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let js = server.js().await;
    create_stream(&js, STREAM, "pinned.>").await;
    let a = Instance::with_priority_timeout(&server, LONG_PRIORITY_TIMEOUT_MS);
    let b = Instance::with_priority_timeout(&server, LONG_PRIORITY_TIMEOUT_MS);

    let mut daemon_a = a.start();
    let publisher = publish_paced(&js, SUBJECT, MESSAGES, 400);
    eventually(
        Duration::from_secs(30),
        "A holds the pin and writes",
        || async { a.pinned().await == Some(1.0) && a.rows() > 0 },
    )
    .await;
    let mut daemon_b = b.start();
    eventually(Duration::from_secs(30), "B is up and stands by", || async {
        b.pinned().await == Some(0.0) && ready(&b.listen).await == 200
    })
    .await;
    let rows_at_stop = a.rows();
    assert!(
        rows_at_stop < MESSAGES as u64,
        "the SIGTERM must land mid-drain ({rows_at_stop} of {MESSAGES} written)"
    );
    daemon_a.stop_cleanly();
    assert!(
        daemon_a.log_text().contains("released the pin at shutdown"),
        "A released its pin:\n{}",
        daemon_a.log_text()
    );
    // The priority timeout is ten minutes: B can only be pinned this soon because A
    // released the pin.
    eventually(
        Duration::from_secs(60),
        "B is pinned after A released the pin",
        || async { b.pinned().await == Some(1.0) },
    )
    .await;
    publisher.await.expect("publisher");
    eventually(
        Duration::from_secs(90),
        "every message committed and acknowledged",
        || async {
            consumer_state(&js, STREAM, "jetsink").await == (0, 0) && {
                let (sa, _) = audit(&a.db());
                let (sb, _) = audit(&b.db());
                sa.union(&sb).count() == MESSAGES
            }
        },
    )
    .await;
    daemon_b.stop_cleanly();
    let (sa, commits_a) = audit(&a.db());
    let (sb, commits_b) = audit(&b.db());
    println!(
        "clean handover: A committed {} messages ({rows_at_stop} at SIGTERM), B {}",
        sa.len(),
        sb.len()
    );
    assert!(!sb.is_empty(), "B wrote the rest");
    assert_eq!(
        sa.intersection(&sb).count(),
        0,
        "a clean stop ACKs everything it committed, so nothing comes to B again"
    );
    assert_eq!(
        (commits_a, commits_b),
        (sa.len() as u64, sb.len() as u64),
        "no instance committed a message twice"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pinned_is_refused_at_start_up_on_servers_before_2_11_naming_the_version_and_path() {
    if has_priority_groups() {
        eprintln!(
            "skipped: this server ({:?}) has priority groups; the refusal is for 2.9 and 2.10",
            nats_server_version()
        );
        return;
    }
    let server = NatsServer::start();
    let js = server.js().await;
    create_stream(&js, STREAM, "pinned.>").await;
    let a = Instance::new(&server);
    let mut daemon = a.start();
    let status = daemon.wait_exit(Duration::from_secs(30));
    let log = daemon.log_text();
    assert_eq!(status.and_then(|s| s.code()), Some(78), "{log}");
    let (major, minor, patch) = nats_server_version().expect("version");
    assert!(
        log.contains("sinks.main.source.pinned")
            && log.contains(&format!("nats-server {major}.{minor}.{patch}"))
            && log.contains("2.11 or later"),
        "{log}"
    );
    let stream = js.get_stream(STREAM).await.expect("stream");
    assert!(
        stream.consumer_info("jetsink").await.is_err(),
        "no consumer was created"
    );
}
