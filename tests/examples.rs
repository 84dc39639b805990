//! The shipped example configs run side by side: every one against the same server, all at
//! once, in one working directory — streams, consumers, listen ports and files do not
//! collide — and each stops with exit 0. (The PostgreSQL, MySQL and NATS-republish
//! examples need more than a NATS server and are checked by `validate` instead; the
//! results-to-PostgreSQL one also runs in tests/results_postgres.rs.)

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Examples that need more than a plain NATS server and a directory: a database user of
/// their own (PostgreSQL, MySQL), a target stream on other servers (NATS republish), an
/// HTTPS endpoint and its token (HTTP), certificates and a TLS server (NATS TLS), an
/// S3-compatible store and its keys (S3), a target stream (the shuffler's republish). `validate`, the schema and the port check below
/// still cover them.
const NEED_MORE_THAN_A_SERVER: [&str; 11] = [
    "postgres.json",
    "postgres-in-flight.json",
    "job-results-postgres.json",
    "mysql.json",
    "nats-republish.json",
    "http.json",
    "nats-tls.json",
    "s3.json",
    "s3-rollover.json",
    "s3-parquet.json",
    "shuffle.json",
];

/// Examples that need a newer nats-server than 2.9 (priority groups 2.11, several filter
/// subjects in one consumer 2.10): they exit 78 on older servers, so they run here only
/// against a 2.11+ server.
const NEED_2_11: [&str; 2] = ["active-standby.json", "buckets-groups.json"];

/// Every file in `config/`.
fn all_examples() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("config/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
}

fn example(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("example config");
    serde_json::from_str(&text).expect("example parses")
}

/// Where an example's HTTP endpoint listens (the default when it sets none).
fn listen_of(cfg: &Value) -> String {
    cfg["http"]["listen"]
        .as_str()
        .unwrap_or("127.0.0.1:9464")
        .to_string()
}

/// Every address an example listens on: its HTTP endpoint, and its job API when it has
/// an `api` section (the API's default address when that sets none).
fn listens_of(cfg: &Value) -> Vec<String> {
    let mut listens = vec![listen_of(cfg)];
    if cfg.get("api").is_some() {
        listens.push(
            cfg["api"]["listen"]
                .as_str()
                .unwrap_or("127.0.0.1:9465")
                .to_string(),
        );
    }
    listens
}

#[test]
fn every_example_listens_on_ports_of_its_own() {
    let listens: Vec<String> = all_examples()
        .iter()
        .flat_map(|n| listens_of(&example(n)))
        .collect();
    let ports: BTreeSet<&str> = listens
        .iter()
        .map(|l| l.rsplit(':').next().unwrap_or(""))
        .collect();
    assert_eq!(ports.len(), listens.len(), "shared ports: {listens:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_example_runs_side_by_side_against_one_server() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Paths in the examples are relative to the working directory, as when they are run
    // from the repository root: bring the example keys along.
    let keys = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/keys");
    if let Ok(entries) = std::fs::read_dir(&keys) {
        let into = dir.path().join("config/keys");
        std::fs::create_dir_all(&into).unwrap();
        for e in entries.filter_map(|e| e.ok()) {
            std::fs::copy(e.path(), into.join(e.file_name())).unwrap();
        }
    }
    let mut daemons = Vec::new();
    let modern = nats_server_version().is_some_and(|v| v >= (2, 11, 0));
    if !modern {
        eprintln!(
            "not run: {NEED_2_11:?} need nats-server 2.11+ (priority groups, filter_subjects), this one is {:?}",
            nats_server_version()
        );
    }
    let runnable: Vec<String> = all_examples()
        .into_iter()
        .filter(|n| !NEED_MORE_THAN_A_SERVER.contains(&n.as_str()))
        .filter(|n| modern || !NEED_2_11.contains(&n.as_str()))
        .collect();
    assert!(runnable.len() >= 10, "{runnable:?}");
    for name in &runnable {
        let mut cfg = example(name);
        // Point it at the private server, and at a free port: the ports as shipped are
        // checked to be distinct above, and a developer's own daemon may hold them.
        if cfg["nats"]["url"].is_string() {
            cfg["nats"]["url"] = Value::from(server.url());
        } else {
            cfg["nats"]["servers"] = serde_json::json!([server.url()]);
        }
        let listen = format!("127.0.0.1:{}", free_port());
        cfg["http"]["listen"] = Value::from(listen.clone());
        if cfg["api"].is_object() {
            cfg["api"]["listen"] = Value::from(format!("127.0.0.1:{}", free_port()));
        }
        let path = dir.path().join(format!("example-{name}"));
        std::fs::write(&path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
        daemons.push((name, listen, Daemon::start(&path, dir.path())));
    }
    for (name, listen, daemon) in &daemons {
        let url = format!("http://{listen}/readyz");
        let mut ready = false;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !ready && std::time::Instant::now() < deadline {
            ready = http(reqwest::Method::GET, &url)
                .await
                .is_some_and(|(status, _)| status == 200);
            if !ready {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        assert!(ready, "{name} never became ready:\n{}", daemon.log_text());
    }
    for (_, _, daemon) in &mut daemons {
        daemon.stop_cleanly();
    }
}
