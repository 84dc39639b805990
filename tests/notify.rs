//! systemd `Type=notify` against a real notification socket: the test binds the unix
//! datagram socket systemd would, passes it as `NOTIFY_SOCKET` with a `WATCHDOG_USEC`, and
//! reads what the daemon sends: `READY=1` once its sink is bound and running, `WATCHDOG=1`
//! while its sink beats, `STOPPING=1` on SIGTERM.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// A daemon started the way systemd starts a `Type=notify` service; killed on drop.
struct Notified {
    child: Child,
    log: std::path::PathBuf,
}

impl Notified {
    fn start(config: &std::path::Path, dir: &std::path::Path, socket: &std::path::Path) -> Self {
        let log = dir.join("jetsink.log");
        let child = Command::new(jetsink_bin())
            .args(["run", "--config"])
            .arg(config)
            .current_dir(dir)
            .env("RUST_LOG", "info")
            .env("NOTIFY_SOCKET", socket)
            // A short watchdog so pings come quickly; the decision does not depend on it.
            .env("WATCHDOG_USEC", "400000")
            .env_remove("WATCHDOG_PID")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start jetsink");
        Notified { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next datagram's lines; `None` when none came within the failure guard.
fn next_message(socket: &UnixDatagram) -> Option<Vec<String>> {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).ok()?;
    Some(
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// Reads datagrams until one holds `line`; panics with what came instead.
fn wait_for_line(
    socket: &UnixDatagram,
    line: &str,
    seen: &mut Vec<String>,
    log: &dyn Fn() -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        match next_message(socket) {
            Some(lines) => {
                let found = lines.iter().any(|l| l == line);
                seen.extend(lines);
                if found {
                    return;
                }
            }
            None => break,
        }
    }
    panic!("no {line} from jetsink; received {seen:?}\n{}", log());
}

#[tokio::test(flavor = "multi_thread")]
async fn systemd_hears_ready_after_binding_then_watchdog_pings_then_stopping_on_sigterm() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("bind the notification socket");
    // A failure guard only: each expected notification normally comes within a second.
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let cfg = config(
        &server,
        "NOTIFY",
        "notify.>",
        json!({"type": "file", "directory": "data/out"}),
        json!({"batch_size": 10}),
    );
    let mut daemon = Notified::start(&write_config(dir.path(), &cfg), dir.path(), &socket_path);
    let log_path = daemon.log.clone();
    let log = move || std::fs::read_to_string(&log_path).unwrap_or_default();
    let mut seen = Vec::new();

    let first = tokio::task::block_in_place(|| next_message(&socket));
    let first = first.unwrap_or_else(|| panic!("no notification at all\n{}", log()));
    assert!(
        first.iter().any(|l| l == "READY=1"),
        "the first notification is READY=1, got {first:?}\n{}",
        log()
    );
    seen.extend(first);
    // READY means started: the stream and consumer exist, and the sink writes.
    consumer_state(&js, "NOTIFY", "jetsink").await;
    publish_n(&js, "notify.x", 5).await;
    let out = dir.path().join("data/out");
    eventually(Duration::from_secs(30), "5 lines written", || async {
        jsonl_lines(&out).len() == 5
    })
    .await;

    tokio::task::block_in_place(|| {
        wait_for_line(&socket, "WATCHDOG=1", &mut seen, &log);
        wait_for_line(&socket, "WATCHDOG=1", &mut seen, &log);
    });
    assert!(
        !seen.iter().any(|l| l == "STOPPING=1"),
        "no STOPPING=1 before the signal: {seen:?}"
    );

    let _ = Command::new("kill")
        .args(["-TERM", &daemon.child.id().to_string()])
        .status();
    tokio::task::block_in_place(|| wait_for_line(&socket, "STOPPING=1", &mut seen, &log));
    let status = daemon.child.wait().expect("exit status");
    assert!(status.success(), "exit {status:?}\n{}", daemon.log_text());
    let ready = seen.iter().position(|l| l == "READY=1");
    let ping = seen.iter().position(|l| l == "WATCHDOG=1");
    let stopping = seen.iter().position(|l| l == "STOPPING=1");
    assert!(ready < ping && ping < stopping, "order: {seen:?}");
}
