//! Job-queue mode as the job-queue document (seed 004) writes it, against real servers: a
//! sink with `results` that sets neither `ack_wait_ms` nor `max_deliver` gets the
//! document's AckWait 60 s and MaxDeliver 4 on its consumer; and a poison job that crashes
//! every worker that takes it uses up those four deliveries unseen, the server's
//! MAX_DELIVERIES advisory has it dead-lettered with a `dead_lettered` result, and the
//! `jetsink submit` waiting for it exits 65.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use futures::StreamExt;
use serde_json::{json, Value};

/// A job-queue sink `worker` on the work-queue stream JOBS (`jobs.run`), results in RESULTS,
/// dead letters in JOBS_DLQ; `source` keys beyond stream, subject and consumer from `extra`.
fn job_config(server: &NatsServer, extra: Value) -> Value {
    let mut source = json!({
        "stream": "JOBS",
        "subjects": "jobs.run",
        "consumer": "workers",
        "create_stream": {"subjects": ["jobs.run"], "retention": "workqueue"}
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        source[k] = v.clone();
    }
    json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": format!("127.0.0.1:{}", free_port())},
        "logging": {"level": "info"},
        "sinks": {"worker": {
            "source": source,
            "delivery": {"batch_size": 10, "batch_timeout_ms": 200},
            "destination": {"type": "sqlite", "path": "data/jobs.db", "table": "jobs"},
            "results": {"subject_prefix": "jobs.results", "create_stream": {"name": "RESULTS"}},
            "dead_letter": {"subject": "jobs.dlq", "create_stream": {"name": "JOBS_DLQ"}}
        }}
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_queue_sink_that_sets_nothing_gets_ack_wait_60_s_and_max_deliver_4() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = job_config(&server, json!({}));
    let path = write_config(dir.path(), &cfg);

    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("ack_wait 60000 ms, max_deliver 4"), "{out}");
    assert!(
        out.contains("job queue:   ack_wait and max_deliver from"),
        "{out}"
    );

    let mut d = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "the consumer exists", || async {
        match js.get_stream("JOBS").await {
            Ok(s) => s.consumer_info("workers").await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    let info = common::consumer_info(&js, "JOBS", "workers").await.config;
    assert_eq!(info.ack_wait, Duration::from_secs(60), "{info:?}");
    assert_eq!(info.max_deliver, 4, "{info:?}");
    d.stop_cleanly();

    // What the config sets wins, and run sets it on the existing consumer.
    let cfg = job_config(&server, json!({"ack_wait_ms": 5000, "max_deliver": -1}));
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(20), "the settings updated", || async {
        let c = common::consumer_info(&js, "JOBS", "workers").await.config;
        c.ack_wait == Duration::from_secs(5) && c.max_deliver == -1
    })
    .await;
    d.stop_cleanly();
}

/// One delivery of the job to a worker that crashes on it: a pull that waits in the
/// server until the delivery is due (the redelivery comes when AckWait ends, with no
/// sleep here), never acknowledged.
async fn crash_on(consumer: &jetstream::consumer::PullConsumer) -> u64 {
    let mut batch = consumer
        .batch()
        .max_messages(1)
        .expires(Duration::from_secs(30))
        .messages()
        .await
        .unwrap();
    let m = batch.next().await.expect("a delivery").unwrap();
    m.info().unwrap().delivered as u64
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_crashes_every_worker_is_dead_lettered_by_the_advisory_and_submit_exits_65() {
    let server = NatsServer::start();
    let js = server.js().await;
    let dir = tempfile::tempdir().unwrap();
    // The streams the document sets up, made here so the job can be submitted before any
    // jetsink runs.
    create_jobs_stream(&js).await;
    create_results_stream(&js).await;
    // AckWait 10 s (set: the job default of 60 s would make this test wait four minutes);
    // MaxDeliver is left to the job-queue default. Were it not 4, `run` would set the
    // consumer's MaxDeliver to something else and the server would not give up on the job.
    let cfg = job_config(&server, json!({"ack_wait_ms": 10_000}));
    let path = write_config(dir.path(), &cfg);
    // The crashing workers share the durable with jetsink, as the document's pool does.
    let consumer = js
        .get_stream("JOBS")
        .await
        .unwrap()
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("workers".into()),
            filter_subject: "jobs.run".into(),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(10),
            max_deliver: 4,
            ..Default::default()
        })
        .await
        .unwrap();

    let out_file = dir.path().join("submit.out");
    let err_file = dir.path().join("submit.err");
    let mut submit = Command::new(jetsink_bin())
        .args([
            "submit",
            "--config",
            path.to_str().unwrap(),
            "--sink",
            "worker",
        ])
        .args([
            "--data",
            "{\"crash\":true}",
            "--id",
            "crash-1",
            "--timeout-ms",
            "120000",
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();

    // Three crashes, each redelivery at once (a NAK: the worker died and its supervisor
    // handed the job back), then a fourth worker takes it and dies without a word.
    for want in 1..=3u64 {
        let mut batch = consumer
            .batch()
            .max_messages(1)
            .expires(Duration::from_secs(30))
            .messages()
            .await
            .unwrap();
        let m = batch.next().await.expect("a delivery").unwrap();
        assert_eq!(m.info().unwrap().delivered as u64, want);
        m.ack_with(jetstream::AckKind::Nak(None)).await.unwrap();
    }
    assert_eq!(crash_on(&consumer).await, 4);

    // jetsink starts while the last delivery is out: it is never delivered again, and
    // when its AckWait ends the server gives up and says so in an advisory.
    let mut d = Daemon::start(&path, dir.path());
    let status = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(s)) = submit.try_wait() {
                break Some(s);
            }
            if std::time::Instant::now() > deadline {
                let _ = submit.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .unwrap();
    let out = std::fs::read_to_string(&out_file).unwrap_or_default();
    let err = std::fs::read_to_string(&err_file).unwrap_or_default();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(65),
        "{out}\n{err}\n{}",
        d.log_text()
    );
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["status"], "dead_lettered", "{v}");
    assert_eq!(v["id"], "crash-1", "{v}");
    assert_eq!(v["delivered"], 4, "{v}");

    let dl = stream_messages(&js, "JOBS_DLQ", "jobs.dlq").await;
    assert_eq!(dl.len(), 1, "one dead-letter copy");
    assert_eq!(&dl[0].payload[..], b"{\"crash\":true}");
    let reason = dl[0].headers.get("Jetsink-Reason").map(|v| v.to_string());
    assert_eq!(reason.as_deref(), Some("max_deliveries"));
    assert_eq!(sqlite_count(&dir.path().join("data/jobs.db"), "jobs"), 0);
    // The server leaves a job it gave up on in the work queue, unacknowledged.
    assert_eq!(stored(&js, "JOBS").await, 1);
    d.stop_cleanly();
}
