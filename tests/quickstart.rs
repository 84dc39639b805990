//! `jetsink quickstart` end to end, as the README's one command: with no NATS server at
//! the config's URL it starts `nats-server` from `PATH` with its store under `data/`,
//! writes the test messages into the quickstart table, and stops that server when it
//! stops; with a server already there it uses it and leaves it running. The config is
//! `config/quickstart.json` itself, moved to free ports.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// `config/quickstart.json` with its NATS URL and HTTP listener moved to `nats` and a
/// free port, written to `dir/quickstart.json`.
fn quickstart_config(dir: &Path, nats: &str) -> PathBuf {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/quickstart.json");
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(shipped).expect("read")).expect("json");
    cfg["nats"]["servers"] = json!([nats]);
    cfg["http"]["listen"] = json!(format!("127.0.0.1:{}", free_port()));
    let path = dir.join("quickstart.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&cfg).expect("json")).expect("write");
    path
}

/// The test server binary as a full path (the harness may name it by `PATH` alone).
fn server_binary() -> PathBuf {
    let name = nats_server_binary();
    if name.contains('/') {
        return PathBuf::from(name);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join(&name))
        .find(|p| p.is_file())
        .expect("the nats-server the tests run")
}

/// A running `jetsink quickstart`, killed on drop; its stdout and stderr go to files.
struct Quickstart {
    child: Option<Child>,
    out: PathBuf,
    err: PathBuf,
}

impl Quickstart {
    fn start(dir: &Path, args: &[&str], path_env: &std::ffi::OsStr) -> Quickstart {
        let out = dir.join("quickstart.out");
        let err = dir.join("quickstart.err");
        let child = Command::new(jetsink_bin())
            .arg("quickstart")
            .args(args)
            .current_dir(dir)
            .env("PATH", path_env)
            .stdout(std::fs::File::create(&out).expect("out"))
            .stderr(std::fs::File::create(&err).expect("err"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start jetsink quickstart");
        Quickstart {
            child: Some(child),
            out,
            err,
        }
    }

    fn output(&self) -> String {
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        format!("{out}\n--- stderr ---\n{err}")
    }

    /// Waits until stdout holds `needle`; fails with the output if it exits first.
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if std::fs::read_to_string(&self.out).is_ok_and(|o| o.contains(needle)) {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "quickstart exited ({status}) before {needle:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} within 90 s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, as Ctrl-C would; the exit code.
    fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn wait_exit(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = c.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        None
    }
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn answers(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn with_no_server_it_starts_one_from_path_fills_the_table_and_stops_it_on_exit() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = quickstart_config(dir.path(), &format!("nats://127.0.0.1:{port}"));
    // Only this directory's nats-server on PATH: the one quickstart must find.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(server_binary(), bin.join("nats-server")).unwrap();
    let path_env = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let mut qs = Quickstart::start(
        dir.path(),
        &["--config", config.to_str().unwrap()],
        &path_env,
    );
    qs.wait_for("committed every message");
    let out = qs.output();
    assert!(
        out.contains(&format!(
            "starting {} with JetStream on 127.0.0.1:{port} (store data/nats-server",
            bin.join("nats-server").display()
        )),
        "{out}"
    );
    assert!(
        out.contains("published 1000 messages of 200 bytes to quickstart.hello"),
        "{out}"
    );
    assert_eq!(
        sqlite_count(&dir.path().join("data/jetsink.db"), "jetsink_events"),
        1000,
        "the quickstart table holds the test messages"
    );
    assert!(
        dir.path().join("data/nats-server/jetstream").is_dir(),
        "the server's store is under data/"
    );
    assert!(answers(port), "the server it started listens");

    assert_eq!(qs.stop(), Some(0), "a clean stop:\n{}", qs.output());
    let out = qs.output();
    assert!(out.contains("stopped the nats-server it started"), "{out}");
    assert!(out.contains("jetsink::daemon: stopped cleanly"), "{out}");
    assert!(!answers(port), "the server stopped with jetsink");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_server_already_there_it_uses_it_and_leaves_it_running() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = quickstart_config(dir.path(), &server.url());
    let path_env = std::env::var_os("PATH").unwrap_or_default();
    let mut qs = Quickstart::start(
        dir.path(),
        &["--config", config.to_str().unwrap(), "--count", "10"],
        &path_env,
    );
    qs.wait_for("committed every message");
    let out = qs.output();
    let url = server.url();
    let trying = out
        .find(&format!(
            "something accepts connections at {url}: trying it"
        ))
        .unwrap_or_else(|| panic!("no trying line:\n{out}"));
    let connected = out
        .find(&format!("connected to the NATS server at {url}"))
        .unwrap_or_else(|| panic!("no connected line:\n{out}"));
    assert!(trying < connected, "{out}");
    assert!(!out.contains("Ctrl-C stops it and"), "{out}");
    assert_eq!(
        sqlite_count(&dir.path().join("data/jetsink.db"), "jetsink_events"),
        10
    );
    assert_eq!(qs.stop(), Some(0), "a clean stop:\n{}", qs.output());
    assert!(
        !dir.path().join("data/nats-server").exists(),
        "no server was started"
    );
    assert_eq!(
        stored(&server.js().await, "QUICKSTART").await,
        10,
        "its server still runs"
    );
}

#[test]
fn a_remote_url_that_does_not_answer_is_not_started_and_exits_69() {
    let dir = tempfile::tempdir().unwrap();
    // TEST-NET-1 (RFC 5737): never routed, so nothing answers there.
    let config = quickstart_config(dir.path(), "nats://192.0.2.1:4222");
    let mut qs = Quickstart::start(
        dir.path(),
        &["--config", config.to_str().unwrap()],
        &std::env::var_os("PATH").unwrap_or_default(),
    );
    assert_eq!(qs.wait_exit(), Some(69), "{}", qs.output());
    assert!(
        qs.output()
            .contains("nothing answers at nats://192.0.2.1:4222, and quickstart starts a NATS server only on this machine"),
        "{}",
        qs.output()
    );
    assert!(!dir.path().join("data").exists(), "nothing was created");
}

/// Something that accepts TCP connections but never speaks NATS (here a listener that
/// never reads): quickstart must not claim a NATS server answers there, and the timeout
/// that ends it names the address.
#[test]
fn a_port_that_accepts_but_is_no_nats_server_is_not_called_one_and_the_error_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("nats://{}", silent.local_addr().expect("addr"));
    let config = quickstart_config(dir.path(), &url);
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("read")).expect("json");
    cfg["nats"]["connect_timeout_ms"] = json!(500);
    std::fs::write(&config, serde_json::to_vec_pretty(&cfg).expect("json")).expect("write");
    let mut qs = Quickstart::start(
        dir.path(),
        &["--config", config.to_str().unwrap()],
        &std::env::var_os("PATH").unwrap_or_default(),
    );
    assert_eq!(qs.wait_exit(), Some(69), "{}", qs.output());
    let out = qs.output();
    assert!(
        out.contains(&format!(
            "something accepts connections at {url}: trying it"
        )),
        "{out}"
    );
    assert!(!out.contains("connected to the NATS server"), "{out}");
    assert!(!out.contains("using the NATS server"), "{out}");
    assert!(
        out.contains(&format!("cannot connect to NATS at {url}")),
        "{out}"
    );
}
