//! Failover in a 3-node JetStream cluster: an R3 source stream keeps draining into SQLite
//! while the stream leader, then the consumer leader, is SIGKILLed, and while all three
//! nodes are restarted one after the other. Nothing may be lost and nothing written twice,
//! and the same daemon process carries on without a restart.
//!
//! "Written twice" is measured, not made impossible: the `events` table keeps its unique
//! `idempotency_key` (jetsink requires one), but a `BEFORE INSERT` trigger appends the stream
//! sequence of every row jetsink commits to a plain `writes` table, including rows the
//! unique key would have absorbed. So `count(*)` of `writes` counts commits, and
//! `count(distinct seq)` counts messages.

use crate::common;

use std::path::Path;
use std::time::Duration;

use async_nats::jetstream;
use common::cluster::{consumer_cluster, stream_cluster, wait_node_current, Cluster};
use common::*;
use serde_json::json;

/// Messages per phase; each phase ends with one failure injected mid-drain.
const PHASE: usize = 2_000;
const STREAM: &str = "FAILOVER";
const CONSUMER: &str = "jetsink";
/// `delivery.batch_size`: small, so what is in flight at a failure, and may be committed
/// again, is small.
const BATCH: usize = 10;

fn audited_db(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("data/failover.db");
    audit::create_audited_table(&path, "events", "");
    path
}

/// What the audit saw: every commit jetsink made, and how they relate to messages.
#[derive(Debug, PartialEq, Eq)]
struct Audit {
    /// Rows in `events`: one per message, whatever the commits.
    rows: i64,
    /// Distinct stream sequences committed: the messages that landed.
    messages: i64,
    /// Commits of any row, including ones the unique key absorbed.
    commits: i64,
    /// Distinct (stream sequence, delivery count) pairs committed: a delivery committed
    /// twice would make this smaller than `commits`.
    deliveries: i64,
    /// Commits of a message already committed by an earlier delivery.
    rewrites: i64,
}

fn audit(db: &Path) -> Audit {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.query_row(
        "SELECT (SELECT count(*) FROM events), (SELECT count(DISTINCT seq) FROM writes), \
         (SELECT count(*) FROM writes), \
         (SELECT count(*) FROM (SELECT DISTINCT seq, delivered FROM writes)), \
         (SELECT count(*) - count(DISTINCT seq) FROM writes)",
        [],
        |r| {
            Ok(Audit {
                rows: r.get(0)?,
                messages: r.get(1)?,
                commits: r.get(2)?,
                deliveries: r.get(3)?,
                rewrites: r.get(4)?,
            })
        },
    )
    .unwrap()
}

async fn setup() -> (
    Cluster,
    jetstream::Context,
    tempfile::TempDir,
    std::path::PathBuf,
    Daemon,
) {
    let cluster = Cluster::start().await;
    let js = cluster.js().await;
    cluster
        .create_r3_stream(
            &js,
            jetstream::stream::Config {
                name: STREAM.to_string(),
                subjects: vec!["failover.>".to_string()],
                num_replicas: 3,
                ..Default::default()
            },
        )
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = audited_db(dir.path());
    let cfg = json!({
        "nats": {"servers": cluster.urls(), "connect_timeout_ms": 5000},
        "http": {"enabled": false},
        "sinks": {"main": {
            "source": {"stream": STREAM, "consumer": CONSUMER, "ack_wait_ms": 5000},
            "delivery": {"batch_size": BATCH, "batch_timeout_ms": 200},
            "destination": {"type": "sqlite", "path": "data/failover.db", "table": "events"}
        }}
    });
    let daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    (cluster, js, dir, db, daemon)
}

/// The destination held mid-drain: the test's own connection has SQLite's write lock, so
/// no row can be committed until [`Held::release`].
struct Held {
    lock: rusqlite::Connection,
}

impl Held {
    fn release(self) {
        self.lock
            .execute_batch("ROLLBACK")
            .expect("release the write lock");
    }
}

/// Publishes one phase and holds the drain in its middle, by construction rather than by
/// timing: half the phase is published and written in part, then the test takes SQLite's
/// write lock and publishes the other half behind it, and waits until the consumer shows a
/// message delivered that is not a row. From then on rows cannot reach the total and
/// jetsink holds delivered, unacknowledged messages, until the lock is released: the
/// moment to inject a failure. Returns the total published so far and the lock.
async fn publish_phase_and_hold_mid_drain(
    js: &jetstream::Context,
    db: &Path,
    done_before: usize,
    daemon: &Daemon,
    cluster: &Cluster,
) -> (usize, Held) {
    publish_n(js, "failover.x", PHASE / 2).await;
    let total = done_before + PHASE;
    let target = (done_before + PHASE / 10) as u64;
    let context = || format!("{}\n{}", daemon.log_text(), cluster.logs());
    eventually(
        Duration::from_secs(60),
        "some rows of the phase",
        || async { sqlite_count(db, "events") >= target },
    )
    .await;
    let lock = rusqlite::Connection::open(db).expect("open the database to lock it");
    lock.busy_timeout(Duration::from_secs(60))
        .expect("a busy timeout");
    lock.execute_batch("BEGIN IMMEDIATE")
        .unwrap_or_else(|e| panic!("take the write lock: {e}\n{}", context()));
    let rows: u64 = lock
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .expect("count the rows under the lock");
    publish_n(js, "failover.x", PHASE - PHASE / 2).await;
    // Rows are the distinct sequences committed, so a delivered sequence above their
    // number is a message delivered and not committed, and it cannot be now.
    eventually(
        Duration::from_secs(60),
        "a message delivered and not written",
        || async {
            let Ok(s) = js.get_stream(STREAM).await else {
                return false;
            };
            s.consumer_info(CONSUMER)
                .await
                .is_ok_and(|i| i.delivered.stream_sequence > rows && i.num_ack_pending > 0)
        },
    )
    .await;
    (total, Held { lock })
}

/// Asserts the failure landed mid-drain and the daemon is still the same process.
fn assert_mid_drain(db: &Path, total: usize, what: &str, daemon: &mut Daemon) {
    let rows = sqlite_count(db, "events");
    assert!(
        rows < total as u64,
        "{what} must happen mid-drain ({rows} of {total} rows were already written)"
    );
    assert!(
        daemon.wait_exit(Duration::ZERO).is_none(),
        "jetsink exited:\n{}",
        daemon.log_text()
    );
}

/// Waits until every published message is a row and the consumer has nothing pending,
/// then checks the audit and that the daemon never restarted.
async fn assert_all_once(
    js: &jetstream::Context,
    db: &Path,
    total: usize,
    daemon: &mut Daemon,
    cluster: &Cluster,
    failures: usize,
) {
    eventually(Duration::from_secs(60), "every row", || async {
        sqlite_count(db, "events") == total as u64
    })
    .await;
    // Messages whose ACK died with a node come back after AckWait (5 s) and are ACKed
    // then; under load an election can lose a second round of them.
    let last = std::sync::Mutex::new(None);
    let floor_reached = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            if let Ok(s) = js.get_stream(STREAM).await {
                if let Ok(i) = s.consumer_info(CONSUMER).await {
                    let done = i.ack_floor.stream_sequence == total as u64
                        && i.num_pending == 0
                        && i.num_ack_pending == 0;
                    *last.lock().unwrap() = Some(i.clone());
                    if done {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        floor_reached.is_ok(),
        "the consumer's ACK floor did not reach {total}; last consumer info: {:?}\naudit: {:?}\n{}\n{}",
        last.lock().unwrap(),
        audit(db),
        daemon.log_text(),
        cluster.logs()
    );
    assert!(
        daemon.wait_exit(Duration::ZERO).is_none(),
        "jetsink exited:\n{}",
        daemon.log_text()
    );
    let audit = audit(db);
    eprintln!(
        "failover audit after {failures} failures: {audit:?}; ACK re-confirmation rounds: {}",
        daemon.log_text().matches("confirmed again").count()
    );
    let context = || format!("{audit:?}\n{}\n{}", daemon.log_text(), cluster.logs());
    let total = total as i64;
    assert_eq!(
        (audit.rows, audit.messages),
        (total, total),
        "every message landed exactly once in the table: {}",
        context()
    );
    // A message is committed again only when the server delivers it again because its ACK
    // died with the node it was sent to (ACKs are fire-and-forget publishes, see
    // docs/reliability.md). A new consumer leader that had not yet received the replicated
    // delivery state may even repeat the delivery count, so `deliveries` is reported, not
    // asserted. Re-commits are bounded by what can be in flight at a failure: the batch
    // just committed, the two background ACK tasks and the four batches pulled ahead, of
    // `BATCH` messages each.
    assert!(
        audit.rewrites <= (failures * 7 * BATCH) as i64,
        "re-commits beyond the ACKs in flight at {failures} failures: {}",
        context()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stream_leader_then_consumer_leader_killed_mid_drain_loses_and_duplicates_nothing() {
    let (mut cluster, js, _dir, db, mut daemon) = setup().await;

    let (total, held) = publish_phase_and_hold_mid_drain(&js, &db, 0, &daemon, &cluster).await;
    let leader = stream_cluster(&js, STREAM)
        .await
        .and_then(|c| c.leader)
        .expect("stream leader");
    cluster.kill(&leader);
    assert_mid_drain(&db, total, "killing the stream leader", &mut daemon);
    held.release();
    // The same process finishes the phase with the old leader down.
    eventually(Duration::from_secs(60), "phase 1 written", || async {
        sqlite_count(&db, "events") == total as u64
    })
    .await;
    cluster.start_node(&leader).await;
    wait_node_current(&js, STREAM, CONSUMER, &leader).await;

    let (total, held) = publish_phase_and_hold_mid_drain(&js, &db, total, &daemon, &cluster).await;
    let leader = consumer_cluster(&js, STREAM, CONSUMER)
        .await
        .and_then(|c| c.leader)
        .expect("consumer leader");
    cluster.kill(&leader);
    assert_mid_drain(&db, total, "killing the consumer leader", &mut daemon);
    held.release();
    assert_all_once(&js, &db, total, &mut daemon, &cluster, 2).await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_restart_of_all_three_nodes_mid_drain_loses_and_duplicates_nothing() {
    let (mut cluster, js, _dir, db, mut daemon) = setup().await;
    let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let mut total = 0;
    for name in &names {
        let held;
        (total, held) = publish_phase_and_hold_mid_drain(&js, &db, total, &daemon, &cluster).await;
        cluster.stop(name);
        assert_mid_drain(&db, total, &format!("stopping {name}"), &mut daemon);
        held.release();
        cluster.start_node(name).await;
        // The next node goes down only when this one has caught up, as an operator's
        // rolling restart waits for it.
        wait_node_current(&js, STREAM, CONSUMER, name).await;
    }
    assert_all_once(&js, &db, total, &mut daemon, &cluster, names.len()).await;
    daemon.stop_cleanly();
}
