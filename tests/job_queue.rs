//! Job-queue mode against real servers: a work-queue jobs stream, competing `jetsink run`
//! instances, results stored by a results stream before each job is ACKed, and
//! `jetsink submit` waiting for them.
//!
//! Commits are audited like tests/cluster.rs does: the `jobs` table keeps its unique
//! `idempotency_key`, and a `BEFORE INSERT` trigger appends every commit's stream sequence
//! to `writes`, including commits the key absorbed, so duplicates are counted, not hidden.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use serde_json::json;

const TABLE: &str = "jobs";

/// The sink's table, with a trigger counting every commit and one refusing `POISON`.
fn audited_db(dir: &Path) -> PathBuf {
    let path = dir.join("data/jobs.db");
    audit::create_audited_table(
        &path,
        TABLE,
        &format!(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON {TABLE}
               WHEN instr(CAST(NEW.payload AS TEXT), 'POISON') > 0
               BEGIN SELECT RAISE(ABORT, 'poison job refused'); END;"
        ),
    );
    path
}

/// (jobs committed, commits of a job already committed).
fn audit(db: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.query_row(
        "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) - count(DISTINCT seq) FROM writes)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap_or((0, 0))
}

/// One worker sink `worker` on the work-queue stream JOBS (`jobs.run`), results to
/// `jobs.results.<id>` in RESULTS, dead letters to JOBS_DLQ.
fn worker_config(url: &str, ack_wait_ms: u64, max_deliver: i64, batch: usize) -> serde_json::Value {
    json!({
        "nats": {"servers": [url], "connect_timeout_ms": 2000},
        "http": {"listen": format!("127.0.0.1:{}", free_port())},
        "logging": {"level": "info"},
        "sinks": {"worker": {
            "source": {
                "stream": "JOBS",
                "subjects": "jobs.run",
                "consumer": "workers",
                "ack_wait_ms": ack_wait_ms,
                "max_deliver": max_deliver,
                "create_stream": {"subjects": ["jobs.run"], "retention": "workqueue"}
            },
            "delivery": {"batch_size": batch, "batch_timeout_ms": 200,
                         "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 500}},
            "destination": {"type": "sqlite", "path": "data/jobs.db", "table": TABLE},
            "results": {"subject_prefix": "jobs.results",
                        "create_stream": {"name": "RESULTS"}},
            "dead_letter": {"subject": "jobs.dlq", "create_stream": {"name": "JOBS_DLQ"}}
        }}
    })
}

/// Writes `cfg` as `name` in `dir`.
fn write_named(dir: &Path, name: &str, cfg: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
    path
}

/// Publishes jobs `job-<from>` .. `job-<to-1>` with their id as `Nats-Msg-Id`.
async fn publish_jobs(js: &jetstream::Context, range: std::ops::Range<usize>) {
    let mut acks = Vec::with_capacity(512);
    for i in range {
        let mut h = async_nats::HeaderMap::new();
        h.insert("Nats-Msg-Id", format!("job-{i}").as_str());
        let ack = js
            .publish_with_headers("jobs.run", h, format!("{{\"job\":{i}}}").into())
            .await
            .expect("publish");
        acks.push(ack);
        if acks.len() == 512 {
            for a in acks.drain(..) {
                a.await.expect("puback");
            }
        }
    }
    for a in acks {
        a.await.expect("puback");
    }
}

fn submit(dir: &Path, cfg: &Path, extra: &[&str]) -> (i32, String, String) {
    let cfg = cfg.to_string_lossy().into_owned();
    let mut args = vec!["submit", "--config", &cfg, "--sink", "worker"];
    args.extend_from_slice(extra);
    jetsink(&args, dir)
}

/// 20,000 jobs (the backlog drains in seconds here) shared by three instances on one
/// durable consumer; one is SIGKILLed while it holds jobs it cannot have committed: once it
/// has committed some, the test takes the database's write lock, publishes the second half
/// behind it and waits until the victim holds messages, so the kill lands mid-drain by
/// construction, not by timing.
const JOBS: usize = 20_000;
const BATCH: usize = 100;

#[tokio::test(flavor = "multi_thread")]
async fn three_competing_workers_drain_a_work_queue_and_a_killed_one_loses_no_job() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let db = audited_db(dir.path());
    let mut daemons = Vec::new();
    let mut listens = Vec::new();
    for i in 0..3 {
        // AckWait 10 s: long beside the keep-alives of a busy machine, so only the killed
        // worker's jobs come back.
        let cfg = worker_config(&server.url(), 10_000, -1, BATCH);
        listens.push(cfg["http"]["listen"].as_str().unwrap().to_string());
        let path = write_named(dir.path(), &format!("w{i}.json"), &cfg);
        daemons.push(Daemon::start(&path, dir.path()));
    }
    eventually(
        Duration::from_secs(20),
        "the jobs stream exists",
        || async { js.get_stream("JOBS").await.is_ok() && js.get_stream("RESULTS").await.is_ok() },
    )
    .await;
    publish_jobs(&js, 0..JOBS / 2).await;
    let victim = &listens[0];
    let victim_metric =
        |name: &'static str| async move { metric_value(victim, name).await.unwrap_or(0.0) };
    eventually(
        Duration::from_secs(60),
        "the first worker commits jobs",
        || async {
            victim_metric("jetsink_jobs_finished_total{sink=\"worker\",status=\"committed\"}").await
                >= 1.0
        },
    )
    .await;
    let lock = rusqlite::Connection::open(&db).expect("open the database to lock it");
    lock.busy_timeout(Duration::from_secs(60)).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    publish_jobs(&js, JOBS / 2..JOBS).await;
    eventually(
        Duration::from_secs(60),
        "the first worker holds jobs it cannot commit",
        || async { victim_metric("jetsink_inflight_messages{sink=\"worker\"}").await > 0.0 },
    )
    .await;
    daemons[0].kill();
    lock.execute_batch("ROLLBACK")
        .expect("release the write lock");
    eventually(
        Duration::from_secs(90),
        "every job committed and its result stored",
        || async { audit(&db).0 as usize == JOBS && stored(&js, "RESULTS").await as usize == JOBS },
    )
    .await;
    eventually(
        Duration::from_secs(30),
        "the work-queue stream is empty",
        || async { stored(&js, "JOBS").await == 0 },
    )
    .await;
    let (jobs, rewrites) = audit(&db);
    eprintln!("jobs committed {jobs}, committed twice (in flight at the kill): {rewrites}");
    assert_eq!(jobs as usize, JOBS);
    // In flight at the kill: the batch being written, one pulled ahead, and up to two
    // committed batches whose ACKs were still being sent.
    assert!(
        rewrites as usize <= 4 * BATCH,
        "{rewrites} jobs committed twice; only the killed worker's in-flight jobs may be"
    );
    for d in daemons.iter_mut().skip(1) {
        d.stop_cleanly();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_job_gets_a_dead_letter_copy_and_a_dead_lettered_result_and_submit_exits_65() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    audited_db(dir.path());
    let path = write_named(
        dir.path(),
        "w.json",
        &worker_config(&server.url(), 2000, 2, 10),
    );
    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "the streams exist", || async {
        js.get_stream("JOBS_DLQ").await.is_ok()
    })
    .await;
    let (code, out, err) = submit(
        dir.path(),
        &path,
        &[
            "--data",
            "{\"POISON\":1}",
            "--id",
            "poison-1",
            "--timeout-ms",
            "30000",
        ],
    );
    assert_eq!(code, 65, "{out}\n{err}\n{}", d.log_text());
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["status"], "dead_lettered");
    assert_eq!(v["id"], "poison-1");
    assert!(
        v["error"].as_str().unwrap().contains("poison job refused"),
        "{v}"
    );
    assert_eq!(stored(&js, "JOBS_DLQ").await, 1);
    eventually(
        Duration::from_secs(10),
        "the poison job is ACKed",
        || async { stored(&js, "JOBS").await == 0 },
    )
    .await;
    // A healthy job through the same worker.
    let (code, out, err) = submit(
        dir.path(),
        &path,
        &["--data", "{\"ok\":1}", "--id", "fine-1"],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["status"],
        "committed"
    );
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submit_that_times_out_exits_75_and_a_later_submit_with_the_same_id_finds_the_stored_result(
) {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    audited_db(dir.path());
    let path = write_named(
        dir.path(),
        "w.json",
        &worker_config(&server.url(), 2000, 3, 10),
    );
    // The streams exist, no worker runs: the job is queued and no result can come.
    create_jobs_stream(&js).await;
    create_results_stream(&js).await;
    let (code, out, err) = submit(
        dir.path(),
        &path,
        &[
            "--data",
            "{\"n\":1}",
            "--id",
            "late-1",
            "--timeout-ms",
            "300",
        ],
    );
    assert_eq!(code, 75, "{out}\n{err}");
    assert!(err.contains("--id late-1"), "{err}");
    assert_eq!(stored(&js, "JOBS").await, 1, "the job stays queued");
    // A worker starts and finishes it before anybody waits again.
    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "the result is stored", || async {
        stored_result(&js, "late-1").await.is_some()
    })
    .await;
    let (code, out, err) = submit(
        dir.path(),
        &path,
        &[
            "--data",
            "{\"n\":1}",
            "--id",
            "late-1",
            "--timeout-ms",
            "30000",
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        err.contains("submitted before"),
        "the resubmission is deduplicated: {err}"
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (v["id"].as_str(), v["status"].as_str()),
        (Some("late-1"), Some("committed"))
    );
    assert_eq!(stored(&js, "RESULTS").await, 1);
    d.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_submit_while_the_results_stream_is_missing_exits_69_without_waiting_its_budget() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_named(
        dir.path(),
        "w.json",
        &worker_config(&server.url(), 2000, 3, 10),
    );
    create_jobs_stream(&js).await;
    // No RESULTS stream. A budget of two minutes: a submit that waited it out would
    // exit 75, not 69.
    let (code, out, err) = submit(
        dir.path(),
        &path,
        &[
            "--data",
            "{\"n\":1}",
            "--id",
            "no-results-1",
            "--timeout-ms",
            "120000",
        ],
    );
    assert_eq!(code, 69, "{out}\n{err}");
    assert!(err.contains("RESULTS") || err.contains("results"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_id_is_not_one_subject_token_is_refused_as_invalid_job_id() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let db = audited_db(dir.path());
    let path = write_named(
        dir.path(),
        "w.json",
        &worker_config(&server.url(), 2000, 3, 10),
    );
    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "the streams exist", || async {
        js.get_stream("JOBS_DLQ").await.is_ok()
    })
    .await;
    publish_job(&js, "a.b", "{}").await;
    eventually(
        Duration::from_secs(20),
        "the job is dead-lettered",
        || async { stored(&js, "JOBS_DLQ").await == 1 },
    )
    .await;
    let copy = js
        .get_stream("JOBS_DLQ")
        .await
        .unwrap()
        .get_raw_message(1)
        .await
        .unwrap();
    let class = copy
        .headers
        .get("Jetsink-Error-Class")
        .map(|v| v.to_string());
    assert_eq!(class.as_deref(), Some("invalid_job_id"));
    eventually(
        Duration::from_secs(10),
        "the refused job is ACKed",
        || async { stored(&js, "JOBS").await == 0 },
    )
    .await;
    assert_eq!(audit(&db).0, 0, "a refused job is not written");
    assert_eq!(stored(&js, "RESULTS").await, 0, "and has no result subject");
    d.stop_cleanly();
}

/// A worker allowed everything but acknowledging: the server never sees its ACK, exactly
/// as if it crashed right after storing the result.
const DENY_ACKS: &str = r#"
accounts {
  JOBS {
    jetstream: enabled
    users: [
      {user: admin, password: admin}
      {user: worker, password: worker, permissions: {publish: {deny: ["$JS.ACK.>"]}}}
    ]
  }
}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_result_publish_and_ack_publishes_the_result_twice_and_stores_it_once() {
    let server = NatsServer::start_with_config(Some(DENY_ACKS));
    let admin = async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
        .connect(server.url())
        .await
        .unwrap();
    let js = jetstream::new(admin.clone());
    let dir = tempfile::tempdir().unwrap();
    let db = audited_db(dir.path());
    std::env::set_var("JOB_QUEUE_TEST_WORKER_PW", "worker");
    let mut cfg = worker_config(&server.url(), 1000, 2, 10);
    cfg["nats"]["user"] = json!("worker");
    cfg["nats"]["password_env"] = json!("JOB_QUEUE_TEST_WORKER_PW");
    let path = write_named(dir.path(), "w.json", &cfg);
    let mut seen = admin.subscribe("jobs.results.>").await.unwrap();
    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "the streams exist", || async {
        js.get_stream("RESULTS").await.is_ok()
    })
    .await;
    publish_job(&js, "twice-1", "{}").await;
    use futures::StreamExt;
    for n in 1..=2 {
        let m = tokio::time::timeout(Duration::from_secs(30), seen.next())
            .await
            .unwrap_or_else(|_| panic!("result publish {n} never seen\n{}", d.log_text()))
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        assert_eq!(
            (v["status"].as_str(), v["delivered"].as_u64()),
            (Some("committed"), Some(n))
        );
    }
    assert_eq!(stored(&js, "RESULTS").await, 1, "stored once");
    assert_eq!(stored_result(&js, "twice-1").await.unwrap()["delivered"], 1);
    assert_eq!(audit(&db), (1, 1), "committed twice, one row");
    d.stop_cleanly();
}
