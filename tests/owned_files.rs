//! Issue 50's nine reproductions, each ending as it must: a link planted where jetsink
//! writes its metrics snapshot or a Parquet file is never written through (the victim
//! keeps its bytes); a snapshot file that is the database, a key file, the config itself
//! or a device, and an SQLite path at a FIFO or a device, are refused by `validate` and
//! `run` with 78 naming the settings; an endless HTTP body and a 4 GiB sparse file end in
//! a bounded error under a 1 GiB address-space cap; `bench` on an exec sink runs nothing;
//! `trace --seq 0` is an argument error; no command prints a URL's password.

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

/// A failure guard only: every command here ends at once when it works.
const GUARD: Duration = Duration::from_secs(60);

/// A file outside the written directory, for a planted link to point at.
fn victim(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("victim");
    std::fs::write(&p, b"precious").unwrap();
    p
}

fn assert_untouched(victim: &Path) {
    assert_eq!(
        std::fs::read(victim).unwrap(),
        b"precious",
        "the link's victim keeps its bytes"
    );
}

/// The `written_at` of the snapshot at `path`, once it is there.
fn written_at(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["written_at"].as_str().map(String::from)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_planted_beside_the_metrics_snapshot_is_never_written_through() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = victim(outside.path());
    let mut cfg = config(
        &server,
        "SNAPLINK",
        "snaplink.>",
        json!({"type": "file", "directory": "out"}),
        json!({}),
    );
    cfg["metrics"] = json!({"snapshot_file": "state/m.json", "snapshot_interval_ms": 1000});
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let snapshot = state.join("m.json");
    daemon
        .eventually(GUARD, "a first snapshot", || async {
            written_at(&snapshot).is_some()
        })
        .await;
    // The name the old writer opened with File::create, and a few guesses more.
    let first = written_at(&snapshot).unwrap();
    let pid = daemon.pid();
    for name in [
        format!(".m.json.tmp-{pid}"),
        ".m.json.tmp".to_string(),
        format!(".m.json.{:016x}.tmp", 0),
    ] {
        std::os::unix::fs::symlink(&victim, state.join(name)).unwrap();
    }
    daemon
        .eventually(GUARD, "a snapshot written after the links", || async {
            written_at(&snapshot).is_some_and(|w| w != first)
        })
        .await;
    assert_untouched(&victim);
    let meta = std::fs::symlink_metadata(&snapshot).unwrap();
    assert!(meta.file_type().is_file(), "the snapshot is a file");
    daemon.stop_cleanly();
    assert_untouched(&victim);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_link_planted_at_the_next_parquet_temporary_name_is_removed_never_followed() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = victim(outside.path());
    let cfg = config(
        &server,
        "PQLINK",
        "pqlink.>",
        // A file per message: one pull each, written at once.
        json!({"type": "file", "directory": "out", "format": "parquet",
               "rollover": {"max_messages": 1}}),
        json!({"batch_size": 1}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    daemon.wait_for_log(GUARD, "sink running").await;
    let js = server.js().await;
    let out = dir.path().join("out");
    let name = |seq: u64| format!("events-{seq:020}-{seq:020}.parquet");
    publish_n(&js, "pqlink.a", 1).await;
    let one = out.join(name(1));
    daemon
        .eventually(GUARD, "the first Parquet file", || async { one.exists() })
        .await;
    // After the start-up cleanup, at the name the next batch's file is written under.
    let temporary = out.join(format!(".{}.tmp", name(2)));
    std::os::unix::fs::symlink(&victim, &temporary).unwrap();
    publish_n(&js, "pqlink.a", 1).await;
    let two = out.join(name(2));
    daemon
        .eventually(GUARD, "the second Parquet file", || async { two.exists() })
        .await;
    assert_untouched(&victim);
    let meta = std::fs::symlink_metadata(&two).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the final name is a file, not a link"
    );
    assert!(std::fs::read(&two).unwrap().starts_with(b"PAR1"));
    assert!(
        std::fs::symlink_metadata(&temporary).is_err(),
        "the planted link is gone"
    );
    daemon.stop_cleanly();
}

/// `jetsink <args>` in `dir` within the guard: (exit code, stdout + stderr).
fn run_cmd(dir: &Path, args: &[&str]) -> (i32, String) {
    let (code, out, err) =
        jetsink_within(args, dir, GUARD).unwrap_or_else(|| panic!("jetsink {args:?} did not exit"));
    (code, format!("{out}{err}"))
}

/// A sink writing SQLite at `db`, with the metrics snapshot at `snapshot` and a key file.
fn owned(db: &str, snapshot: Option<&str>, key: &Path) -> serde_json::Value {
    let mut cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
        "encryption": {"active_key": "k1", "keys": [{"id": "k1", "file": key}]},
        "sinks": {"orders": {
            "source": {"stream": "ORDERS", "subjects": "orders.>", "consumer": "jetsink"},
            "destination": {"type": "sqlite", "path": db}
        }}
    });
    if let Some(s) = snapshot {
        cfg["metrics"] = json!({"snapshot_file": s});
    }
    cfg
}

fn keygen(dir: &Path) -> std::path::PathBuf {
    let key = dir.join("k1.key");
    let (code, text) = run_cmd(dir, &["keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    key
}

#[test]
fn a_snapshot_file_that_is_the_database_a_key_the_config_or_a_device_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let config = dir.path().join("jetsink.json");
    let config_text = config.to_str().unwrap();
    let key_text = key.to_str().unwrap();
    for (snapshot, other) in [
        ("data/o.db", "sinks.orders.destination.path"),
        ("./data/../data/o.db", "sinks.orders.destination.path"),
        (key_text, "encryption.keys[0].file"),
        (config_text, "the config file"),
        ("/dev/null", "is a character device, not a regular file"),
    ] {
        let cfg = owned("data/o.db", Some(snapshot), &key);
        let path = write_config(dir.path(), &cfg);
        let before = std::fs::read(&path).unwrap();
        let (code, text) = run_cmd(dir.path(), &["validate", "--config", "jetsink.json"]);
        assert_eq!(code, 78, "{snapshot}: {text}");
        assert!(text.contains("metrics.snapshot_file: "), "{text}");
        assert!(text.contains(other), "{snapshot}: {text}");
        // `run` makes the same check before it touches anything.
        let log = refused_at_start(dir.path(), &cfg, 78);
        assert!(log.contains(other), "{log}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "the config is unchanged"
        );
    }
    let k = std::fs::read_to_string(&key).unwrap();
    assert_eq!(k.trim().len(), 44, "the key file still holds its key");
    assert!(!dir.path().join("data/o.db").exists(), "nothing was opened");
}

#[test]
fn an_sqlite_path_at_a_fifo_or_a_device_is_refused_by_validate_online_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    let fifo = dir.path().join("o.db");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    for (db, what) in [
        (fifo.to_str().unwrap(), "is a FIFO, not a regular file"),
        ("/dev/null", "is a character device, not a regular file"),
    ] {
        let cfg = owned(db, None, &key);
        write_config(dir.path(), &cfg);
        for args in [
            &["validate", "--config", "jetsink.json"][..],
            &["validate", "--config", "jetsink.json", "--online"][..],
        ] {
            let (code, text) = run_cmd(dir.path(), args);
            assert_eq!(code, 78, "{args:?} {db}: {text}");
            assert!(
                text.contains(&format!("sinks.orders.destination.path: {db} {what}")),
                "{text}"
            );
        }
        let log = refused_at_start(dir.path(), &cfg, 78);
        assert!(log.contains(what), "{log}");
    }
    assert!(
        !dir.path().join("o.db-journal").exists(),
        "no journal beside the FIFO"
    );
}

/// Runs jetsink under a 1 GiB address-space cap (`prlimit --as`), stdin from `stdin`.
fn capped(dir: &Path, args: &[&str], stdin: Stdio) -> (i32, String) {
    let out = Command::new("prlimit")
        .arg("--as=1073741824")
        .arg("--")
        .arg(jetsink_bin())
        .args(args)
        .current_dir(dir)
        .stdin(stdin)
        .output()
        .expect("run prlimit");
    let code = out.status.code().unwrap_or(-1);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (code, text)
}

#[test]
fn an_endless_metrics_answer_ends_in_an_error_under_a_1_gib_cap_and_no_password_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        // One connection: an answer whose body never ends.
        let Ok((mut s, _)) = listener.accept() else {
            return;
        };
        let _ = s.read(&mut [0u8; 4096]);
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n");
        let chunk = b"# HELP jetsink_x y\n".repeat(4096);
        while s.write_all(&chunk).is_ok() {}
    });
    let url = format!("http://user:S3CRETPW@{addr}/metrics");
    let (code, text) = capped(
        dir.path(),
        &["metrics", "show", "--url", &url],
        Stdio::null(),
    );
    assert!((1..128).contains(&code), "exit {code}: {text}");
    assert!(text.contains("larger than 16 MiB"), "{text}");
    assert!(!text.contains("S3CRETPW"), "{text}");
    assert!(
        text.contains(&format!("http://***@{addr}/metrics")),
        "{text}"
    );
}

#[test]
fn no_command_prints_the_password_of_a_url_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let http = format!("http://user:S3CRETPW@127.0.0.1:{port}/metrics");
    let nats = format!("nats://user:S3CRETPW@127.0.0.1:{port}");
    for args in [
        vec!["metrics", "show", "--url", &http],
        vec!["metrics", "get", "jetsink_x", "--url", &http],
        vec![
            "bench",
            "--server",
            &nats,
            "--messages",
            "1",
            "--destination",
            "none",
        ],
    ] {
        let (code, text) = run_cmd(dir.path(), &args);
        assert_ne!(code, 0, "{args:?}: {text}");
        assert!(!text.contains("S3CRETPW"), "{args:?}: {text}");
    }
}

#[test]
fn decrypt_refuses_a_4_gib_sparse_file_a_device_and_endless_stdin_within_a_1_gib_cap() {
    let dir = tempfile::tempdir().unwrap();
    let key = keygen(dir.path());
    write_config(dir.path(), &owned("data/o.db", None, &key));
    let sparse = dir.path().join("big.jsonl");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(4 << 30)
        .unwrap();
    let decrypt = |input: &str, stdin: Stdio| {
        let args = [
            "decrypt",
            "--config",
            "jetsink.json",
            "--sink",
            "orders",
            input,
        ];
        capped(dir.path(), &args, stdin)
    };
    let (code, text) = decrypt("big.jsonl", Stdio::null());
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("big.jsonl is larger than 256 MiB, the most a record input may hold"),
        "{text}"
    );
    let (code, text) = decrypt("/dev/zero", Stdio::null());
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("/dev/zero is a character device"), "{text}");
    let zeros = std::fs::File::open("/dev/zero").unwrap();
    let (code, text) = decrypt("-", Stdio::from(zeros));
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("stdin is larger than 256 MiB"), "{text}");
}

#[test]
fn bench_refuses_an_exec_sink_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:4222"]},
        "sinks": {"jobs": {
            "source": {"stream": "JOBS", "subjects": "jobs.>", "consumer": "w"},
            "destination": {"type": "exec",
                            "command": ["/bin/sh", "-c", format!("touch {}", ran.display())]}
        }}
    });
    write_config(dir.path(), &cfg);
    let (code, text) = run_cmd(
        dir.path(),
        &[
            "bench",
            "--config",
            "jetsink.json",
            "--sink",
            "jobs",
            "--messages",
            "10",
        ],
    );
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sink jobs writes to an exec destination"),
        "{text}"
    );
    assert!(text.contains("--destination none"), "{text}");
    assert!(!ran.exists(), "the command never ran");
}

#[test]
fn bench_writes_a_configured_file_sink_into_its_own_directory_not_the_configured_one() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let production = dir.path().join("production");
    let out = bench_configured_sink(
        &server,
        dir.path(),
        json!({"type": "file", "directory": production}),
        300,
    );
    assert!(out.contains("300 distinct keys stored"), "{out}");
    assert!(out.contains("temporary directory of its own"), "{out}");
    assert!(
        !production.exists(),
        "no bench row in the configured directory"
    );
}

#[test]
fn trace_seq_0_is_an_argument_error_like_replay_from_seq_0() {
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = run_cmd(
        dir.path(),
        &[
            "trace",
            "--config",
            "jetsink.json",
            "--sink",
            "x",
            "--seq",
            "0",
        ],
    );
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--seq"), "{text}");
}
