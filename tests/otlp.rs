//! Trace context end to end, against a real OTLP receiver: `tests/data/otlp_receiver.py`
//! decodes what the daemon exports with the upstream `opentelemetry-proto` messages, over
//! HTTP/protobuf and over gRPC. Every message published with a `traceparent` must produce
//! a span whose parent is that traceparent, every batch write a span linked to its
//! messages' spans, and the destination must store the trace id; a dead-lettered message
//! keeps its header in the copy and its span says it was refused.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const N: usize = 1_000;
/// OTLP's `SPAN_KIND_CONSUMER` and `SPAN_KIND_CLIENT`; `STATUS_CODE_ERROR`.
const CONSUMER: i64 = 5;
const CLIENT: i64 = 3;
const ERROR: i64 = 2;

/// The receiver process, its ports, and the file it appends spans to.
struct Receiver {
    child: Child,
    out: PathBuf,
    http: u16,
    grpc: u16,
}

impl Receiver {
    fn start(dir: &Path) -> Receiver {
        let out = dir.join("spans.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/otlp_receiver.py");
        let mut child = Command::new(test_python())
            .arg(script)
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect(
                "run python (pip install opentelemetry-proto grpcio into .ci/venv: see .ci/run)",
            );
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("receiver stdout"))
            .read_line(&mut line)
            .expect("receiver's first line");
        let port = |key: &str| -> u16 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no {key} port in the receiver's line {line:?}"))
        };
        let (http, grpc) = (port("http="), port("grpc="));
        Receiver {
            child,
            out,
            http,
            grpc,
        }
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A random valid `traceparent` (sampled) and its trace id and parent span id.
fn traceparent() -> (String, String, String) {
    let hex = |n: usize| -> String {
        (0..n)
            .map(|_| format!("{:x}", rand::random::<u8>() % 16))
            .collect()
    };
    // Never all zero: the first digit of each is 1-f.
    let trace = format!("{:x}{}", 1 + rand::random::<u8>() % 15, hex(31));
    let parent = format!("{:x}{}", 1 + rand::random::<u8>() % 15, hex(15));
    (format!("00-{trace}-{parent}-01"), trace, parent)
}

async fn publish_traced(
    js: &async_nats::jetstream::Context,
    subject: &str,
    body: String,
) -> (String, String) {
    let (tp, trace, parent) = traceparent();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("traceparent", tp.as_str());
    headers.insert("tracestate", "vendor=abc");
    js.publish_with_headers(subject.to_string(), headers, body.into())
        .await
        .unwrap()
        .await
        .unwrap();
    (trace, parent)
}

fn otlp(receiver: &Receiver, protocol: &str) -> Value {
    let port = match protocol {
        "grpc" => receiver.grpc,
        _ => receiver.http,
    };
    json!({"otlp": {
        "endpoint": format!("http://127.0.0.1:{port}"),
        "protocol": protocol,
        "service_name": "jetsink-test",
        "export_interval_ms": 200
    }})
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

async fn every_message_traced_over(protocol: &str) {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let js = server.js().await;
    create_stream(&js, "OTLP", "otlp.>").await;
    let mut cfg = config(
        &server,
        "OTLP",
        "otlp.>",
        json!({"type": "file", "directory": "out"}),
        json!({"batch_size": 100}),
    );
    cfg["telemetry"] = otlp(&receiver, protocol);
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let mut published = HashMap::new();
    for i in 0..N {
        let (trace, parent) = publish_traced(&js, "otlp.orders", format!("{{\"i\":{i}}}")).await;
        published.insert(trace, parent);
    }
    let out = dir.path().join("out");
    let done = || jsonl_lines(&out).len() >= N && named(&receiver.spans(), "write main").len() >= N;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "over {protocol}: {} records, {} spans received; daemon log:\n{}",
            jsonl_lines(&out).len(),
            receiver.spans().len(),
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.stop_cleanly();
    let spans = receiver.spans();
    let messages = named(&spans, "write main");
    assert_eq!(messages.len(), N, "one span per message over {protocol}");
    let mut ids = HashSet::new();
    for s in &messages {
        let trace = s["trace_id"].as_str().unwrap();
        assert_eq!(
            published.get(trace).map(String::as_str),
            s["parent_span_id"].as_str(),
            "the span of trace {trace} is a child of the producer's span: {s}"
        );
        assert_eq!(s["kind"], CONSUMER, "{s}");
        assert_eq!(s["transport"], protocol.replace("http/protobuf", "http"));
        assert_eq!(s["service"], "jetsink-test");
        assert_eq!(s["attributes"]["jetsink.outcome"], "committed", "{s}");
        assert_eq!(s["attributes"]["messaging.system"], "nats");
        assert_eq!(s["attributes"]["messaging.destination.name"], "otlp.orders");
        assert!(s["start_ns"].as_u64() <= s["end_ns"].as_u64(), "{s}");
        ids.insert(s["span_id"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len(), N, "every message span has its own id");
    let linked: HashSet<String> = named(&spans, "write batch main")
        .iter()
        .inspect(|b| assert_eq!(b["kind"], CLIENT, "{b}"))
        .flat_map(|b| b["links"].as_array().unwrap().clone())
        .map(|l| l["span_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        linked, ids,
        "the batch spans link every message span, and only those"
    );
    let lines = jsonl_lines(&out);
    let stored: HashSet<&str> = lines
        .iter()
        .filter_map(|l| l["trace_id"].as_str())
        .collect();
    let sent: HashSet<&str> = published.keys().map(String::as_str).collect();
    assert_eq!(stored, sent, "each record keeps its message's trace id");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_message_with_a_traceparent_gets_a_child_span_over_http_protobuf() {
    every_message_traced_over("http/protobuf").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_message_with_a_traceparent_gets_a_child_span_over_grpc() {
    every_message_traced_over("grpc").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_lettered_message_keeps_its_traceparent_and_its_span_says_refused() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start(dir.path());
    let js = server.js().await;
    create_stream(&js, "OTLPDL", "dl.>").await;
    let db = dir.path().join("data/t.db");
    poison_table(&db);
    let mut cfg = config(
        &server,
        "OTLPDL",
        "dl.>",
        json!({"type": "sqlite", "path": "data/t.db", "table": "events"}),
        json!({"batch_size": 10}),
    );
    cfg["sinks"]["main"]["dead_letter"] =
        json!({"subject": "dlq.{sink}.{subject}", "create_stream": {"name": "DLQ"}});
    cfg["telemetry"] = otlp(&receiver, "http/protobuf");
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let mut sent = Vec::new();
    for i in 0..10 {
        let body = match i {
            4 => format!("{{\"i\":{i},\"note\":\"POISON\"}}"),
            _ => format!("{{\"i\":{i}}}"),
        };
        sent.push(publish_traced(&js, "dl.orders", body).await);
    }
    eventually(
        Duration::from_secs(60),
        "9 rows, 1 dead-letter copy, 10 message spans",
        || async {
            sqlite_count(&db, "events") == 9
                && stored(&js, "DLQ").await == 1
                && named(&receiver.spans(), "write main").len() >= 10
        },
    )
    .await;
    daemon.stop_cleanly();
    let (poison_trace, poison_parent) = &sent[4];
    let copies = stream_messages(&js, "DLQ", "dlq.>").await;
    let copy = copies.first().expect("the dead-letter copy");
    let copied = copy
        .headers
        .get("traceparent")
        .map(|v| v.as_str().to_string());
    assert_eq!(
        copied.as_deref(),
        Some(format!("00-{poison_trace}-{poison_parent}-01").as_str()),
        "the copy keeps the producer's traceparent"
    );
    let spans = receiver.spans();
    let refused: Vec<_> = named(&spans, "write main")
        .into_iter()
        .filter(|s| s["attributes"]["jetsink.outcome"] == "refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["trace_id"], poison_trace.as_str());
    assert_eq!(refused[0]["parent_span_id"], poison_parent.as_str());
    assert_eq!(refused[0]["status"]["code"], ERROR, "{}", refused[0]);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn.prepare("SELECT trace_id FROM events").unwrap();
    let stored: HashSet<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let expected: HashSet<String> = sent
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 4)
        .map(|(_, (t, _))| t.clone())
        .collect();
    assert_eq!(stored, expected, "each row keeps its message's trace id");
}

/// A collector that takes the connection and never answers must not turn a clean stop
/// into a shutdown timeout. With `shutdown_timeout_ms` 0 the daemon allows itself 5 s
/// from SIGTERM to exit; the final export is bounded to 3 s (the export timeout here is
/// 10 s, and the SDK's own shutdown would wait 5 s), beside the listeners' wind-down, so
/// SIGTERM still ends with exit 0 while spans are queued for it (export interval one
/// minute: nothing was sent before).
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_never_answers_does_not_hold_the_shutdown() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "OTLPSILENT", "silent.>").await;
    let mut cfg = config(
        &server,
        "OTLPSILENT",
        "silent.>",
        json!({"type": "file", "directory": "out"}),
        json!({"batch_size": 10, "shutdown_timeout_ms": 0}),
    );
    cfg["telemetry"] = json!({"otlp": {
        "endpoint": format!("http://127.0.0.1:{port}"),
        "timeout_ms": 10000,
        "export_interval_ms": 60000
    }});
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    for i in 0..20 {
        publish_traced(&js, "silent.orders", format!("{{\"i\":{i}}}")).await;
    }
    let out = dir.path().join("out");
    eventually(Duration::from_secs(60), "every message stored", || async {
        jsonl_lines(&out).len() >= 20
    })
    .await;
    daemon.stop_cleanly();
    drop(silent);
}
