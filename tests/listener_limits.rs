//! Both HTTP listeners (`http`: /metrics and health; `api`: the job API) against clients
//! that open connections and do not finish their requests, against a real daemon: 2,000
//! half-open connections leave an authorised job request and /metrics answering; a request
//! head that does not arrive in time, and a kept-alive connection without a next request,
//! are disconnected; past `max_connections` a connection waits in the kernel's accept
//! queue until a slot frees. Every wait is on observed state (the listener's metrics, the
//! socket's accept queue in /proc/net/tcp, a connection the server closed), bounded only
//! by failure guards.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "listener-t0ken";
/// A failure guard, never an expected duration.
const GUARD: Duration = Duration::from_secs(60);

struct Rig {
    _server: NatsServer,
    _dir: tempfile::TempDir,
    daemon: Daemon,
    api: String,
    http: String,
    client: reqwest::Client,
}

/// A daemon with one job sink (SQLite, results on) and both listeners; `api` and `http`
/// are merged into their sections; `wrapper` runs before jetsink (prlimit).
async fn start(api: Value, http: Value, wrapper: &[&str]) -> Rig {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("api-token"), TOKEN).unwrap();
    let api_listen = format!("127.0.0.1:{}", free_port());
    let http_listen = format!("127.0.0.1:{}", free_port());
    let mut cfg = json!({
        "nats": {"servers": [server.url()], "connect_timeout_ms": 2000},
        "http": {"listen": http_listen},
        "api": {"listen": api_listen, "token_file": "api-token"},
        "sinks": {"worker": {
            "source": {"stream": "JOBS", "subjects": "jobs.run", "consumer": "workers",
                       "create_stream": {"subjects": ["jobs.run"], "retention": "workqueue"}},
            "delivery": {"batch_size": 10, "batch_timeout_ms": 200},
            "destination": {"type": "sqlite", "path": "data/jobs.db", "table": "jobs"},
            "results": {"subject_prefix": "jobs.results", "create_stream": {"name": "RESULTS"}}
        }}
    });
    for (section, extra) in [("api", api), ("http", http)] {
        for (k, v) in extra.as_object().into_iter().flatten() {
            cfg[section][k] = v.clone();
        }
    }
    let path = write_config(dir.path(), &cfg);
    let daemon = Daemon::start_wrapped(&path, dir.path(), "info", wrapper);
    // No kept-alive connections of its own: each request's connection closes after it,
    // so the listeners' connection counts are the test's half-open ones alone.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let rig = Rig {
        _server: server,
        _dir: dir,
        daemon,
        api: api_listen,
        http: http_listen,
        client,
    };
    eventually(GUARD, "both listeners answer", || async {
        rig.probe().await == Some(404)
            && rig
                .metric("jetsink_http_connections{listener=\"api\"}")
                .await
                .is_some()
    })
    .await;
    rig
}

impl Rig {
    /// The status of an authorised GET for a job that does not exist.
    async fn probe(&self) -> Option<u16> {
        let r = self
            .client
            .get(format!("http://{}/v1/sinks/worker/jobs/none", self.api))
            .bearer_auth(TOKEN)
            .send()
            .await
            .ok()?;
        Some(r.status().as_u16())
    }

    /// One series of /metrics, read with a fresh connection.
    async fn metric(&self, series: &str) -> Option<f64> {
        let text = self
            .client
            .get(format!("http://{}/metrics", self.http))
            .header("Connection", "close")
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    async fn wait_metric(&self, series: &str, want: f64) {
        let mut last = None;
        let deadline = std::time::Instant::now() + GUARD;
        loop {
            last = self.metric(series).await.or(last);
            if last == Some(want) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{series} is {last:?}, not {want}:\n{}",
                self.daemon.log_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A connection that sends half a request head and then nothing.
async fn half_open(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"POST /v1/sinks/worker/jobs HTTP/1.1\r\nHost: jetsink\r\n")
        .await
        .expect("half a head");
    s
}

/// Reads until the peer closes the connection; `false` if it has not within the guard.
async fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let until_closed = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(GUARD, until_closed).await.is_ok()
}

/// Lifts this test process's open-file limit to its hard limit, for thousands of sockets.
fn more_files(need: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let l = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: l.maximum,
            maximum: l.maximum,
        },
    );
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(
        now >= need,
        "this test needs {need} open files, the hard limit allows {now}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_half_open_connections_leave_an_authorised_job_and_metrics_answering() {
    more_files(2_500);
    // jetsink starts as a service manager without LimitNOFILE would start it: a soft
    // open-file limit of 1024, below the 2,000 connections, and a higher hard one.
    let rig = start(
        json!({"header_read_timeout_ms": 600000, "idle_timeout_ms": 600000}),
        json!({}),
        &["prlimit", "--nofile=1024:8192", "--"],
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..2_000 {
        held.push(half_open(&rig.api).await);
    }
    rig.wait_metric("jetsink_http_connections{listener=\"api\"}", 2000.0)
        .await;
    let r = rig
        .client
        .post(format!("http://{}/v1/sinks/worker/jobs", rig.api))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", "during-flood")
        .body("{}")
        .send()
        .await
        .expect("an authorised request gets an answer while 2,000 connections are held");
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        (v["id"].as_str(), v["status"].as_str()),
        (Some("during-flood"), Some("committed"))
    );
    let open = rig
        .metric("jetsink_http_connections{listener=\"api\"}")
        .await;
    assert!(
        open.is_some_and(|n| n >= 2000.0),
        "/metrics answers, and the held connections are still held: {open:?}"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_head_that_does_not_arrive_in_time_is_disconnected_on_both_listeners() {
    let quick = json!({"header_read_timeout_ms": 300, "idle_timeout_ms": 300});
    let rig = start(quick.clone(), quick, &[]).await;
    for (listener, addr) in [("api", rig.api.clone()), ("http", rig.http.clone())] {
        let mut s = half_open(&addr).await;
        assert!(
            closed_by_peer(&mut s).await,
            "{listener}: the half-open connection stays open"
        );
        rig.wait_metric(
            &format!(
                "jetsink_http_connection_timeouts_total{{kind=\"header\",listener=\"{listener}\"}}"
            ),
            1.0,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kept_alive_connection_without_a_next_request_is_closed() {
    let rig = start(
        json!({"header_read_timeout_ms": 600000, "idle_timeout_ms": 300}),
        json!({}),
        &[],
    )
    .await;
    let mut s = TcpStream::connect(&rig.api).await.unwrap();
    let head = format!(
        "GET /v1/sinks/worker/jobs/none HTTP/1.1\r\nHost: jetsink\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"not_found\"") {
        let n = tokio::time::timeout(GUARD, s.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert!(
            n > 0,
            "closed before answering: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 404"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        closed_by_peer(&mut s).await,
        "the idle kept-alive connection stays open"
    );
    rig.wait_metric(
        "jetsink_http_connection_timeouts_total{kind=\"idle\",listener=\"api\"}",
        1.0,
    )
    .await;
}

/// The number of connections waiting in the accept queue of the listening socket on
/// `port` (a LISTEN socket's `rx_queue` in /proc/net/tcp), if it is found.
fn accept_queue(port: u16) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
        if local_port != port || *f.get(3)? != "0A" {
            return None;
        }
        u64::from_str_radix(f.get(4)?.split(':').nth(1)?, 16).ok()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn past_max_connections_a_connection_waits_in_the_accept_queue_until_a_slot_frees() {
    let rig = start(
        json!({"max_connections": 2, "header_read_timeout_ms": 600000, "idle_timeout_ms": 600000}),
        json!({}),
        &[],
    )
    .await;
    // The start-up probes used connections; wait until the API holds none.
    rig.wait_metric("jetsink_http_connections{listener=\"api\"}", 0.0)
        .await;
    let accepted = rig
        .metric("jetsink_http_connections_accepted_total{listener=\"api\"}")
        .await
        .unwrap();
    let first = half_open(&rig.api).await;
    let _second = half_open(&rig.api).await;
    rig.wait_metric("jetsink_http_connections{listener=\"api\"}", 2.0)
        .await;
    let mut third = TcpStream::connect(&rig.api).await.unwrap();
    let head = format!(
        "GET /v1/sinks/worker/jobs/none HTTP/1.1\r\nHost: jetsink\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    third.write_all(head.as_bytes()).await.unwrap();
    let port: u16 = rig.api.rsplit(':').next().unwrap().parse().unwrap();
    eventually(
        GUARD,
        "the third connection waits in the accept queue",
        || async { accept_queue(port) == Some(1) },
    )
    .await;
    assert_eq!(
        rig.metric("jetsink_http_connections_accepted_total{listener=\"api\"}")
            .await,
        Some(accepted + 2.0),
        "the third connection was not accepted while both slots are held"
    );
    drop(first);
    let mut answer = String::new();
    tokio::time::timeout(GUARD, third.read_to_string(&mut answer))
        .await
        .expect("the third connection is answered once a slot frees")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    drop(rig.daemon);
}
