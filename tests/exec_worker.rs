//! The `exec` worker destination against a real nats-server, job-queue mode on: a job's
//! standard output becomes its result's `output`; exit 75 hands a job back and its
//! redelivery succeeds; a poison job (exit 1 every time) is dead-lettered with a
//! `dead_lettered` result and `submit` exits 65; a job over its timeout is killed with
//! what it started; in a batch where one job asks to run later the others are ACKed at
//! once; a job running past AckWait is kept alive with `+WPI` and not redelivered to a
//! second instance.
//!
//! The job programs are small `/bin/sh` scripts written into each test's directory: the
//! configs give `command` as an argv (`["/bin/sh", "<script>"]`).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use serde_json::json;

/// A worker sink `worker` on work-queue stream JOBS (`jobs.run`), results in RESULTS,
/// dead letters in JOBS_DLQ; `destination` is the exec settings.
fn config(
    url: &str,
    listen: &str,
    destination: serde_json::Value,
    source: serde_json::Value,
) -> serde_json::Value {
    let mut src = json!({
        "stream": "JOBS",
        "subjects": "jobs.run",
        "consumer": "workers",
        "ack_wait_ms": 30000,
        "max_deliver": 5,
        "create_stream": {"subjects": ["jobs.run"], "retention": "workqueue"}
    });
    for (k, v) in source.as_object().unwrap() {
        src[k] = v.clone();
    }
    let mut dest = json!({"type": "exec"});
    for (k, v) in destination.as_object().unwrap() {
        dest[k] = v.clone();
    }
    json!({
        "nats": {"servers": [url], "connect_timeout_ms": 2000},
        "http": {"listen": listen},
        "logging": {"level": "info"},
        "sinks": {"worker": {
            "source": src,
            "delivery": {"batch_size": 4, "batch_timeout_ms": 200,
                         "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 500,
                                   "refused_delay_ms": 100}},
            "destination": dest,
            "results": {"subject_prefix": "jobs.results", "create_stream": {"name": "RESULTS"}},
            "dead_letter": {"subject": "jobs.dlq", "max_attempts": 3,
                            "create_stream": {"name": "JOBS_DLQ"}}
        }}
    })
}

/// Writes a shell script `name` into `dir`; the argv that runs it.
fn script(dir: &Path, name: &str, body: &str) -> serde_json::Value {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    json!(["/bin/sh", path.to_string_lossy()])
}

fn write(dir: &Path, name: &str, cfg: &serde_json::Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
    path
}

/// Writes the config of a worker (see [`config`]) listening on a free HTTP port; the
/// config's path and that address.
fn write_worker(
    dir: &Path,
    name: &str,
    server: &NatsServer,
    destination: serde_json::Value,
    source: serde_json::Value,
) -> (PathBuf, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let cfg = config(&server.url(), &listen, destination, source);
    (write(dir, name, &cfg), listen)
}

/// Writes `c.json` for a worker (see [`config`]), starts it and waits until its streams
/// exist: the config's path, the daemon and a JetStream context.
async fn worker(
    server: &NatsServer,
    dir: &Path,
    destination: serde_json::Value,
    source: serde_json::Value,
) -> (PathBuf, Daemon, jetstream::Context) {
    let (path, _) = write_worker(dir, "c.json", server, destination, source);
    let (d, js) = start_worker(server, dir, &path).await;
    (path, d, js)
}

/// Starts the daemon of config `path` and waits until its streams exist.
async fn start_worker(
    server: &NatsServer,
    dir: &Path,
    path: &Path,
) -> (Daemon, jetstream::Context) {
    let d = Daemon::start(path, dir);
    let js = server.js().await;
    started(&js, &d).await;
    (d, js)
}

fn submit(dir: &Path, cfg: &Path, data: &str, id: &str) -> (i32, serde_json::Value, String) {
    let cfg = cfg.to_string_lossy().into_owned();
    let (code, out, err) = jetsink(
        &[
            "submit",
            "--config",
            &cfg,
            "--sink",
            "worker",
            "--data",
            data,
            "--id",
            id,
            "--timeout-ms",
            "20000",
        ],
        dir,
    );
    (code, serde_json::from_str(&out).unwrap_or(json!(null)), err)
}

async fn started(js: &jetstream::Context, d: &Daemon) {
    eventually(Duration::from_secs(20), "the streams exist", || async {
        stored(js, "JOBS").await == 0
            && js.get_stream("RESULTS").await.is_ok()
            && js.get_stream("JOBS_DLQ").await.is_ok()
    })
    .await;
    assert!(!d.log_text().contains("ERROR"), "{}", d.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_job_carries_the_programs_stdout_as_output() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cmd = script(
        dir.path(),
        "echo.sh",
        "printf '%s:' \"$JETSINK_JOB_ID\"; cat\n",
    );
    let (path, d, _) = worker(&server, dir.path(), json!({"command": cmd}), json!({})).await;
    let (code, result, err) = submit(dir.path(), &path, "hello world", "j-ok");
    assert_eq!(code, 0, "{err}\n{}", d.log_text());
    assert_eq!(result["status"], "committed");
    assert_eq!(result["output"], "j-ok:hello world");
    assert_eq!(result["delivered"], 1);
    assert!(result.get("output_truncated").is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_75_hands_the_job_back_and_its_redelivery_succeeds() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let body = format!(
        "m=\"{}/$JETSINK_JOB_ID\"\nif [ ! -e \"$m\" ]; then : > \"$m\"; exit 75; fi\necho \"second try, delivery $JETSINK_DELIVERED\"\n",
        marks.display()
    );
    let cmd = script(dir.path(), "flaky.sh", &body);
    let (path, d, _) = worker(&server, dir.path(), json!({"command": cmd}), json!({})).await;
    let (code, result, err) = submit(dir.path(), &path, "x", "j-flaky");
    assert_eq!(code, 0, "{err}\n{}", d.log_text());
    assert_eq!(result["status"], "committed");
    assert_eq!(result["delivered"], 2);
    assert_eq!(result["output"], "second try, delivery 2\n");
    assert!(marks.join("j-flaky").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_job_is_dead_lettered_with_a_result_and_submit_exits_65() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cmd = script(dir.path(), "poison.sh", "cat > /dev/null; exit 1\n");
    let (path, d, js) = worker(
        &server,
        dir.path(),
        json!({"command": cmd}),
        json!({"max_deliver": 3}),
    )
    .await;
    let (code, result, err) = submit(dir.path(), &path, "POISON", "j-poison");
    assert_eq!(code, 65, "{err}\n{}", d.log_text());
    assert_eq!(result["status"], "dead_lettered");
    assert_eq!(
        result["delivered"], 3,
        "dead-lettered on its last allowed delivery"
    );
    assert!(
        result["error"].as_str().unwrap().contains("exited with 1"),
        "{result}"
    );
    assert_eq!(stored(&js, "JOBS_DLQ").await, 1);
    eventually(
        Duration::from_secs(10),
        "the job is gone from the work queue",
        || async { stored(&js, "JOBS").await == 0 },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_over_its_timeout_is_killed_with_what_it_started_and_refused() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("sleeper.pid");
    let body = format!("sleep 300 &\necho $! > {}\nwait\n", pidfile.display());
    let cmd = script(dir.path(), "slow.sh", &body);
    let (path, d, _) = worker(
        &server,
        dir.path(),
        json!({"command": cmd, "timeout_ms": 500}),
        json!({"max_deliver": 1}),
    )
    .await;
    let (code, result, err) = submit(dir.path(), &path, "x", "j-slow");
    assert_eq!(code, 65, "{err}\n{}", d.log_text());
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("timeout_ms (500 ms)"),
        "{result}"
    );
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .to_string();
    eventually(
        Duration::from_secs(10),
        "the job's own child is killed too",
        || async {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => true,
                // Killed and waiting for its (foreign) parent to reap it.
                Ok(stat) => stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_batch_the_jobs_that_succeed_are_acked_while_one_that_asks_for_later_comes_back() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let body = format!(
        "read -r what\nif [ \"$what\" = later ] && [ ! -e {} ]; then exit 75; fi\necho \"$what\"\n",
        release.display()
    );
    let cmd = script(dir.path(), "mixed.sh", &body);
    let (path, _) = write_worker(
        dir.path(),
        "c.json",
        &server,
        json!({"command": cmd, "concurrency": 4}),
        json!({"max_deliver": -1}),
    );
    let js = server.js().await;
    // The four jobs wait in the stream before the worker starts, so one pull takes them.
    jetstream_stream(&js).await;
    for (id, what) in [("a", "ok"), ("b", "later"), ("c", "ok"), ("d", "ok")] {
        publish_job(&js, id, what).await;
    }
    let d = Daemon::start(&path, dir.path());
    eventually(
        Duration::from_secs(20),
        "the three good jobs are committed and ACKed",
        || async {
            let mut found = 0;
            for id in ["a", "c", "d"] {
                if stored_result(&js, id)
                    .await
                    .is_some_and(|r| r["status"] == "committed")
                {
                    found += 1;
                }
            }
            found == 3 && stored(&js, "JOBS").await == 1
        },
    )
    .await;
    eventually(
        Duration::from_secs(20),
        "the later job is redelivered, alone unacked",
        || async {
            let info = common::consumer_info(&js, "JOBS", "workers").await;
            info.num_redelivered >= 1
                && info.num_ack_pending <= 1
                && info.ack_floor.stream_sequence >= 1
        },
    )
    .await;
    assert!(stored_result(&js, "b").await.is_none());
    std::fs::write(&release, b"").unwrap();
    eventually(
        Duration::from_secs(20),
        "the later job finally commits",
        || async {
            stored_result(&js, "b")
                .await
                .is_some_and(|r| r["status"] == "committed" && r["output"] == "later\n")
        },
    )
    .await;
    let b = stored_result(&js, "b").await.unwrap();
    assert!(b["delivered"].as_u64().unwrap() >= 2, "{b}");
    for id in ["a", "c", "d"] {
        assert_eq!(
            stored_result(&js, id).await.unwrap()["delivered"],
            1,
            "{id}"
        );
    }
    eventually(
        Duration::from_secs(10),
        "the work queue is empty",
        || async { stored(&js, "JOBS").await == 0 },
    )
    .await;
    drop(d);
}

/// Creates the work-queue stream the way the config would, so jobs can wait in it
/// before the worker starts.
async fn jetstream_stream(js: &jetstream::Context) {
    js.get_or_create_stream(jetstream::stream::Config {
        name: "JOBS".into(),
        subjects: vec!["jobs.run".into()],
        retention: jetstream::stream::RetentionPolicy::WorkQueue,
        ..Default::default()
    })
    .await
    .expect("stream");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_longer_than_ack_wait_is_kept_alive_and_not_redelivered_to_a_second_instance() {
    kept_alive_across_two_instances(json!({"ack_wait_ms": 2000, "max_deliver": -1})).await;
}

/// With `backoff_ms` the server redelivers after the step of the delivery made, not after
/// AckWait: the keep-alive must follow the step (here 4 s, while AckWait says 30 s).
#[tokio::test(flavor = "multi_thread")]
async fn a_job_longer_than_its_first_backoff_step_is_kept_alive_and_runs_once() {
    kept_alive_across_two_instances(json!({
        "ack_wait_ms": 30000, "max_deliver": 5, "backoff_ms": [4000, 30000, 30000]
    }))
    .await;
}

/// One job that runs until the test releases it, two instances on its consumer
/// (`source`): the one running it keeps it alive, so the idle one never gets it.
async fn kept_alive_across_two_instances(source: serde_json::Value) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("gate");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let runs = dir.path().join("runs");
    let body = format!(
        "echo \"$JETSINK_DELIVERED\" >> {runs}\nread -r _ < {fifo}\necho finished\n",
        runs = runs.display(),
        fifo = fifo.display()
    );
    let cmd = script(dir.path(), "long.sh", &body);
    let js = server.js().await;
    let dest = json!({"command": cmd, "timeout_ms": 60000});
    let (a, listen_a) = write_worker(dir.path(), "a.json", &server, dest.clone(), source.clone());
    let (b, listen_b) = write_worker(dir.path(), "b.json", &server, dest, source);
    let da = Daemon::start(&a, dir.path());
    started(&js, &da).await;
    let db = Daemon::start(&b, dir.path());
    publish_job(&js, "long", "x").await;
    eventually(Duration::from_secs(20), "the job started", || async {
        runs.exists()
    })
    .await;
    // Three +WPI rounds from whichever instance runs it: 1.5 × the redelivery interval
    // have passed, so without them the server would have redelivered the job to the idle
    // instance.
    eventually(
        Duration::from_secs(30),
        "three +WPI rounds for the running job",
        || async {
            let pa = metric_value(&listen_a, "jetsink_progress_acks_total{sink=\"worker\"}")
                .await
                .unwrap_or(0.0);
            let pb = metric_value(&listen_b, "jetsink_progress_acks_total{sink=\"worker\"}")
                .await
                .unwrap_or(0.0);
            pa + pb >= 3.0
        },
    )
    .await;
    let info = common::consumer_info(&js, "JOBS", "workers").await;
    assert_eq!(info.num_redelivered, 0, "no redelivery while it runs");
    let gate = fifo.clone();
    tokio::task::spawn_blocking(move || std::fs::write(gate, b"go\n"))
        .await
        .unwrap()
        .unwrap();
    eventually(
        Duration::from_secs(20),
        "the job's result is stored",
        || async { stored_result(&js, "long").await.is_some() },
    )
    .await;
    let r = stored_result(&js, "long").await.unwrap();
    assert_eq!(r["status"], "committed");
    assert_eq!(r["delivered"], 1);
    assert_eq!(r["output"], "finished\n");
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "1\n",
        "the job ran once"
    );
    drop((da, db));
}

/// Three jobs that fail and one that commits, in one batch, with a dead-letter subject
/// whose publishes time out (a subscriber that never answers, no stream): disposing of
/// the three takes 3 × 5 s, longer than AckWait (12 s). The committed job is ACKed first,
/// so the second instance never gets it; the failed ones stay kept alive meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_committed_job_is_acked_before_slow_dead_letter_publishes_of_its_batch_mates() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let body = format!(
        "read -r what\nif [ \"$what\" = bad ]; then exit 1; fi\necho \"$JETSINK_DELIVERED\" >> {}\n",
        runs.display()
    );
    let cmd = script(dir.path(), "mixed.sh", &body);
    let js = server.js().await;
    let client = server.client().await;
    // Takes every dead-letter copy and never acknowledges it.
    let _hole = client.subscribe("jobs.hole").await.unwrap();
    client.flush().await.unwrap();
    jetstream_stream(&js).await;
    for (id, what) in [
        ("b1", "bad"),
        ("b2", "bad"),
        ("b3", "bad"),
        ("good", "good"),
    ] {
        publish_job(&js, id, what).await;
    }
    let write = |name: &str| {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut cfg = config(
            &server.url(),
            &listen,
            json!({"command": cmd, "concurrency": 4}),
            json!({"ack_wait_ms": 12000, "max_deliver": -1}),
        );
        cfg["sinks"]["worker"]["dead_letter"] =
            json!({"subject": "jobs.hole", "max_attempts": 1, "publish_timeout_ms": 5000});
        // The failed ones come back only after the test: the second instance stays idle,
        // its pulls waiting, so a redelivery of the good job would go straight to it.
        cfg["sinks"]["worker"]["delivery"]["retry"]["refused_delay_ms"] = json!(600_000);
        (self::write(dir.path(), name, &cfg), listen)
    };
    let (a, listen_a) = write("a.json");
    let (b, _) = write("b.json");
    let da = Daemon::start(&a, dir.path());
    eventually(
        Duration::from_secs(20),
        "instance 1 took all four",
        || async {
            let s = js.get_stream("JOBS").await.unwrap();
            s.consumer_info("workers")
                .await
                .is_ok_and(|i| i.num_pending == 0 && i.delivered.stream_sequence == 4)
        },
    )
    .await;
    let db = Daemon::start(&b, dir.path());
    let failures = |n: f64| {
        let listen = listen_a.clone();
        async move {
            metric_value(
                &listen,
                "jetsink_dlq_publish_failures_total{sink=\"worker\"}",
            )
            .await
            .unwrap_or(0.0)
                >= n
        }
    };
    // Past the three timeouts (15 s, 3 s beyond AckWait): had the good job stayed unACKed
    // through them, the idle instance would have been handed it at 12 s and run it.
    eventually(
        Duration::from_secs(60),
        "three failed dead-letter publishes",
        || failures(3.0),
    )
    .await;
    let good = stored_result(&js, "good").await.expect("a result");
    assert_eq!(good["status"], "committed");
    assert_eq!(good["delivered"], 1);
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "1\n",
        "the good job ran once:\n{}\n{}",
        da.log_text(),
        db.log_text()
    );
    drop((da, db));
}

/// A stop while a job runs: the job is run again later, never refused (with
/// `max_attempts: 1` a refusal would dead-letter it at once). `group_signal`: the service
/// manager signals every process of the unit, the job included (systemd's default
/// `KillMode=control-group`); otherwise only jetsink (`KillMode=mixed`, as
/// deploy/jetsink.service sets), which stops the job itself at its shutdown deadline.
async fn a_stop_hands_the_running_job_back(group_signal: bool) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("gate");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let pid = dir.path().join("job.pid");
    let done = dir.path().join("may-finish");
    let body = format!(
        "if [ -e {done} ]; then echo finished; exit 0; fi\necho $$ > {pid}\nread -r _ < {fifo}\n",
        done = done.display(),
        pid = pid.display(),
        fifo = fifo.display()
    );
    let cmd = script(dir.path(), "long.sh", &body);
    let (path, _) = write_worker(
        dir.path(),
        "c.json",
        &server,
        json!({"command": cmd, "timeout_ms": 60000}),
        json!({"max_deliver": -1}),
    );
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cfg["sinks"]["worker"]["dead_letter"]["max_attempts"] = json!(1);
    cfg["sinks"]["worker"]["delivery"]["shutdown_timeout_ms"] = json!(1000);
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let (mut d, js) = start_worker(&server, dir.path(), &path).await;
    publish_job(&js, "stopped", "x").await;
    eventually(Duration::from_secs(20), "the job runs", || async {
        std::fs::read_to_string(&pid).is_ok_and(|p| p.ends_with('\n'))
    })
    .await;
    let job = std::fs::read_to_string(&pid).unwrap().trim().to_string();
    if group_signal {
        // The job is the leader of its own process group.
        let killed = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{job}")])
            .status()
            .unwrap();
        assert!(killed.success());
    }
    let status = d.terminate(Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        d.log_text()
    );
    assert_eq!(
        stored(&js, "JOBS_DLQ").await,
        0,
        "not dead-lettered:\n{}",
        d.log_text()
    );
    assert!(
        stored_result(&js, "stopped").await.is_none(),
        "no result: it did not end"
    );
    assert_eq!(stored(&js, "JOBS").await, 1, "still in the work queue");
    // The next start runs it again, and this time it finishes.
    std::fs::write(&done, b"").unwrap();
    let (_d, _) = start_worker(&server, dir.path(), &path).await;
    eventually(
        Duration::from_secs(30),
        "the job commits on its redelivery",
        || async {
            stored_result(&js, "stopped")
                .await
                .is_some_and(|r| r["status"] == "committed")
        },
    )
    .await;
    let r = stored_result(&js, "stopped").await.unwrap();
    // 2, or 3 when the signalled job came back to this instance before its own SIGTERM.
    assert!(r["delivered"].as_u64().unwrap() >= 2, "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_signalled_by_the_service_stop_is_handed_back_not_dead_lettered() {
    a_stop_hands_the_running_job_back(true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_still_running_at_the_shutdown_deadline_is_stopped_and_handed_back() {
    a_stop_hands_the_running_job_back(false).await;
}
