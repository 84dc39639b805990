//! The command line as an operator meets it: config errors name their JSON path and exit
//! 78, an unreachable dependency exits 69, the shipped example configs validate, and the
//! publisher and schema commands work.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::json;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const GOOD: &str = r#"{
  "nats": {"servers": ["nats://127.0.0.1:4222"]},
  "sinks": {"orders": {
    "source": {"stream": "ORDERS", "subjects": "orders.>", "consumer": "jetsink"},
    "destination": {"type": "sqlite", "path": "data/o.db"}
  }}
}"#;

fn validate(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.json", text);
    let (code, out, err) = jetsink(&["validate", "--config", &path], dir.path());
    (code, format!("{out}{err}"))
}

#[test]
fn a_good_config_validates_and_summarizes_what_it_will_do() {
    let (code, text) = validate(GOOD);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("orders"), "{text}");
    assert!(text.contains("ORDERS (must exist)"), "{text}");
    assert!(text.contains("sqlite data/o.db"), "{text}");
}

#[test]
fn an_unknown_key_exits_78_naming_its_path() {
    let (code, text) = validate(&GOOD.replace(
        r#""consumer": "jetsink""#,
        r#""consumer": "jetsink", "colour": "red""#,
    ));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sinks.orders.source.colour: unknown field `colour`"),
        "{text}"
    );
}

#[test]
fn a_duplicate_key_exits_78_naming_its_path() {
    let (code, text) = validate(&GOOD.replace(
        r#""consumer": "jetsink""#,
        r#""consumer": "a", "consumer": "b""#,
    ));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sinks.orders.source.consumer: duplicate key"),
        "{text}"
    );
}

#[test]
fn a_wrong_type_exits_78_naming_its_path() {
    let (code, text) = validate(&GOOD.replace(
        r#""consumer": "jetsink""#,
        r#""consumer": "jetsink", "ack_wait_ms": "30s""#,
    ));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sinks.orders.source.ack_wait_ms: invalid type"),
        "{text}"
    );
}

#[test]
fn an_out_of_range_value_exits_78_naming_its_path_and_range() {
    let (code, text) = validate(&GOOD.replace(
        r#""destination""#,
        r#""delivery": {"batch_size": 0}, "destination""#,
    ));
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sinks.orders.delivery.batch_size: must be between 1 and 10000, got 0"),
        "{text}"
    );
}

/// A sink writing orders into a PostgreSQL table of its own with `mode: upsert`, its
/// destination's other keys given by `extra`.
fn upsert_config(extra: serde_json::Value, delivery: serde_json::Value) -> String {
    let mut destination = json!({"type": "postgres", "table": "orders", "mode": "upsert",
                                 "columns": {"order_id": "/id", "amount": "/amount"}});
    for (k, v) in extra.as_object().unwrap() {
        destination[k] = v.clone();
    }
    json!({"nats": {"servers": ["nats://127.0.0.1:4222"]},
           "sinks": {"orders": {
               "source": {"stream": "ORDERS", "subjects": "orders.>", "consumer": "jetsink"},
               "delivery": delivery,
               "destination": destination}}})
    .to_string()
}

#[test]
fn an_upsert_without_an_order_exits_78_naming_the_sink_and_the_fix() {
    let text = upsert_config(json!({}), json!({}));
    let (code, out) = validate(&text);
    assert_eq!(code, 78, "{out}");
    assert!(
        out.contains(
            "sinks.orders.destination.order: an upsert keeps the newest message of each key"
        ),
        "{out}"
    );
    for fix in [
        "\"$stream_sequence\"",
        "\"order\": {\"column\": \"version\"}",
        "\"order\": \"arrival\"",
    ] {
        assert!(out.contains(fix), "{out} lacks {fix}");
    }
    // `run` refuses it alike, before connecting anywhere.
    let dir = tempfile::tempdir().unwrap();
    let log = refused_at_start(dir.path(), &serde_json::from_str(&text).unwrap(), 78);
    assert!(log.contains("sinks.orders.destination.order"), "{log}");
}

#[test]
fn validate_shows_what_an_upsert_keeps_and_warns_of_arrival_order_beside_the_shuffler() {
    let extra = json!({"columns": {"order_id": "/id", "amount": "/amount", "version": "/version"},
                       "order": {"column": "version"},
                       "delete": {"header": "Op", "value": "gone", "column": "deleted_at"}});
    let (code, out) = validate(&upsert_config(extra, json!({})));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "(upsert, mapped columns, newest by version; deletes by header Op = \"gone\" into deleted_at)"
        ),
        "{out}"
    );
    let arrival = json!({"order": "arrival"});
    let (code, out) = validate(&upsert_config(
        arrival,
        json!({"shuffle": {"buffer": 1000}}),
    ));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("warning: sinks.orders.destination.order: \"arrival\": the last write wins, and sinks.orders.delivery.shuffle reorders messages"),
        "{out}"
    );
    assert!(
        out.contains("(upsert, mapped columns, last write wins (order: arrival))"),
        "{out}"
    );
}

#[test]
fn nan_is_not_accepted() {
    let (code, text) = validate(&GOOD.replace(
        r#""consumer": "jetsink""#,
        r#""consumer": "jetsink", "ack_wait_ms": NaN"#,
    ));
    assert_eq!(code, 78, "{text}");
    assert!(text.contains("not valid JSON"), "{text}");
}

#[test]
fn a_missing_config_file_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = jetsink(
        &["validate", "--config", "/nonexistent/jetsink.json"],
        dir.path(),
    );
    assert_eq!(code, 78);
    assert!(
        err.contains("cannot read config file /nonexistent/jetsink.json"),
        "{err}"
    );
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, _) = jetsink(&["run"], dir.path());
    assert_eq!(code, 2);
}

#[test]
fn every_shipped_example_config_validates() {
    // From the repository root, as the README runs them: their relative paths (data
    // files, example keys) are relative to it.
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for entry in std::fs::read_dir(repo.join("config")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().map(|e| e == "json").unwrap_or(false) {
            let (code, out, err) = jetsink(&["validate", "--config", path.to_str().unwrap()], repo);
            assert_eq!(code, 0, "{} does not validate:\n{out}{err}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 2, "expected example configs in config/");
}

#[test]
fn schema_is_a_json_schema_that_describes_sinks_and_destinations() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, _) = jetsink(&["schema"], dir.path());
    assert_eq!(code, 0);
    let schema: serde_json::Value = serde_json::from_str(&out).unwrap();
    let text = schema.to_string();
    for needle in [
        "batch_size",
        "ack_wait_ms",
        "rotate_bytes",
        "synchronous",
        "sinks",
    ] {
        assert!(text.contains(needle), "schema lacks {needle}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_stream_without_create_stream_exits_69_naming_it() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        &server,
        "NOPE",
        "nope.>",
        json!({"type": "file", "directory": "out"}),
        json!({}),
    );
    cfg["sinks"]["main"]["source"]
        .as_object_mut()
        .unwrap()
        .remove("create_stream");
    let path = write_config(dir.path(), &cfg);
    let mut d = Daemon::start(&path, dir.path());
    let status = d
        .wait_exit(Duration::from_secs(15))
        .expect("exits by itself");
    assert_eq!(status.code(), Some(69), "{}", d.log_text());
    assert!(
        d.log_text().contains("stream NOPE does not exist"),
        "{}",
        d.log_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_nats_server_exits_69() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let text = GOOD.replace("nats://127.0.0.1:4222", &format!("nats://127.0.0.1:{port}"));
    let path = write(
        dir.path(),
        "c.json",
        &text.replace(r#""sinks""#, r#""http": {"enabled": false}, "sinks""#),
    );
    let mut d = Daemon::start(std::path::Path::new(&path), dir.path());
    let status = d
        .wait_exit(Duration::from_secs(20))
        .expect("exits by itself");
    assert_eq!(status.code(), Some(69), "{}", d.log_text());
    assert!(
        d.log_text().contains("cannot connect to NATS"),
        "{}",
        d.log_text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_existing_consumer_with_another_filter_is_refused_with_exit_78() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "DRIFT", "drift.>").await;
    js.get_stream("DRIFT")
        .await
        .unwrap()
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("jetsink".into()),
            filter_subject: "drift.other".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let cfg = config(
        &server,
        "DRIFT",
        "drift.>",
        json!({"type": "file", "directory": "out"}),
        json!({}),
    );
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let status = d
        .wait_exit(Duration::from_secs(15))
        .expect("exits by itself");
    assert_eq!(status.code(), Some(78), "{}", d.log_text());
    let log = d.log_text();
    assert!(
        log.contains("filter_subject = drift.other") && log.contains("wants drift.>"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn publish_awaits_every_ack_and_reports_the_count() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "PUB", "pub.>").await;
    let (code, out, err) = jetsink(
        &[
            "publish",
            "--server",
            &server.url(),
            "--subject",
            "pub.hello",
            "--count",
            "1000",
            "--size",
            "200",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("published 1000 messages of 200 bytes"),
        "{out}"
    );
    let info = js
        .get_stream("PUB")
        .await
        .unwrap()
        .get_info()
        .await
        .unwrap();
    assert_eq!(info.state.messages, 1000);
    let (code, _, err) = jetsink(
        &[
            "publish",
            "--server",
            &server.url(),
            "--subject",
            "nostream.hello",
            "--count",
            "1",
        ],
        dir.path(),
    );
    assert_eq!(code, 69, "{err}");
    assert!(err.contains("nostream.hello"), "{err}");
}

#[test]
fn publish_refuses_a_subject_together_with_buckets_as_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let (code, out, err) = jetsink(
        &[
            "publish",
            "--server",
            "nats://127.0.0.1:1",
            "--subject",
            "orders.new",
            "--bucket-prefix",
            "jobs.bucket",
            "--buckets",
            "4",
        ],
        dir.path(),
    );
    // Exit 2 before any connection attempt (the server URL points nowhere).
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("--subject") && err.contains("--bucket-prefix"),
        "{err}"
    );
}

#[test]
fn publish_to_a_server_without_jetstream_names_jetstream() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // A plain core NATS server: no -js.
    let mut plain = std::process::Command::new(nats_server_binary())
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start nats-server");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nats-server did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("nats://127.0.0.1:{port}");
    let (code, out, err) = jetsink(
        &[
            "publish",
            "--server",
            &url,
            "--subject",
            "a.b",
            "--count",
            "1",
        ],
        dir.path(),
    );
    let _ = plain.kill();
    let _ = plain.wait();
    assert_eq!(code, 69, "{out}{err}");
    assert!(err.contains("JetStream disabled"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_and_health_endpoints_answer() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "HTTP", "http.>").await;
    publish_n(&js, "http.x", 10).await;
    let cfg = config(
        &server,
        "HTTP",
        "http.>",
        json!({"type": "sqlite", "path": "data/h.db"}),
        json!({}),
    );
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let get = |path: &'static str| {
        let listen = listen.clone();
        async move { http_get(&listen, path).await }
    };
    eventually(Duration::from_secs(20), "ready", || async {
        get("/readyz").await.0 == 200
    })
    .await;
    eventually(Duration::from_secs(20), "acked 10", || async {
        get("/metrics")
            .await
            .1
            .contains("jetsink_messages_acked_total{sink=\"main\"} 10")
    })
    .await;
    let (code, body) = get("/healthz").await;
    assert_eq!(code, 200, "{body}");
    let (_, metrics) = get("/metrics").await;
    for name in [
        "jetsink_messages_fetched_total{sink=\"main\"}",
        "jetsink_batches_total{outcome=\"committed\",sink=\"main\"}",
        "jetsink_sink_write_seconds_bucket",
        "jetsink_commit_lag_seconds_bucket",
        "jetsink_inflight_messages{sink=\"main\"}",
        "jetsink_nats_connected 1",
        "jetsink_build_info",
    ] {
        assert!(metrics.contains(name), "missing {name}");
    }
    server_kill_then_unready(&mut d, server, &listen).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connection_that_gives_up_reconnecting_stops_the_daemon_with_exit_69() {
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        &server,
        "GONE",
        "gone.>",
        json!({"type": "file", "directory": "data/gone"}),
        json!({}),
    );
    cfg["nats"]["max_reconnects"] = json!(2);
    cfg["nats"]["reconnect_delay_max_ms"] = json!(200);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(30), "ready", || async {
        http_get(&listen, "/readyz").await.0 == 200
    })
    .await;
    server.kill();
    let status = d
        .wait_exit(Duration::from_secs(60))
        .expect("the daemon stops by itself once its client gives up");
    let log = d.log_text();
    assert_eq!(status.code(), Some(69), "{log}");
    assert!(log.contains("closed for good"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_shot_command_ends_without_a_connection_warning() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        &server,
        "ONESHOT",
        "oneshot.>",
        json!({"type": "file", "directory": "data/oneshot"}),
        json!({}),
    );
    let mut cfg = cfg;
    cfg["sinks"]["main"]["dead_letter"] = json!({
        "subject": "dlq.{sink}", "create_stream": {"name": "DLQ_ONESHOT"}
    });
    let path = write_config(dir.path(), &cfg);
    // The stream must exist for a replay to look at: create it as run would.
    let js = server.js().await;
    create_stream(&js, "DLQ_ONESHOT", "dlq.>").await;
    let (code, out, err) = jetsink(
        &[
            "dlq",
            "replay",
            "--config",
            path.to_str().unwrap(),
            "--sink",
            "main",
            "--dry-run",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("WARN"), "{err}");
    assert!(!err.contains("connection closed"), "{err}");
}

async fn server_kill_then_unready(d: &mut Daemon, mut server: NatsServer, listen: &str) {
    server.kill();
    eventually(
        Duration::from_secs(20),
        "not ready without NATS",
        || async {
            let (code, body) = http_get(listen, "/readyz").await;
            // Each sink has its own connection, named after it.
            code == 503 && body.contains("nats connection main: not connected")
        },
    )
    .await;
    d.stop_cleanly();
}

/// GET `path` from the daemon's endpoint: (status, body); (0, "") when nothing answers.
async fn http_get(addr: &str, path: &str) -> (u16, String) {
    http(reqwest::Method::GET, &format!("http://{addr}{path}"))
        .await
        .unwrap_or((0, String::new()))
}

/// The `/readyz` bodies `docs/operations.md` lists for a NATS outage, in order (the block
/// after the `<!-- checked by tests/cli.rs: readyz-outage -->` marker).
fn documented_outage_bodies() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .expect("docs/operations.md");
    let block = doc
        .split("readyz-outage -->")
        .nth(1)
        .and_then(|rest| rest.split("```").nth(1))
        .expect("the readyz-outage block in docs/operations.md");
    block
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nats_outage_shows_in_readyz_stage_by_stage() {
    let stages = documented_outage_bodies();
    assert_eq!(stages.len(), 5, "{stages:?}");
    let mut server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(
        &server,
        "OUTAGE",
        "outage.>",
        json!({"type": "sqlite", "path": "data/o.db"}),
        json!({}),
    );
    // The doc's sink is the quickstart's; the connection is named after it.
    let sink = cfg["sinks"]["main"].take();
    cfg["sinks"] = json!({ "quickstart": sink });
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let body_is = |want: &str| {
        let (listen, want) = (listen.clone(), want.to_string());
        move || {
            let (listen, want) = (listen.clone(), want.clone());
            async move { http_get(&listen, "/readyz").await.1 == want }
        }
    };
    eventually(Duration::from_secs(30), &stages[0], body_is(&stages[0])).await;
    server.kill();
    eventually(Duration::from_secs(20), &stages[1], body_is(&stages[1])).await;
    // Three failed pulls, then a failed re-binding.
    eventually(Duration::from_secs(90), &stages[2], body_is(&stages[2])).await;
    server.restart();
    // Stage 4 (connection up, consumer not yet confirmed) lasts until the next pull
    // succeeds, possibly too short to see: every body until ready is one of the stages.
    let seen = std::sync::Mutex::new(Vec::new());
    eventually(Duration::from_secs(60), &stages[4], || async {
        let body = http_get(&listen, "/readyz").await.1;
        let ready = body == stages[4];
        seen.lock().unwrap().push(body);
        ready
    })
    .await;
    for body in seen.into_inner().unwrap() {
        assert!(stages[1..].contains(&body), "undocumented body {body}");
    }
    d.stop_cleanly();
}
