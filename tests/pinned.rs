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

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const STREAM: &str = "PINNED";
const SUBJECT: &str = "pinned.x";
const BATCH: usize = 10;
/// Messages the publisher sends after it is told to stop: what is still to come when a
/// failure is injected, so the failure lands mid-drain by construction.
const AFTER_STOP: usize = 1_000;
/// `source.pinned.timeout_ms` and `source.ack_wait_ms`.
const PRIORITY_TIMEOUT_MS: u64 = 5_000;
const ACK_WAIT_MS: u64 = 5_000;

fn has_priority_groups() -> bool {
    nats_server_version().is_some_and(|v| v >= (2, 11, 0))
}

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
        audit::create_audited_table(&dir.path().join("data/pinned.db"), "events", "");
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
    let seqs = audit::committed_sequences(db);
    let commits = seqs.len() as u64;
    (seqs.into_iter().collect(), commits)
}

async fn ready(listen: &str) -> u16 {
    http(reqwest::Method::GET, &format!("http://{listen}/readyz"))
        .await
        .map_or(0, |(status, _)| status)
}

/// Whether this server lacks priority groups; says so, for a test that then skips.
fn skipped_without_priority_groups() -> bool {
    if has_priority_groups() {
        return false;
    }
    eprintln!(
        "skipped: pinned priority groups need nats-server 2.11+, this one is {:?}",
        nats_server_version()
    );
    true
}

/// Two instances mid-drain: A pinned and writing, B up, ready and standing by, the
/// publisher sending at 400/s until [`Pair::mid_drain`] tells it to send [`AFTER_STOP`]
/// more and stop.
struct Pair {
    _server: NatsServer,
    js: async_nats::jetstream::Context,
    a: Instance,
    b: Instance,
    daemon_a: Daemon,
    daemon_b: Daemon,
    publisher: Publisher,
}

impl Pair {
    /// A starts alone and is pinned by the first delivery; then B starts with the same
    /// sink and stands by.
    async fn start(priority_timeout_ms: u64) -> Pair {
        let server = NatsServer::start();
        let js = server.js().await;
        create_stream(&js, STREAM, "pinned.>").await;
        let a = Instance::with_priority_timeout(&server, priority_timeout_ms);
        let b = Instance::with_priority_timeout(&server, priority_timeout_ms);
        let daemon_a = a.start();
        let publisher = Publisher::start(&js, 400);
        eventually(
            Duration::from_secs(30),
            "A holds the pin and writes",
            || async { a.pinned().await == Some(1.0) && a.rows() > 0 },
        )
        .await;
        let daemon_b = b.start();
        eventually(Duration::from_secs(30), "B is up and stands by", || async {
            b.pinned().await == Some(0.0) && ready(&b.listen).await == 200
        })
        .await;
        Pair {
            _server: server,
            js,
            a,
            b,
            daemon_a,
            daemon_b,
            publisher,
        }
    }

    /// Tells the publisher to send [`AFTER_STOP`] more and stop, so what follows lands
    /// mid-drain; returns the rows A has written.
    fn mid_drain(&self, what: &str) -> u64 {
        let total = self.publisher.stop_after(AFTER_STOP);
        let rows = self.a.rows();
        println!("the {what} lands with {rows} rows written of {total}");
        rows
    }

    /// Waits until B holds the pin.
    async fn b_pinned(&self, after: &str) {
        eventually(
            Duration::from_secs(60),
            &format!("B is pinned after {after}"),
            || async { self.b.pinned().await == Some(1.0) },
        )
        .await;
    }

    /// Waits for the publisher, then until every message is committed by one of the pair
    /// and the consumer has nothing pending; stops B. Returns each instance's audit.
    async fn drained(&mut self) -> ((BTreeSet<u64>, u64), (BTreeSet<u64>, u64)) {
        let messages = self.publisher.finished().await;
        let (js, a, b) = (&self.js, &self.a, &self.b);
        eventually(
            Duration::from_secs(90),
            "every message committed and acknowledged",
            || async {
                consumer_state(js, STREAM, "jetsink").await == (0, 0) && {
                    let (sa, _) = audit(&a.db());
                    let (sb, _) = audit(&b.db());
                    sa.union(&sb).count() == messages
                }
            },
        )
        .await;
        self.daemon_b.stop_cleanly();
        let (sa, sb) = (audit(&self.a.db()), audit(&self.b.db()));
        let union: BTreeSet<u64> = sa.0.union(&sb.0).copied().collect();
        let expected: BTreeSet<u64> = (1..=messages as u64).collect();
        assert_eq!(
            union, expected,
            "every message committed by one of the pair"
        );
        (sa, sb)
    }
}

/// Publishes `pinned.x` at a steady rate until told how many more to send: the total is
/// then fixed, and nothing a test does before that can drain it.
struct Publisher {
    stop_at: Arc<AtomicUsize>,
    published: Arc<AtomicUsize>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Publisher {
    fn start(js: &async_nats::jetstream::Context, per_sec: u64) -> Publisher {
        let stop_at = Arc::new(AtomicUsize::new(usize::MAX));
        let published = Arc::new(AtomicUsize::new(0));
        let (js, stop, done) = (js.clone(), stop_at.clone(), published.clone());
        let task = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut i = 0usize;
            while i < stop.load(Ordering::SeqCst) {
                let due = started + Duration::from_secs_f64(i as f64 / per_sec as f64);
                tokio::time::sleep_until(due).await;
                js.publish(SUBJECT, format!("{{\"i\":{i}}}").into())
                    .await
                    .expect("publish")
                    .await
                    .expect("puback");
                i += 1;
                done.store(i, Ordering::SeqCst);
            }
        });
        Publisher {
            stop_at,
            published,
            task: Some(task),
        }
    }

    /// Fixes the total at `more` beyond what is published now; returns it. The message
    /// being published meanwhile is below it, so the total is exact.
    fn stop_after(&self, more: usize) -> usize {
        let total = self.published.load(Ordering::SeqCst) + more;
        self.stop_at.store(total, Ordering::SeqCst);
        total
    }

    /// Waits until the publisher is done; returns how many it published.
    async fn finished(&mut self) -> usize {
        if let Some(task) = self.task.take() {
            task.await.expect("publisher");
        }
        self.published.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_standby_takes_over_after_the_active_instance_is_killed_and_every_message_is_committed()
{
    if skipped_without_priority_groups() {
        return;
    }
    let mut pair = Pair::start(PRIORITY_TIMEOUT_MS).await;
    let (a, b) = (&pair.a, &pair.b);
    let a_before = a.rows();
    eventually(
        Duration::from_secs(30),
        "A writes more while B stands by",
        || async { a.rows() >= a_before + 200 },
    )
    .await;
    assert_eq!(
        b.rows(),
        0,
        "the standby wrote:\n{}",
        pair.daemon_b.log_text()
    );
    assert_eq!(b.pinned().await, Some(0.0));

    // SIGKILL A mid-drain; B must take over.
    let rows_at_kill = pair.mid_drain("kill");
    pair.daemon_a.kill();
    let killed = Instant::now();
    pair.b_pinned("A died").await;
    let pinned_after = killed.elapsed();
    let b = &pair.b;
    eventually(Duration::from_secs(60), "B writes after A died", || async {
        b.rows() > 0
    })
    .await;
    let writing_after = killed.elapsed();
    let ((sa, commits_a), (sb, commits_b)) = pair.drained().await;
    let all_redelivered_after = killed.elapsed();

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
        !pair.daemon_b.log_text().contains("pull failed"),
        "the standby's pulls did not fail:\n{}",
        pair.daemon_b.log_text()
    );
}

/// Far longer than the test waits for the standby: only the UNPIN at shutdown can move
/// the pin in time.
const LONG_PRIORITY_TIMEOUT_MS: u64 = 600_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_sigterm_of_the_active_instance_releases_the_pin_and_nothing_is_committed_twice() {
    if skipped_without_priority_groups() {
        return;
    }
    let mut pair = Pair::start(LONG_PRIORITY_TIMEOUT_MS).await;
    let rows_at_stop = pair.mid_drain("SIGTERM");
    pair.daemon_a.stop_cleanly();
    assert!(
        pair.daemon_a
            .log_text()
            .contains("released the pin at shutdown"),
        "A released its pin:\n{}",
        pair.daemon_a.log_text()
    );
    // The priority timeout is ten minutes: B can only be pinned this soon because A
    // released the pin.
    pair.b_pinned("A released the pin").await;
    let ((sa, commits_a), (sb, commits_b)) = pair.drained().await;
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
