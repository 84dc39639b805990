//! The `http` destination against a real HTTP receiver started by the test (axum, in this
//! process, on a free port). While its faults are on, the receiver answers in a cycle:
//! 500, 429 with `Retry-After`, a hang longer than the request timeout, and a 200 that
//! closes the connection, besides plain 200s, and drops every third connection it accepts
//! without answering; it refuses one specific message with 400 whatever the cycle says.
//! It deduplicates on the idempotency key the way a real receiver would, so "every message
//! accepted exactly once" is the count of distinct keys it accepted.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use common::*;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

/// Requests answered with faults in the cycle before the receiver settles on 200s, so every
/// test ends; enough for each fault to happen several times.
const FAULTY_REQUESTS: usize = 90;

/// The receiver's state: what it accepted and how it answered.
#[derive(Default)]
struct Receiver {
    /// Distinct idempotency keys of the records accepted (the receiver's dedupe).
    keys: Mutex<HashSet<String>>,
    /// Records accepted, duplicates included.
    accepted_records: AtomicUsize,
    /// Requests seen by the handler.
    requests: AtomicUsize,
    /// Answers given, by kind.
    answers: Mutex<HashMap<&'static str, usize>>,
    /// Cycle through the faults for the first [`FAULTY_REQUESTS`] requests.
    faults: AtomicBool,
    /// Answer every request with 500.
    fail_all: AtomicBool,
    /// Requests without the expected secret and static headers.
    unauthorized: AtomicUsize,
    /// Requests whose idempotency header did not match their records.
    wrong_keys: AtomicUsize,
}

impl Receiver {
    fn count(&self, kind: &'static str) {
        *self.answers.lock().unwrap().entry(kind).or_default() += 1;
    }
    fn answered(&self, kind: &str) -> usize {
        self.answers.lock().unwrap().get(kind).copied().unwrap_or(0)
    }
    fn distinct(&self) -> HashSet<String> {
        self.keys.lock().unwrap().clone()
    }
    fn faulty(&self) -> bool {
        self.faults.load(Ordering::SeqCst) && self.requests.load(Ordering::SeqCst) < FAULTY_REQUESTS
    }
}

/// Accepts connections, dropping every third one unanswered while the faults are on.
struct Flaky {
    inner: TcpListener,
    accepted: usize,
    receiver: Arc<Receiver>,
}

impl axum::serve::Listener for Flaky {
    type Io = TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (TcpStream, SocketAddr) {
        loop {
            let Ok((stream, addr)) = self.inner.accept().await else {
                continue;
            };
            self.accepted += 1;
            if self.receiver.faulty() && self.accepted.is_multiple_of(3) {
                self.receiver.count("dropped connection");
                drop(stream);
                continue;
            }
            return (stream, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// The records of a request body: one object, a JSON array, or JSON lines.
fn records(headers: &HeaderMap, body: &[u8]) -> Vec<serde_json::Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ct == "application/x-ndjson" {
        return body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("ndjson line"))
            .collect();
    }
    match serde_json::from_slice(body).expect("json body") {
        serde_json::Value::Array(a) => a,
        one => vec![one],
    }
}

/// The key a batch request must carry: `<stream>:<lowest>-<highest>:<count>`.
fn expected_key(records: &[serde_json::Value]) -> String {
    let seqs: Vec<u64> = records
        .iter()
        .map(|r| r["stream_sequence"].as_u64().unwrap())
        .collect();
    format!(
        "{}:{}-{}:{}",
        records[0]["stream"].as_str().unwrap(),
        seqs.iter().min().unwrap(),
        seqs.iter().max().unwrap(),
        seqs.len()
    )
}

async fn ingest(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> Response {
    let n = r.requests.fetch_add(1, Ordering::SeqCst);
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    if h("authorization") != "Bearer s3cr3t-token" || h("x-tenant") != "t1" {
        r.unauthorized.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let recs = records(&headers, &body);
    let key = h("idempotency-key").to_string();
    let ok_key = if headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == "application/json")
        && !body.starts_with(b"[")
    {
        recs[0]["idempotency_key"].as_str() == Some(key.as_str())
    } else {
        key == expected_key(&recs)
    };
    if !ok_key {
        r.wrong_keys.fetch_add(1, Ordering::SeqCst);
    }
    if r.fail_all.load(Ordering::SeqCst) {
        r.count("500");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    if recs.iter().any(|x| x["payload"]["poison"] == json!(true)) {
        r.count("400");
        return StatusCode::BAD_REQUEST.into_response();
    }
    if r.faults.load(Ordering::SeqCst) && n < FAULTY_REQUESTS {
        match n % 6 {
            1 => {
                r.count("500");
                return (
                    [(header::CONNECTION, "close")],
                    StatusCode::INTERNAL_SERVER_ERROR,
                )
                    .into_response();
            }
            2 => {
                r.count("429");
                return ([(header::RETRY_AFTER, "1")], StatusCode::TOO_MANY_REQUESTS)
                    .into_response();
            }
            3 => {
                r.count("hang");
                // Never answers: the client's request timeout ends it, not a clock here.
                return std::future::pending::<Response>().await;
            }
            4 => {
                accept(&r, &recs);
                r.count("200 close");
                return ([(header::CONNECTION, "close")], StatusCode::OK).into_response();
            }
            _ => {}
        }
    }
    accept(&r, &recs);
    r.count("200");
    StatusCode::OK.into_response()
}

fn accept(r: &Receiver, recs: &[serde_json::Value]) {
    let mut keys = r.keys.lock().unwrap();
    for rec in recs {
        keys.insert(rec["idempotency_key"].as_str().unwrap().to_string());
        r.accepted_records.fetch_add(1, Ordering::SeqCst);
    }
}

/// Starts the receiver on a free loopback port; it runs until the test's runtime ends.
async fn start_receiver() -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver::default());
    let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ingest", inner.local_addr().unwrap());
    let app = Router::new()
        .route("/ingest", axum::routing::post(ingest))
        .with_state(receiver.clone());
    let listener = Flaky {
        inner,
        accepted: 0,
        receiver: receiver.clone(),
    };
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (receiver, url)
}

fn sink_config(
    server: &NatsServer,
    stream: &str,
    url: &str,
    mode: &str,
    batch_size: u64,
) -> serde_json::Value {
    let subject = format!("{}.>", stream.to_lowercase());
    let mut cfg = config(
        server,
        stream,
        &subject,
        json!({
            "type": "http", "url": url, "allow_insecure_http": true,
            "mode": mode, "concurrency": 8,
            "headers": {"X-Tenant": "t1"},
            "secret_headers": {"Authorization": {"file": "token"}},
            "connect_timeout_ms": 500, "request_timeout_ms": 1000,
            "retry_after_max_ms": 300
        }),
        json!({"batch_size": batch_size, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 20, "max_backoff_ms": 200}}),
    );
    cfg["sinks"]["main"]["dead_letter"] = json!({
        "subject": "dlq.{sink}.{subject}",
        "create_stream": {"name": "DLQ"}
    });
    cfg
}

/// Publishes `n` messages `{"i": n}`, the one at `poison_at` marked `"poison": true`.
async fn publish_with_poison(js: &jetstream::Context, subject: &str, n: usize, poison_at: usize) {
    for i in 0..n {
        let body = if i == poison_at {
            format!("{{\"i\":{i},\"poison\":true}}")
        } else {
            format!("{{\"i\":{i}}}")
        };
        js.publish(subject.to_string(), body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// Original sequences of the dead-letter copies.
async fn dead_lettered(js: &jetstream::Context) -> Vec<String> {
    stream_messages(js, "DLQ", "dlq.>")
        .await
        .into_iter()
        .map(|m| {
            m.headers
                .get("Jetsink-Original-Sequence")
                .map(|v| v.as_str().to_string())
                .unwrap_or_default()
        })
        .collect()
}

/// Runs `n` messages (one poison) through a faulty receiver in `mode` and checks the
/// outcome: every good message accepted once by key, the poison dead-lettered, all ACKed.
async fn through_faults(stream: &str, mode: &str, n: usize, batch_size: u64) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "Bearer s3cr3t-token\n").unwrap();
    let js = server.js().await;
    let subject = format!("{}.orders", stream.to_lowercase());
    create_stream(&js, stream, &format!("{}.>", stream.to_lowercase())).await;
    let poison_at = n / 3;
    publish_with_poison(&js, &subject, n, poison_at).await;
    let (receiver, url) = start_receiver().await;
    receiver.faults.store(true, Ordering::SeqCst);
    let cfg = sink_config(&server, stream, &url, mode, batch_size);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());

    eventually(Duration::from_secs(50), "every message settled", || async {
        drained(&js, stream).await
    })
    .await;
    let keys = receiver.distinct();
    let expected: HashSet<String> = (1..=n as u64)
        .filter(|s| *s != poison_at as u64 + 1)
        .map(|s| format!("{stream}:{s}"))
        .collect();
    assert_eq!(keys.len(), n - 1, "{}", d.log_text());
    assert_eq!(
        keys, expected,
        "every good message accepted, the poison never"
    );
    assert_eq!(
        dead_lettered(&js).await,
        vec![(poison_at + 1).to_string()],
        "only the 400 one is dead-lettered"
    );
    for kind in [
        "200",
        "400",
        "500",
        "429",
        "hang",
        "200 close",
        "dropped connection",
    ] {
        assert!(
            receiver.answered(kind) > 0,
            "the receiver answered {kind} at least once: {:?}",
            receiver.answers.lock().unwrap()
        );
    }
    assert_eq!(
        receiver.unauthorized.load(Ordering::SeqCst),
        0,
        "headers sent"
    );
    assert_eq!(
        receiver.wrong_keys.load(Ordering::SeqCst),
        0,
        "idempotency keys"
    );
    d.stop_cleanly();
    assert!(
        !d.log_text().contains("s3cr3t-token"),
        "the secret header is never logged"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn per_message_mode_accepts_each_message_once_through_faults_and_dead_letters_the_400() {
    through_faults("HTTPM", "message", 200, 40).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn batch_mode_splits_around_the_400_and_accepts_the_rest_once_through_faults() {
    through_faults("HTTPB", "batch", 300, 50).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_acked_before_the_endpoint_answers_2xx() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "Bearer s3cr3t-token").unwrap();
    let js = server.js().await;
    create_stream(&js, "HTTPA", "httpa.>").await;
    publish_n(&js, "httpa.orders", 20).await;
    let (receiver, url) = start_receiver().await;
    receiver.fail_all.store(true, Ordering::SeqCst);
    let cfg = sink_config(&server, "HTTPA", &url, "batch", 10);
    let mut d = Daemon::start(&write_config(dir.path(), &cfg), dir.path());

    eventually(
        Duration::from_secs(20),
        "three refused attempts",
        || async { receiver.answered("500") >= 3 },
    )
    .await;
    let info = common::consumer_info(&js, "HTTPA", "jetsink").await;
    assert!(info.num_ack_pending > 0, "the batch is held, not released");
    assert_eq!(info.ack_floor.stream_sequence, 0, "nothing ACKed while 500");
    assert!(receiver.distinct().is_empty());

    receiver.fail_all.store(false, Ordering::SeqCst);
    eventually(Duration::from_secs(20), "everything acked", || async {
        consumer_state(&js, "HTTPA", "jetsink").await == (0, 0)
    })
    .await;
    assert_eq!(receiver.distinct().len(), 20);
    assert!(
        dead_lettered(&js).await.is_empty(),
        "a 500 dead-letters nothing"
    );
    d.stop_cleanly();
}
