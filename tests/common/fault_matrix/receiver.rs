//! The HTTP endpoint of the fault matrix's `http` sink: in this process, on a free port,
//! counting every record it accepts (repeats included) and checking the idempotency key
//! header of every request; while told to, it answers 503 (an outage of the receiver).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Router;
use tokio::net::TcpListener;

use super::STREAM;

/// What the receiver saw.
#[derive(Default)]
pub struct Receiver {
    /// The stream sequence of every record accepted, in arrival order, repeats included.
    accepted: Mutex<Vec<u64>>,
    /// Requests answered 503 while unavailable.
    pub refused: AtomicUsize,
    /// Answer every request with 503 while set.
    pub unavailable: AtomicBool,
    /// What was wrong with requests or records: a missing or wrong idempotency key.
    problems: Mutex<Vec<String>>,
}

impl Receiver {
    /// Every accepted record's stream sequence, repeats included.
    pub fn accepted(&self) -> Vec<u64> {
        self.accepted.lock().unwrap().clone()
    }

    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }

    fn problem(&self, what: String) {
        self.problems.lock().unwrap().push(what);
    }
}

/// Starts the receiver; its URL. It runs until the test's runtime ends.
pub async fn start() -> (Arc<Receiver>, String) {
    let receiver = Arc::new(Receiver::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/ingest", listener.local_addr().unwrap());
    let app = Router::new()
        .route("/ingest", axum::routing::post(ingest))
        .with_state(receiver.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (receiver, url)
}

/// One batch request (`application/x-ndjson`): its key must be
/// `<stream>:<lowest>-<highest>:<count>` (docs/sinks/http.md), each record's
/// `idempotency_key` `<stream>:<sequence>`.
async fn ingest(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if r.unavailable.load(Ordering::SeqCst) {
        r.refused.fetch_add(1, Ordering::SeqCst);
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let mut seqs = Vec::new();
    for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(record) = serde_json::from_slice::<serde_json::Value>(line) else {
            r.problem("a body line that is not JSON".into());
            return StatusCode::BAD_REQUEST;
        };
        let seq = record["stream_sequence"].as_u64().unwrap_or(0);
        if record["idempotency_key"].as_str() != Some(&format!("{STREAM}:{seq}")) {
            r.problem(format!("record {seq} keyed {}", record["idempotency_key"]));
        }
        seqs.push(seq);
    }
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let expected = match (seqs.iter().min(), seqs.iter().max()) {
        (Some(lo), Some(hi)) => format!("{STREAM}:{lo}-{hi}:{}", seqs.len()),
        _ => String::new(),
    };
    if key.is_empty() || key != expected {
        r.problem(format!("request keyed {key:?}, its records {expected:?}"));
    }
    r.accepted.lock().unwrap().extend(seqs);
    StatusCode::OK
}
