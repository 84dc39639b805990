//! `jetsink top` against a running daemon: `--once` lists every sink with a state and a
//! rate, in JSON and as text, reading the server's consumer info with `--config`; an
//! endpoint that does not answer is exit 69 with its URL redacted; bad flags are exit 2.
//! A sink whose destination fails shows `holding` with its error, and `running` again once
//! it drains. The live view starts on a terminal (a pty from `script`) and quits on `q`.

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::json;

const N: usize = 50;

/// A daemon with two SQLite sinks on two streams, each with `N` messages written.
async fn two_sinks_drained(server: &NatsServer, dir: &Path) -> (Daemon, String) {
    let js = server.js().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let sink = |stream: &str, subject: &str, db: &str| {
        json!({
            "source": {
                "stream": stream,
                "subjects": subject,
                "consumer": "jetsink",
                "create_stream": {"subjects": [subject]}
            },
            "destination": {"type": "sqlite", "path": db, "table": "events"}
        })
    };
    let cfg = json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": listen},
        "logging": {"level": "info"},
        "sinks": {
            "orders": sink("TOP_ORDERS", "top.orders", "data/orders.db"),
            "audit": sink("TOP_AUDIT", "top.audit", "data/audit.db"),
        }
    });
    let config = write_config(dir, &cfg);
    let mut daemon = Daemon::start(&config, dir);
    eventually(Duration::from_secs(30), "both consumers bound", || async {
        for stream in ["TOP_ORDERS", "TOP_AUDIT"] {
            let Ok(s) = js.get_stream(stream).await else {
                return false;
            };
            if s.consumer_info("jetsink").await.is_err() {
                return false;
            }
        }
        true
    })
    .await;
    publish_n(&js, "top.orders", N).await;
    publish_n(&js, "top.audit", N).await;
    for stream in ["TOP_ORDERS", "TOP_AUDIT"] {
        daemon
            .eventually(Duration::from_secs(60), "the stream drained", || async {
                drained(&js, stream).await
            })
            .await;
    }
    (daemon, listen)
}

#[tokio::test(flavor = "multi_thread")]
async fn top_once_lists_every_sink_with_its_state_and_rate() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, listen) = two_sinks_drained(&server, dir.path()).await;
    let url = format!("http://{listen}/metrics");
    let (snapshot, out) = top_json(dir.path(), &url);
    assert_eq!(snapshot["ready"], json!(true), "{out}");
    let sinks = snapshot["sinks"].as_array().expect("sinks");
    let names: Vec<&str> = sinks.iter().filter_map(|s| s["sink"].as_str()).collect();
    assert_eq!(names, ["audit", "orders"], "{out}");
    for s in sinks {
        assert_eq!(s["state"], json!("running"), "{out}");
        assert!(s["rate"].is_number(), "{out}");
        assert_eq!(s["backlog_from"], json!("daemon"), "{out}");
    }

    // With the config: its listener is the URL, and the backlog comes from the server.
    let args = [
        "top",
        "--once",
        "--interval-ms",
        "200",
        "--config",
        "jetsink.json",
        "--format",
        "json",
    ];
    let (code, out, err) = jetsink(&args, dir.path());
    assert_eq!(code, 0, "{err}");
    let snapshot: serde_json::Value = serde_json::from_str(&out).expect(&out);
    for s in snapshot["sinks"].as_array().expect("sinks") {
        assert_eq!(s["backlog_from"], json!("server"), "{out}");
        assert_eq!(
            (&s["pending"], &s["ack_pending"]),
            (&json!(0), &json!(0)),
            "{out}"
        );
    }

    let (code, out, err) = jetsink(
        &["top", "--once", "--interval-ms", "200", "--url", &url],
        dir.path(),
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("SINK "), "{out}");
    assert!(
        lines[1].starts_with("audit ") && lines[1].contains(" running "),
        "{out}"
    );
    assert!(
        lines[2].starts_with("orders ") && lines[2].contains(" running "),
        "{out}"
    );
    daemon.stop_cleanly();
}

#[test]
fn top_exits_69_naming_the_url_without_its_password_when_nothing_answers() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://watcher:s3cret@127.0.0.1:{}/metrics", free_port());
    let (code, out, err) = jetsink(&["top", "--once", "--url", &url], dir.path());
    assert_eq!(code, 69, "{out}{err}");
    assert!(err.contains("http://***@127.0.0.1:"), "{err}");
    assert!(!err.contains("s3cret") && !out.contains("s3cret"), "{err}");
}

#[test]
fn top_refuses_bad_flags_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["top", "--once", "--interval-ms", "5"][..],
        &["top", "--format", "json"][..],
        &["top", "--once", "--sort", "size"][..],
    ] {
        let (code, _, err) = jetsink(args, dir.path());
        assert_eq!(code, 2, "{args:?}: {err}");
    }
}

/// What a reader thread has read of `from` so far, until it contains `needle` or
/// `within` passes (a guard for a view that never draws; false then).
fn read_until(
    chunks: &std::sync::mpsc::Receiver<Vec<u8>>,
    seen: &mut Vec<u8>,
    needle: &str,
    within: Duration,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    while !String::from_utf8_lossy(seen).contains(needle) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match chunks.recv_timeout(left) {
            Ok(chunk) => seen.extend_from_slice(&chunk),
            Err(_) => return false,
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread")]
async fn the_live_view_draws_on_a_terminal_and_quits_on_q() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` (util-linux) to give the live view a terminal");
        return;
    }
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (mut daemon, listen) = two_sinks_drained(&server, dir.path()).await;
    // `script` runs the command on a pseudo-terminal and passes our stdin to it; the
    // terminal gets a size first (a pty opened from a pipe has none).
    let command = format!(
        "stty cols 160 rows 20 && exec {} top --interval-ms 200 --url http://{listen}/metrics",
        jetsink_bin()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("script");
    let mut stdout = child.stdout.take().expect("stdout");
    let (tx, chunks) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stdout.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let within = Duration::from_secs(60);
    // The screen is drawn (the key line is its last row) before `q` is typed, so the
    // key reaches a terminal in raw mode.
    let drawn = read_until(&chunks, &mut seen, "quit", within);
    if !drawn {
        let _ = child.kill();
    }
    assert!(drawn, "{}", String::from_utf8_lossy(&seen));
    assert!(String::from_utf8_lossy(&seen).contains("orders"));
    child
        .stdin
        .as_mut()
        .expect("stdin")
        .write_all(b"q")
        .expect("type q");
    // The normal screen is back: the alternate screen was left.
    let restored = read_until(&chunks, &mut seen, "\u{1b}[?1049l", within);
    let status = child.wait().expect("wait");
    assert!(restored, "{}", String::from_utf8_lossy(&seen));
    assert!(
        status.success(),
        "{status:?}: {}",
        String::from_utf8_lossy(&seen)
    );
    daemon.stop_cleanly();
}

/// `top --once --format json` for `listen`, parsed, with `sink`'s entry.
fn snapshot_of(dir: &Path, listen: &str, sink: &str) -> serde_json::Value {
    let (snapshot, out) = top_json(dir, &format!("http://{listen}"));
    let found = snapshot["sinks"]
        .as_array()
        .and_then(|s| s.iter().find(|e| e["sink"] == json!(sink)).cloned());
    found.unwrap_or_else(|| panic!("no sink {sink} in {out}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_whose_destination_fails_shows_holding_with_its_error_then_running() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let cfg = config(
        &server,
        "TOP_HELD",
        "top.held",
        json!({"type": "sqlite", "path": "data/held.db", "table": "events", "busy_timeout_ms": 100}),
        json!({"batch_size": 10}),
    );
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    publish_n(&js, "top.held", 1).await;
    let db = dir.path().join("data/held.db");
    daemon
        .eventually(Duration::from_secs(30), "the first row", || async {
            sqlite_count(&db, "events") == 1
        })
        .await;
    let blocker = rusqlite::Connection::open(&db).unwrap();
    blocker.execute_batch("BEGIN EXCLUSIVE").unwrap();
    publish_n(&js, "top.held", 20).await;
    let readyz = format!("http://{listen}/readyz");
    daemon
        .eventually(
            Duration::from_secs(60),
            "/readyz names the failed destination",
            || async {
                http(reqwest::Method::GET, &readyz)
                    .await
                    .is_some_and(|(_, body)| body.contains("sink main: destination unavailable"))
            },
        )
        .await;
    let held = snapshot_of(dir.path(), &listen, "main");
    assert_eq!(held["state"], json!("holding"), "{held}");
    assert!(
        held["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("locked")),
        "{held}"
    );

    blocker.execute_batch("ROLLBACK").unwrap();
    drop(blocker);
    daemon
        .eventually(Duration::from_secs(60), "the stream drained", || async {
            drained(&js, "TOP_HELD").await
        })
        .await;
    daemon
        .eventually(Duration::from_secs(60), "/readyz ready again", || async {
            http(reqwest::Method::GET, &readyz)
                .await
                .is_some_and(|(status, _)| status == 200)
        })
        .await;
    let running = snapshot_of(dir.path(), &listen, "main");
    assert_eq!(running["state"], json!("running"), "{running}");
    assert_eq!(running["last_error"], json!(null), "{running}");
    daemon.stop_cleanly();
}

/// `top --once --format json --url URL`, which must exit 0: the parsed snapshot and the
/// text it was parsed from.
fn top_json(dir: &Path, url: &str) -> (serde_json::Value, String) {
    let args = [
        "top",
        "--once",
        "--format",
        "json",
        "--interval-ms",
        "100",
        "--url",
        url,
    ];
    let (code, out, err) = jetsink(&args, dir);
    assert_eq!(code, 0, "{err}");
    let snapshot = serde_json::from_str(&out).expect(&out);
    (snapshot, out)
}
