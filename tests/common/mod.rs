//! Shared harness for integration tests: a private `nats-server` per test, the `jetsink`
//! binary as a child process, and small readers of what landed where.
//!
//! Every guard kills its process and removes its files on `Drop`, so a failing test
//! leaves nothing running.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream;

pub mod audit;
pub mod cluster;
pub mod conformance;
pub mod database;
pub mod fault_matrix;
pub mod moto;
pub mod mysql_tls;
pub mod pg;
pub mod pg_tls;
pub mod pki;
pub mod state_tables;

/// Finds a free loopback port, never the same one twice in a test binary. The port is
/// free when this returns, not reserved: the kernel picks ports for `bind(0)` at random, so
/// without the record two tests running at once got the same port now and then (1 in about
/// 14,000 pairs), and one test's daemon or server then failed to listen, or talked to the
/// other test's server.
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = l.local_addr().expect("local addr").port();
        let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if handed_out.insert(port) {
            return port;
        }
    }
}

/// The server binary the tests run: `JETSINK_TEST_NATS_SERVER` when set (CI runs the suite
/// once with the Debian 2.9 server and once with upstream 2.14), else the one on `PATH`.
pub fn nats_server_binary() -> String {
    if let Ok(path) = std::env::var("JETSINK_TEST_NATS_SERVER") {
        if !path.is_empty() {
            return path;
        }
    }
    for candidate in [
        "nats-server",
        "/usr/sbin/nats-server",
        "/usr/bin/nats-server",
    ] {
        if Command::new(candidate)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
        {
            return candidate.to_string();
        }
    }
    panic!("nats-server is not installed: run `apt-get install -y nats-server` (the tests start their own server on a free port)");
}

/// The version of the server binary the tests run, from `nats-server --version`
/// (`nats-server: v2.14.0` → `(2, 14, 0)`), or `None` when it cannot be read.
pub fn nats_server_version() -> Option<(u32, u32, u32)> {
    let out = Command::new(nats_server_binary())
        .arg("--version")
        .output()
        .ok()?;
    parse_server_version(&String::from_utf8_lossy(&out.stdout))
}

/// `(major, minor, patch)` from the text `nats-server --version` prints.
pub fn parse_server_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.trim().rsplit(' ').next()?.trim_start_matches('v');
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .map(str::parse::<u32>);
    Some((
        parts.next()?.ok()?,
        parts.next()?.ok()?,
        parts.next()?.ok()?,
    ))
}

/// A private JetStream server on a free port with its own store directory.
pub struct NatsServer {
    pub port: u16,
    store: tempfile::TempDir,
    /// Extra configuration, written to `server.conf` in the store directory and passed
    /// with `-c`; the port, host and store directory still come from the command line.
    config: Option<String>,
    child: Option<Child>,
}

impl NatsServer {
    pub fn start() -> NatsServer {
        NatsServer::start_with_config(None)
    }

    /// Starts a server that also reads `config` (nats-server configuration syntax), for
    /// settings with no command-line flag, such as `feature_flags { js_ack_fc_v2: true }`.
    pub fn start_with_config(config: Option<&str>) -> NatsServer {
        let mut s = NatsServer {
            port: free_port(),
            store: tempfile::tempdir().expect("temp store dir"),
            config: config.map(str::to_string),
            child: None,
        };
        s.spawn();
        s
    }

    /// The server's log (stderr), for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.store.path().join("server.log")).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.store.path().join("server.log")).expect("server log");
        let mut cmd = Command::new(nats_server_binary());
        if let Some(config) = &self.config {
            let path = self.store.path().join("server.conf");
            std::fs::write(&path, config).expect("write server config");
            cmd.arg("-c").arg(path);
        }
        let child = cmd
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path().join("js"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start nats-server");
        self.child = Some(child);
        // Ready once *this* server says it listens: something else answering on the port
        // (another test's server, after a port clash) must not pass for it.
        let deadline = Instant::now() + Duration::from_secs(30);
        let listening = format!(
            "Listening for client connections on 127.0.0.1:{}",
            self.port
        );
        while !self.log_text().contains(&listening) {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "nats-server on port {} exited at start ({status}):\n{}",
                    self.port,
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "nats-server did not start on port {}:\n{}",
                self.port,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILLs the server (the store stays).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url())
            .await
            .expect("connect to test nats-server")
    }

    pub async fn js(&self) -> jetstream::Context {
        jetstream::new(self.client().await)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `jetsink run` child process with its log captured to a file.
pub struct Daemon {
    child: Option<Child>,
    pub log: PathBuf,
}

pub fn jetsink_bin() -> &'static str {
    env!("CARGO_BIN_EXE_jetsink")
}

impl Daemon {
    pub fn start(config: &Path, dir: &Path) -> Daemon {
        Daemon::start_with_log(config, dir, "info")
    }

    /// Like [`Daemon::start`] with `RUST_LOG` set to `rust_log` instead of `info`.
    pub fn start_with_log(config: &Path, dir: &Path, rust_log: &str) -> Daemon {
        Daemon::start_wrapped(config, dir, rust_log, &[])
    }

    /// Like [`Daemon::start_with_log`], run through `wrapper` (a program and its arguments
    /// that then exec jetsink, such as `prlimit --nofile=1024:8192 --`).
    pub fn start_wrapped(config: &Path, dir: &Path, rust_log: &str, wrapper: &[&str]) -> Daemon {
        Daemon::spawn(config, dir, rust_log, wrapper, &[])
    }

    /// Like [`Daemon::start`] with more flags of `jetsink run` (`--fail-fast`,
    /// `--watch-config`).
    pub fn start_with_flags(config: &Path, dir: &Path, flags: &[&str]) -> Daemon {
        Daemon::spawn(config, dir, "info", &[], flags)
    }

    fn spawn(
        config: &Path,
        dir: &Path,
        rust_log: &str,
        wrapper: &[&str],
        flags: &[&str],
    ) -> Daemon {
        let log = dir.join(format!(
            "jetsink-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let err = std::fs::File::create(&log).expect("daemon log");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(jetsink_bin());
                c
            }
            None => Command::new(jetsink_bin()),
        };
        let child = cmd
            .args(["run", "--config"])
            .arg(config)
            .args(flags)
            .current_dir(dir)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start jetsink");
        Daemon {
            child: Some(child),
            log,
        }
    }

    /// Sends SIGHUP (a config reload).
    pub fn hangup(&self) {
        let _ = Command::new("kill")
            .args(["-HUP", &self.pid().to_string()])
            .status();
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGKILL: no chance to ACK or flush anything.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, and fails the test with the daemon's log unless it exits 0 within 15 s: the
    /// clean shutdown most tests end with.
    pub fn stop_cleanly(&mut self) {
        let status = self.terminate(Duration::from_secs(15));
        assert!(
            status.is_some_and(|s| s.success()),
            "jetsink did not stop cleanly on SIGTERM ({status:?}):\n{}",
            self.log_text()
        ); // Connections jetsink closes itself at shutdown (the sources' and a republish
           // target's) are expected closes, never a client that gave up.
        let log = self.log_text();
        assert!(
            !log.contains("closed for good"),
            "a clean stop reported a connection closed for good:\n{log}"
        );
    }

    /// SIGTERM, then waits up to `within` for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let c = self.child.as_mut()?;
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The exit status, if the process has exited (without waiting for it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits until this daemon's log contains `needle` (for example "sink running"),
    /// failing with its log if it exits first or `within` passes.
    pub async fn wait_for_log(&mut self, within: Duration, needle: &str) {
        let log = self.log.clone();
        self.eventually(within, &format!("{needle:?} in the log"), || {
            let log = log.clone();
            async move { std::fs::read_to_string(&log).is_ok_and(|t| t.contains(needle)) }
        })
        .await;
    }

    /// [`eventually`] for a state this daemon must reach: fails at once, with its exit
    /// status and log, if it exits meanwhile, and with its log if `within` passes, so a
    /// failure says what the daemon did instead of only what was awaited.
    pub async fn eventually<F, Fut>(&mut self, within: Duration, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = Instant::now() + within;
        loop {
            if check().await {
                return;
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "jetsink exited ({status}) while waiting for: {what}\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: {what}\njetsink's log:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `jetsink` with arguments to completion: (exit code, stdout, stderr).
pub fn jetsink(args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = Command::new(jetsink_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run jetsink");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Like [`jetsink`], but the command is killed if it has not exited within `within` (a
/// failure guard for a command that would hang, such as one reading a FIFO): `None` then.
/// Output goes through files, so a command printing a lot cannot block on a full pipe.
pub fn jetsink_within(
    args: &[&str],
    dir: &Path,
    within: Duration,
) -> Option<(i32, String, String)> {
    let out_path = dir.join(".jetsink-within.out");
    let err_path = dir.join(".jetsink-within.err");
    let mut child = Command::new(jetsink_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("run jetsink");
    let deadline = Instant::now() + within;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    status.map(|s| (s.code().unwrap_or(-1), read(&out_path), read(&err_path)))
}

/// The server's view of a consumer now: what the tests wait on and assert against.
pub async fn consumer_info(
    js: &jetstream::Context,
    stream: &str,
    consumer: &str,
) -> jetstream::consumer::Info {
    let s = js.get_stream(stream).await.expect("stream");
    s.consumer_info(consumer).await.expect("consumer info")
}

/// What the consumer has delivered so far: (last consumer sequence, redelivered count).
pub async fn delivered_so_far(js: &jetstream::Context, stream: &str) -> (u64, usize) {
    let info = consumer_info(js, stream, "jetsink").await;
    (info.delivered.consumer_sequence, info.num_redelivered)
}

/// Proves that a failing destination holds its batch: once the daemon logs the failure,
/// 6 s (three AckWaits of the 2 s the outage tests configure) pass without a new delivery or
/// a redelivery, the held messages stay ack-pending, and the `unacked` messages published
/// during the outage are all still pending or held (none ACKed).
pub async fn assert_batch_held(
    js: &jetstream::Context,
    daemon: &Daemon,
    stream: &str,
    unacked: usize,
) {
    eventually(Duration::from_secs(10), "the failure is logged", || async {
        daemon
            .log_text()
            .contains("destination failed; holding the batch")
    })
    .await;
    // The runner may have pulled the next batch ahead while the failing write ran: let
    // that settle before taking the snapshot.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = delivered_so_far(js, stream).await;
    let (_, held) = consumer_state(js, stream, "jetsink").await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        before,
        delivered_so_far(js, stream).await,
        "no new deliveries or redeliveries while the destination fails\n{}",
        daemon.log_text()
    );
    let (pending, ack_pending) = consumer_state(js, stream, "jetsink").await;
    assert_eq!(
        ack_pending, held,
        "the held batch is neither ACKed nor released"
    );
    assert_eq!(
        pending as usize + ack_pending,
        unacked,
        "nothing was ACKed while failing"
    );
}

/// Runs `jetsink bench --config … --sink main` for `messages` messages into `destination`
/// and returns its report; fails the test unless it exits 0.
pub fn bench_configured_sink(
    server: &NatsServer,
    dir: &Path,
    destination: serde_json::Value,
    messages: u64,
) -> String {
    let cfg = config(
        server,
        "BENCH_CFG",
        "bench-cfg.>",
        destination,
        serde_json::json!({"batch_size": 100}),
    );
    let path = write_config(dir, &cfg);
    let count = messages.to_string();
    let path = path.to_string_lossy().into_owned();
    // No --server: the bench connects with the config's own `nats` section.
    let args = [
        "bench",
        "--config",
        &path,
        "--sink",
        "main",
        "--messages",
        &count,
        "--runs",
        "1",
    ];
    let (code, out, err) = jetsink(&args, dir);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(" x 200 B, batch 100, "),
        "the report names the sink's own batch size, not the flag's default:\n{out}"
    );
    out
}

/// A multi-sink config for one sink reading `stream`/`subjects` into `destination`.
pub fn config(
    server: &NatsServer,
    stream: &str,
    subject: &str,
    destination: serde_json::Value,
    delivery: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": format!("127.0.0.1:{}", free_port())},
        "logging": {"level": "info"},
        "sinks": {"main": {
            "source": {
                "stream": stream,
                "subjects": subject,
                "consumer": "jetsink",
                "ack_wait_ms": 5000,
                "create_stream": {"subjects": [subject]}
            },
            "delivery": delivery,
            "destination": destination
        }}
    })
}

pub fn write_config(dir: &Path, value: &serde_json::Value) -> PathBuf {
    let path = dir.join("jetsink.json");
    std::fs::write(&path, serde_json::to_vec_pretty(value).expect("json")).expect("write config");
    path
}

/// Starts `jetsink run` on `cfg` in `dir`, expects it to exit with `code` during
/// start-up, and returns its log. For 69 it runs with `--fail-fast`: without it, a
/// destination that cannot be opened for a reason that may pass is waited for.
pub fn refused_at_start(dir: &Path, cfg: &serde_json::Value, code: i32) -> String {
    let flags: &[&str] = if code == 69 { &["--fail-fast"] } else { &[] };
    let mut daemon = Daemon::start_with_flags(&write_config(dir, cfg), dir, flags);
    let status = daemon.wait_exit(Duration::from_secs(30));
    let log = daemon.log_text();
    assert_eq!(status.and_then(|s| s.code()), Some(code), "{log}");
    log
}

/// Creates a file-storage stream capturing `subject`.
pub async fn create_stream(js: &jetstream::Context, name: &str, subject: &str) {
    js.get_or_create_stream(jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        ..Default::default()
    })
    .await
    .expect("create stream");
}

/// Publishes `count` JSON messages `{"i": n}` on `subject.n`-style subjects, awaiting acks.
///
/// A publish answered "no responders" stored nothing and is sent again: in a cluster, a
/// node that has just restarted (or a stream just created) may not yet know which node
/// takes the stream's subjects, and the test is about the sink, not about that window.
pub async fn publish_n(js: &jetstream::Context, subject: &str, count: usize) {
    let mut acks = Vec::with_capacity(256);
    for i in 0..count {
        let ack = js
            .publish(subject.to_string(), numbered(i))
            .await
            .expect("publish");
        acks.push((i, ack));
        if acks.len() == 256 {
            settle_acks(js, subject, acks.drain(..)).await;
        }
    }
    settle_acks(js, subject, acks.drain(..)).await;
}

/// The payload of message `i` of [`publish_n`].
fn numbered(i: usize) -> bytes::Bytes {
    format!("{{\"i\":{i}}}").into()
}

/// Awaits each publish's ack, sending a message answered "no responders" again.
async fn settle_acks(
    js: &jetstream::Context,
    subject: &str,
    acks: impl Iterator<Item = (usize, jetstream::context::PublishAckFuture)>,
) {
    use jetstream::context::PublishErrorKind;
    for (i, ack) in acks {
        let mut answer = ack.await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while matches!(&answer, Err(e) if e.kind() == PublishErrorKind::StreamNotFound)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            answer = match js.publish(subject.to_string(), numbered(i)).await {
                Ok(again) => again.await,
                Err(e) => panic!("publish: {e}"),
            };
        }
        answer.expect("puback");
    }
}

/// (num_pending, num_ack_pending) of a consumer.
pub async fn consumer_state(js: &jetstream::Context, stream: &str, consumer: &str) -> (u64, usize) {
    let info = consumer_info(js, stream, consumer).await;
    (info.num_pending, info.num_ack_pending)
}

/// Messages `stream` holds now (0 while it does not exist): what a target stream stored.
pub async fn stored(js: &jetstream::Context, stream: &str) -> u64 {
    match js.get_stream(stream).await {
        Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
        Err(_) => 0,
    }
}

/// Publishes a job to `jobs.run` (as the job tests configure it) with `id` as its
/// `Nats-Msg-Id`, and waits for the PubAck.
pub async fn publish_job(js: &jetstream::Context, id: &str, payload: &str) {
    let mut h = async_nats::HeaderMap::new();
    h.insert("Nats-Msg-Id", id);
    js.publish_with_headers("jobs.run", h, payload.to_string().into())
        .await
        .expect("publish")
        .await
        .expect("puback");
}

/// The job tests' work stream, `JOBS` on `jobs.run` with work-queue retention, made before
/// any jetsink runs so a job can be queued first.
pub async fn create_jobs_stream(js: &jetstream::Context) {
    js.create_stream(jetstream::stream::Config {
        name: "JOBS".into(),
        subjects: vec!["jobs.run".into()],
        retention: jetstream::stream::RetentionPolicy::WorkQueue,
        ..Default::default()
    })
    .await
    .expect("create the JOBS stream");
}

/// The job tests' results stream, `RESULTS` on `jobs.results.>`, kept five minutes.
pub async fn create_results_stream(js: &jetstream::Context) {
    js.create_stream(jetstream::stream::Config {
        name: "RESULTS".into(),
        subjects: vec!["jobs.results.>".into()],
        max_age: Duration::from_secs(300),
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .expect("create the RESULTS stream");
}

/// The result document stored for job `id` in the `RESULTS` stream (subject
/// `jobs.results.<id>`), as the job tests configure it.
pub async fn stored_result(js: &jetstream::Context, id: &str) -> Option<serde_json::Value> {
    let s = js.get_stream("RESULTS").await.ok()?;
    let m = s
        .get_last_raw_message_by_subject(&format!("jobs.results.{id}"))
        .await
        .ok()?;
    serde_json::from_slice(&m.payload).ok()
}

/// A target stream for the `nats` destination, with a duplicate window far longer than
/// any test (a copy published twice is stored once); `tune` sets what a test needs besides.
pub async fn create_target_stream(
    js: &jetstream::Context,
    name: &str,
    subject: &str,
    tune: impl FnOnce(&mut jetstream::stream::Config),
) {
    let mut config = jetstream::stream::Config {
        name: name.to_string(),
        subjects: vec![subject.to_string()],
        duplicate_window: Duration::from_secs(600),
        ..Default::default()
    };
    tune(&mut config);
    js.create_stream(config)
        .await
        .expect("create target stream");
}

/// The first `n` messages of `stream`, in order, read with an ordered consumer.
pub async fn read_ordered(
    js: &jetstream::Context,
    stream: &str,
    n: usize,
) -> Vec<jetstream::Message> {
    use futures::StreamExt;
    let s = js.get_stream(stream).await.expect("target stream");
    let consumer = s
        .create_consumer(jetstream::consumer::pull::OrderedConfig::default())
        .await
        .expect("ordered consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let next = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .expect("message within 10 s");
        out.push(next.expect("stream open").expect("message"));
    }
    out
}

/// The value of header `name` of a delivered message.
pub fn header_value(m: &jetstream::Message, name: &str) -> Option<String> {
    m.headers
        .as_ref()
        .and_then(|h| h.get(name))
        .map(|v| v.as_str().to_string())
}

/// Whether consumer `jetsink` of `stream` exists and has nothing pending or unacknowledged.
pub async fn drained(js: &jetstream::Context, stream: &str) -> bool {
    let Ok(s) = js.get_stream(stream).await else {
        return false;
    };
    // Something delivered, too: a consumer that has been given nothing yet also shows
    // 0 pending and 0 unacknowledged (2.14 answered so right after jetsink created it,
    // before its pending count was known), which is not a drain.
    s.consumer_info("jetsink").await.is_ok_and(|i| {
        i.num_pending == 0 && i.num_ack_pending == 0 && i.delivered.stream_sequence > 0
    })
}

/// Polls `check` until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every message of `stream` whose subject matches `filter`, in stream order (empty while
/// the stream does not exist): what a dead-letter or target stream holds.
pub async fn stream_messages(
    js: &async_nats::jetstream::Context,
    stream: &str,
    filter: &str,
) -> Vec<async_nats::jetstream::message::StreamMessage> {
    let Ok(stream) = js.get_stream(stream).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seq = 1;
    while let Ok(m) = stream
        .raw_message_builder()
        .sequence(seq)
        .next_by_subject(filter.to_string())
        .send()
        .await
    {
        seq = m.sequence + 1;
        out.push(m);
    }
    out
}

/// A daemon whose one SQLite sink `db` (consumer `to-db`, batch 50) has written a first
/// message of `stream` and is then blocked: another connection holds the database's write
/// lock (`BEGIN IMMEDIATE`) and `rest` more messages are published behind it. For tests of
/// what a held sink does meanwhile; the lock lasts as long as the returned connection's
/// transaction.
pub struct BlockedSqliteSink {
    pub daemon: Daemon,
    pub db: PathBuf,
    pub listen: String,
    pub blocker: rusqlite::Connection,
}

pub async fn blocked_sqlite_sink(
    js: &async_nats::jetstream::Context,
    server_url: &str,
    dir: &Path,
    stream: &str,
    subject: &str,
    consumer: serde_json::Value,
    rest: usize,
) -> BlockedSqliteSink {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut source = serde_json::json!({"stream": stream, "consumer": "to-db"});
    // Consumer settings (`ack_wait_ms`, `backoff_ms`, ...) on top.
    if let Some(extra) = consumer.as_object() {
        for (k, v) in extra {
            source[k] = v.clone();
        }
    }
    let cfg = serde_json::json!({
        "nats": {"servers": [server_url]},
        "http": {"listen": listen},
        "sinks": {
            "db": {
                "source": source,
                "delivery": {"batch_size": 50, "batch_timeout_ms": 200},
                "destination": {
                    "type": "sqlite", "path": "data/held.db", "table": "events",
                    "busy_timeout_ms": 600000
                }
            }
        }
    });
    let path = write_config(dir, &cfg);
    let db = dir.join("data/held.db");
    let daemon = Daemon::start(&path, dir);
    publish_n(js, subject, 1).await;
    eventually(Duration::from_secs(30), "the first row", || async {
        sqlite_count(&db, "events") == 1
    })
    .await;
    let blocker = rusqlite::Connection::open(&db).expect("open the database to lock it");
    blocker
        .execute_batch("BEGIN IMMEDIATE")
        .expect("take the write lock");
    publish_n(js, subject, rest).await;
    BlockedSqliteSink {
        daemon,
        db,
        listen,
        blocker,
    }
}

/// Rows in a SQLite table (0 while the file does not exist or is locked).
pub fn sqlite_count(path: &Path, table: &str) -> u64 {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return 0;
    };
    let _ = conn.busy_timeout(Duration::from_secs(2));
    conn.query_row(&format!("SELECT COUNT(*) FROM \"{table}\""), [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n as u64)
    .unwrap_or(0)
}

/// Every JSON line of every `.jsonl` file in `dir`, in file-name order.
pub fn jsonl_lines(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().map(|e| e == "jsonl").unwrap_or(false));
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str(line) {
                out.push(v);
            }
        }
    }
    out
}

/// Distinct idempotency keys among JSON lines.
pub fn distinct_keys(lines: &[serde_json::Value]) -> std::collections::HashSet<String> {
    lines
        .iter()
        .filter_map(|v| v["idempotency_key"].as_str().map(str::to_string))
        .collect()
}

/// Publishes `count` messages `{"i": n}` at about `per_sec` messages per second in the
/// background, so a test can act on the daemon while messages are still arriving.
pub fn publish_paced(
    js: &jetstream::Context,
    subject: &str,
    count: usize,
    per_sec: u64,
) -> tokio::task::JoinHandle<()> {
    let js = js.clone();
    let subject = subject.to_string();
    tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        for i in 0..count {
            let due = started + Duration::from_secs_f64(i as f64 / per_sec as f64);
            tokio::time::sleep_until(due).await;
            js.publish(subject.clone(), format!("{{\"i\":{i}}}").into())
                .await
                .expect("publish")
                .await
                .expect("puback");
        }
    })
}

/// The value of the sample line starting with `series` (name and labels) on a running
/// daemon's `/metrics`, or `None` when the endpoint or the series is not there.
pub async fn metric_value(listen: &str, series: &str) -> Option<f64> {
    let (status, text) = http(reqwest::Method::GET, &format!("http://{listen}/metrics")).await?;
    if status != 200 {
        return None;
    }
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The status and body of one plain-HTTP request to `url` (a daemon's endpoint, moto), or
/// `None` when nothing answered within 5 s.
pub async fn http(method: reqwest::Method, url: &str) -> Option<(u16, String)> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .tls_built_in_root_certs(false)
        .build()
        .ok()?;
    let response = client.request(method, url).send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

/// [`http`] for code that is not async (a guard's constructor or `Drop`): on a runtime and
/// a thread of its own, so it works inside a test's runtime too.
pub fn http_blocking(method: reqwest::Method, url: &str) -> Option<(u16, String)> {
    let url = url.to_string();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?
            .block_on(http(method, &url))
    })
    .join()
    .ok()
    .flatten()
}

/// The sink's table `events` (jetsink's default layout), made up front with a trigger that
/// refuses payloads containing `POISON`: a destination that refuses one message.
pub fn poison_table(db: &Path) {
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch(
        "CREATE TABLE events (idempotency_key TEXT PRIMARY KEY NOT NULL, stream TEXT NOT NULL,
           stream_sequence INTEGER NOT NULL, consumer_sequence INTEGER NOT NULL,
           subject TEXT NOT NULL, delivered INTEGER NOT NULL, published_at TEXT NOT NULL,
           written_at TEXT NOT NULL, message_id TEXT, headers TEXT NOT NULL, priority TEXT,
           lane TEXT, classification TEXT, labels TEXT NOT NULL DEFAULT '[]',
           payload BLOB NOT NULL);
         CREATE TRIGGER refuse_poison BEFORE INSERT ON events
           WHEN instr(CAST(NEW.payload AS TEXT), 'POISON') > 0
           BEGIN SELECT RAISE(ABORT, 'poison payload refused'); END;",
    )
    .unwrap();
}

/// The Python of the independent readers and receivers (pyarrow, DuckDB,
/// opentelemetry-proto): `JETSINK_TEST_PYTHON`, else `.ci/venv/bin/python` (where
/// `.ci/run` installs them), else `python3` on PATH.
pub fn test_python() -> PathBuf {
    if let Ok(p) = std::env::var("JETSINK_TEST_PYTHON") {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}
