//! Generated configs: whatever `jetsink validate` accepts (exit 0), `jetsink run` starts
//! with — it gets past every config check and becomes ready — against a private server
//! and a fresh directory each. A config `run` refuses after `validate` accepted it is a
//! gap: under systemd, a config mistake that surfaces as exit 69 is a restart loop, and
//! one that surfaces as exit 78 is found at deploy time instead of before it.
//!
//! The generated values are those of a job sink with the job API: names, subjects, the
//! SQLite path and table, the results prefix and numbers, one mistake per case. The paths
//! stay inside the test's directory, so the environment itself cannot fail a run; what
//! varies is what an operator writes. Plain `validate` reads no secret file (it checks a
//! config anywhere, a CI job included), so a second property adds the token file's
//! mistakes and holds `validate --online`, run on the daemon's host, to the same promise.
//! (src/config/mutation_tests.rs checks, in-process, that validation of any mutated
//! example never panics.)

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Names as an operator might write them, good and bad.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9_-]{1,16}",
        1 => "\\PC{0,12}",
        1 => prop::sample::select(vec!["", " ", "a b", "a.b", "*", ">", "$SYS", "ü", "a\tb", "-", "_"])
            .prop_map(str::to_string),
    ]
}

fn subject() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,6}(\\.[a-z0-9_-]{1,6}){0,2}",
        1 => "\\PC{0,12}",
        1 => prop::sample::select(vec!["", ">", "a.*", "a..b", ".a", "a.", "a b", "$JS.API.x", "jobs.results.x"])
            .prop_map(str::to_string),
    ]
}

/// SQLite paths, relative to the run's directory.
fn db_path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "data/[a-z]{1,12}\\.db",
        2 => "[ -.0-~]{1,40}",
        1 => "\\PC{1,20}".prop_filter("relative", |p| !p.starts_with('/')),
        3 => prop::sample::select(vec![
            ".".to_string(), "data/".to_string(), "./".to_string(), "..".to_string(), "data/..".to_string(),
            "data/sub/dir/x.db".to_string(), "data/x\n.db".to_string(), "x.db ".to_string(),
            format!("data/{}.db", "n".repeat(300)),
            format!("{}/x.db", "d/".repeat(2100)),
            "".to_string(),
        ]),
    ]
}

fn token_file() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "api-token",
        "api-token",
        "missing-token",
        "empty-token",
        "/dev/null",
        "data",
    ])
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (1u64..5_000).prop_map(Value::from),
        1 => prop::sample::select(vec![json!(0), json!(-1), json!(u64::MAX), json!(1.5), json!("7")]),
    ]
}

#[derive(Debug, Clone)]
struct Generated {
    sink: String,
    stream: String,
    subject: String,
    consumer: String,
    path: String,
    table: String,
    results_prefix: String,
    results_stream: String,
    token_file: &'static str,
    batch_size: Value,
    ack_wait_ms: Value,
}

/// A good job sink, with one of its values (chosen by `field`) replaced by a generated one:
/// a mistake at a time, so most cases get past `validate` and exercise `run`.
fn generated(with_files: bool) -> impl Strategy<Value = Generated> {
    (
        0usize..if with_files { 10 } else { 9 },
        (name(), name(), subject(), name()),
        (db_path(), name(), subject(), name()),
        (token_file(), number(), number()),
    )
        .prop_map(
            |(
                field,
                (sink, stream, subject, consumer),
                (path, table, results_prefix, results_stream),
                (token_file, batch_size, ack_wait_ms),
            )| {
                let mut g = Generated {
                    sink: "worker".into(),
                    stream: "JOBS".into(),
                    subject: "jobs.run".into(),
                    consumer: "workers".into(),
                    path: "data/jobs.db".into(),
                    table: "jobs".into(),
                    results_prefix: "jobs.results".into(),
                    results_stream: "RESULTS".into(),
                    token_file: "api-token",
                    batch_size: json!(100),
                    ack_wait_ms: json!(30000),
                };
                match field {
                    0 => g.sink = sink,
                    1 => g.stream = stream,
                    2 => g.subject = subject,
                    3 => g.consumer = consumer,
                    4 => g.path = path,
                    5 => g.table = table,
                    6 => g.results_prefix = results_prefix,
                    7 => g.results_stream = results_stream,
                    9 => g.token_file = token_file,
                    _ => {
                        g.batch_size = batch_size;
                        g.ack_wait_ms = ack_wait_ms;
                    }
                }
                g
            },
        )
}

fn config_of(g: &Generated, server: &NatsServer, http: &str, api: &str) -> Value {
    let mut sinks = serde_json::Map::new();
    sinks.insert(
        g.sink.clone(),
        json!({
            "source": {"stream": g.stream, "subjects": g.subject, "consumer": g.consumer,
                       "ack_wait_ms": g.ack_wait_ms,
                       "create_stream": {"subjects": [g.subject]}},
            "delivery": {"batch_size": g.batch_size},
            "destination": {"type": "sqlite", "path": g.path, "table": g.table},
            "results": {"subject_prefix": g.results_prefix,
                        "create_stream": {"name": g.results_stream}}
        }),
    );
    json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 5000},
        "http": {"listen": http},
        "api": {"listen": api, "token_file": g.token_file},
        "sinks": sinks
    })
}

/// Starts `run` and waits until it is ready (`/readyz` 200) or has exited: `Ok` when
/// ready, else the exit code and the log.
fn run_until_ready(
    dir: &std::path::Path,
    path: &std::path::Path,
    http: &str,
) -> Result<(), String> {
    let mut daemon = Daemon::start(path, dir);
    let deadline = Instant::now() + Duration::from_secs(60);
    let url = format!("http://{http}/readyz");
    loop {
        if let Some(status) = daemon.wait_exit(Duration::ZERO) {
            return Err(format!("run exited {status:?}:\n{}", daemon.log_text()));
        }
        if http_blocking(reqwest::Method::GET, &url).is_some_and(|(s, _)| s == 200) {
            daemon.stop_cleanly();
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("run never became ready:\n{}", daemon.log_text()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One case: `validate` (with `extra` flags) on `g`'s config, and when it exits 0, `run`
/// until ready.
fn case(g: &Generated, extra: &[&str]) -> Result<(), TestCaseError> {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("api-token"), "t0ken\n").unwrap();
    std::fs::write(dir.path().join("empty-token"), "").unwrap();
    let http = format!("127.0.0.1:{}", free_port());
    let api = format!("127.0.0.1:{}", free_port());
    let cfg = config_of(g, &server, &http, &api);
    let path = write_config(dir.path(), &cfg);
    let mut args = vec!["validate", "--config", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, out, err) = jetsink(&args, dir.path());
    prop_assert!(
        code == 0 || code == 78,
        "validate {:?} exited {}: {}{}",
        extra,
        code,
        out,
        err
    );
    if code == 0 {
        let ran = run_until_ready(dir.path(), &path, &http);
        prop_assert!(
            ran.is_ok(),
            "validate {:?} accepted {:?} but {}",
            extra,
            g,
            ran.unwrap_err()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 40,
        // Each case starts a server and, when validate accepts, a daemon.
        max_shrink_iters: 64,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_config_validate_accepts_gets_run_past_every_config_check(g in generated(false)) {
        case(&g, &[])?;
    }

    #[test]
    fn a_config_validate_online_accepts_gets_run_past_every_config_check(g in generated(true)) {
        case(&g, &["--online"])?;
    }
}
