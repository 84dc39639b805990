//! Submit→result latency through the HTTP job API at a fixed rate: a benchmark driver,
//! not a test of behaviour (ignored by default). Run through tests/bench/job-latency.sh,
//! or:
//!
//! `JOB_RATE=1000 JOB_SECONDS=10 JOB_INSTANCES=3 cargo test --release --test integration job_latency:: -- --ignored --nocapture`
//!
//! It starts a private nats-server and `JOB_INSTANCES` `jetsink run` processes sharing one
//! work-queue consumer, each serving the API on its own port. `JOB_DESTINATION` picks what
//! a job does: `sqlite` (default; each instance writes its own SQLite file, as instances
//! on separate hosts would) or `exec` (the worker destination runs `/bin/true` per job,
//! `JOB_CONCURRENCY` at a time, default 8). Requests are sent open-loop at
//! `JOB_RATE` per second, round-robin over the instances; each request's latency runs
//! from the moment it was *due*, so a stalled client cannot hide queueing (no coordinated
//! omission). The first second is warm-up and not counted.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run with --ignored (tests/bench/job-latency.sh)"]
async fn submit_to_result_latency_through_the_http_api() {
    let rate: u64 = env_or("JOB_RATE", 200);
    let seconds: u64 = env_or("JOB_SECONDS", 10);
    let instances: usize = env_or("JOB_INSTANCES", 1);
    let batch: usize = env_or("JOB_BATCH", 100);
    let destination: String = env_or("JOB_DESTINATION", "sqlite".to_string());
    let concurrency: u64 = env_or("JOB_CONCURRENCY", 8);
    assert!(
        destination == "sqlite" || destination == "exec",
        "JOB_DESTINATION is sqlite or exec, not {destination:?}"
    );
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    let mut apis = Vec::new();
    let mut daemons = Vec::new();
    for i in 0..instances {
        let api = format!("127.0.0.1:{}", free_port());
        let target = if destination == "exec" {
            json!({"type": "exec", "command": ["/bin/true"], "concurrency": concurrency,
                   "timeout_ms": 10000})
        } else {
            json!({"type": "sqlite", "path": format!("data/jobs-{i}.db"), "table": "jobs"})
        };
        let cfg = json!({
            "nats": {"servers": [server.url()]},
            "http": {"listen": format!("127.0.0.1:{}", free_port())},
            "api": {"listen": api, "max_waiting": 100000},
            "logging": {"level": "warn"},
            "sinks": {"jobs": {
                "source": {"stream": "BENCH_JOBS", "subjects": "bench.jobs", "consumer": "workers",
                           "ack_wait_ms": 30000, "max_deliver": 4, "max_ack_pending": 100000,
                           "create_stream": {"subjects": ["bench.jobs"], "retention": "workqueue"}},
                "delivery": {"batch_size": batch, "batch_timeout_ms": 1000},
                "destination": target,
                "results": {"subject_prefix": "bench.results",
                            "create_stream": {"name": "BENCH_RESULTS"}}
            }}
        });
        let path = dir.path().join(format!("instance-{i}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
        daemons.push(Daemon::start(&path, dir.path()));
        apis.push(format!("http://{api}/v1/sinks/jobs/jobs"));
        // One at a time, so only the first creates the streams.
        let http = reqwest::Client::new();
        let probe = format!("http://{api}/v1/sinks/jobs/jobs/probe");
        eventually(Duration::from_secs(60), "the API answers", || {
            let (http, probe) = (http.clone(), probe.clone());
            async move {
                http.get(&probe)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 404)
            }
        })
        .await;
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(4096)
        .build()
        .unwrap();
    let total = rate * seconds;
    let warmup = rate; // the first second
    let started = tokio::time::Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(due).await;
        let url = apis[i as usize % apis.len()].clone();
        let http = http.clone();
        tasks.push(tokio::spawn(async move {
            let r = http
                .post(&url)
                .header("Idempotency-Key", format!("job-{i}"))
                .body(format!("{{\"job\":{i}}}"))
                .send()
                .await;
            let (code, status) = match r {
                Ok(r) => {
                    let code = r.status().as_u16();
                    let body: serde_json::Value = match r.bytes().await {
                        Ok(b) => serde_json::from_slice(&b).unwrap_or_default(),
                        Err(_) => serde_json::Value::Null,
                    };
                    (
                        code,
                        body["status"].as_str().unwrap_or_default().to_string(),
                    )
                }
                Err(_) => (0, String::new()),
            };
            (i, code, status, due.elapsed())
        }));
    }
    let send_end = Instant::now();
    let mut lat = Vec::new();
    let mut failed = 0;
    for t in tasks {
        let (i, code, status, d) = t.await.unwrap();
        if code != 200 || status != "committed" {
            failed += 1;
        } else if i >= warmup {
            lat.push(d);
        }
    }
    let drained = send_end.elapsed();
    lat.sort();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let idx = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[idx].as_secs_f64() * 1000.0
    };
    // With SQLite the rows are counted too; the exec worker leaves nothing to count but the
    // committed results every request answered with.
    let rows: u64 = if destination == "sqlite" {
        (0..instances)
            .map(|i| sqlite_count(&dir.path().join(format!("data/jobs-{i}.db")), "jobs"))
            .sum()
    } else {
        total - failed
    };
    println!(
        "job-latency: {destination}, rate {rate}/s, {seconds} s, {instances} instance(s), batch {batch}: {} measured, {failed} not 200 committed; p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms; last answer {:.0} ms after the last send; {rows} committed",
        lat.len(),
        pct(0.50),
        pct(0.90),
        pct(0.99),
        pct(1.0),
        drained.as_secs_f64() * 1000.0,
    );
    assert_eq!(failed, 0, "every job answered 200 with a committed result");
    assert!(
        rows >= total,
        "every job written: {rows} rows for {total} jobs"
    );
    for d in &mut daemons {
        d.stop_cleanly();
    }
}
