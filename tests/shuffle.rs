//! The shuffler (`delivery.shuffle`) in front of the `nats` republish destination, against
//! a real server: every message lands in the target stream exactly once, in an order
//! measurably shuffled within each buffer; across a SIGKILL mid-drain the duplicate window
//! absorbs the copies published again; a target that is down gets nothing ACKed; the
//! flush timer delivers a partial buffer that waited longer than AckWait without a
//! redelivery (the buffer is kept alive with `+WPI`); SIGTERM hands the buffer back
//! unwritten and the next start writes it once; a consumer whose MaxAckPending
//! cannot carry the buffer, and a shuffle combined with the randomizer, are refused.

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use async_nats::jetstream;
use common::*;
use serde_json::json;

const N: usize = 5_000;
const BUFFER: usize = 1_000;

/// The source sequence of every copy in the target stream, in target order.
async fn source_order(js: &jetstream::Context, stream: &str, n: usize) -> Vec<u64> {
    read_ordered(js, stream, n)
        .await
        .iter()
        .map(|m| {
            header_value(m, "Jetsink-Source-Sequence")
                .and_then(|v| v.parse().ok())
                .expect("source sequence header")
        })
        .collect()
}

/// Pairs out of order over all pairs: 0 for a sorted order, about 0.5 for a uniform shuffle.
fn normalized_kendall_distance(order: &[u64]) -> f64 {
    let n = order.len();
    let mut inversions = 0u64;
    for i in 0..n {
        for j in i + 1..n {
            if order[i] > order[j] {
                inversions += 1;
            }
        }
    }
    inversions as f64 / (n as f64 * (n as f64 - 1.0) / 2.0)
}

fn shuffled(server: &NatsServer, src: &str, target: &NatsServer, dst: &str) -> serde_json::Value {
    let mut cfg = config(
        server,
        src,
        &format!("{}.>", src.to_lowercase()),
        json!({"type": "nats", "servers": [target.url()], "stream": dst,
               "subject": "copy.{subject}", "request_timeout_ms": 1000,
               "reconnect_delay_max_ms": 500}),
        json!({"batch_size": 100, "batch_timeout_ms": 200,
               "retry": {"initial_backoff_ms": 50, "max_backoff_ms": 300},
               "shuffle": {"buffer": BUFFER, "flush_ms": 2000}}),
    );
    cfg["sinks"]["main"]["source"]["max_ack_pending"] = json!(BUFFER + 100);
    cfg
}

#[tokio::test(flavor = "multi_thread")]
async fn every_message_is_republished_once_shuffled_within_each_buffer() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUF", "shuf.>").await;
    create_target_stream(&js, "SHUFDST", "copy.>", |_| {}).await;
    publish_n(&js, "shuf.jobs", N).await;
    let cfg = shuffled(&server, "SHUF", &server, "SHUFDST");
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    eventually(Duration::from_secs(60), "source drained", || async {
        drained(&js, "SHUF").await
    })
    .await;
    let full = metric_value(
        &listen,
        "jetsink_shuffle_flushes_total{reason=\"full\",sink=\"main\"}",
    )
    .await
    .unwrap_or(0.0);
    daemon.stop_cleanly();
    assert_eq!(stored(&js, "SHUFDST").await, N as u64);
    let order = source_order(&js, "SHUFDST", N).await;
    let distinct: HashSet<u64> = order.iter().copied().collect();
    assert_eq!(distinct.len(), N, "every source sequence once");
    assert!(
        full >= (N / BUFFER) as f64 - 1.0,
        "full flushes counted: {full}"
    );
    // The stream was full before the start, so every pull is full and each flush holds
    // exactly one buffer: the target order falls into buffers of BUFFER. A sorted order
    // has distance 0 and a uniform shuffle about 0.5; each buffer must be well above 0.3.
    for (i, buffer) in order.chunks(BUFFER).enumerate() {
        let d = normalized_kendall_distance(buffer);
        eprintln!("buffer {i}: normalized Kendall distance {d:.3}");
        assert!(d > 0.3, "buffer {i} measurably shuffled (distance {d})");
    }
    // Ordering only within the buffer: buffer i holds source sequences of pull window i.
    for (i, buffer) in order.chunks(BUFFER).enumerate() {
        let lo = (i * BUFFER) as u64 + 1;
        let hi = ((i + 1) * BUFFER) as u64;
        assert!(buffer.iter().all(|s| (lo..=hi).contains(s)), "buffer {i}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkill_mid_drain_loses_nothing_and_the_duplicate_window_absorbs_the_rest() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUFK", "shufk.>").await;
    create_target_stream(&js, "SHUFKDST", "copy.>", |_| {}).await;
    publish_n(&js, "shufk.jobs", N).await;
    let cfg = shuffled(&server, "SHUFK", &server, "SHUFKDST");
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(30), "a part republished", || async {
        stored(&js, "SHUFKDST").await >= 1_500
    })
    .await;
    daemon.kill();
    assert!(
        stored(&js, "SHUFKDST").await < N as u64,
        "the kill came before the end of the drain"
    );
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "source drained", || async {
        drained(&js, "SHUFK").await
    })
    .await;
    daemon.stop_cleanly();
    assert_eq!(
        stored(&js, "SHUFKDST").await,
        N as u64,
        "duplicates absorbed"
    );
    let order = source_order(&js, "SHUFKDST", N).await;
    let distinct: HashSet<u64> = order.into_iter().collect();
    assert_eq!(distinct.len(), N, "every source sequence once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_down_gets_nothing_acked_while_the_buffer_is_kept_alive() {
    let server = NatsServer::start();
    let mut target = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUFD", "shufd.>").await;
    create_target_stream(&target.js().await, "SHUFDDST", "copy.>", |_| {}).await;
    let mut cfg = shuffled(&server, "SHUFD", &target, "SHUFDDST");
    cfg["sinks"]["main"]["delivery"]["shuffle"] = json!({"buffer": 200, "flush_ms": 500});
    cfg["sinks"]["main"]["source"]["max_ack_pending"] = json!(300);
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "sink running", || async {
        daemon.log_text().contains("sink running")
    })
    .await;
    target.kill();
    publish_n(&js, "shufd.x", 300).await;
    // Two pulls fill the buffer of 200; its first batch of 100 is held, the second waits
    // in the shuffler, the last 100 stay in the stream. Over three AckWaits nothing is
    // redelivered (the held batch and the waiting one get +WPI) and nothing is ACKed.
    assert_batch_held(&js, &daemon, "SHUFD", 300).await;
    target.restart();
    let tjs = target.js().await;
    eventually(Duration::from_secs(30), "all 300 in the target", || async {
        stored(&tjs, "SHUFDDST").await == 300
    })
    .await;
    eventually(Duration::from_secs(10), "source drained", || async {
        drained(&js, "SHUFD").await
    })
    .await;
    daemon.stop_cleanly();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_flush_timer_delivers_a_partial_buffer_that_waited_past_ack_wait_once() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUFT", "shuft.>").await;
    create_target_stream(&js, "SHUFTDST", "copy.>", |_| {}).await;
    let mut cfg = shuffled(&server, "SHUFT", &server, "SHUFTDST");
    // The 10 messages wait in the buffer 5 s, longer than AckWait (2 s): only the
    // buffer's +WPI keeps the server from redelivering them meanwhile.
    cfg["sinks"]["main"]["delivery"]["shuffle"]["flush_ms"] = json!(5000);
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(2000);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    publish_n(&js, "shuft.x", 10).await;
    eventually(Duration::from_secs(5), "10 buffered", || async {
        metric_value(&listen, "jetsink_shuffle_buffered{sink=\"main\"}").await == Some(10.0)
    })
    .await;
    eventually(Duration::from_secs(30), "all 10 in the target", || async {
        stored(&js, "SHUFTDST").await == 10
    })
    .await;
    eventually(Duration::from_secs(10), "source drained", || async {
        drained(&js, "SHUFT").await
    })
    .await;
    let timer = metric_value(
        &listen,
        "jetsink_shuffle_flushes_total{reason=\"timer\",sink=\"main\"}",
    )
    .await;
    let (_, redelivered) = delivered_so_far(&js, "SHUFT").await;
    let progress = metric_value(&listen, "jetsink_progress_acks_total{sink=\"main\"}").await;
    daemon.stop_cleanly();
    assert_eq!(timer, Some(1.0), "one flush, by the timer");
    assert!(
        progress.unwrap_or(0.0) >= 1.0,
        "the buffer was kept alive: {progress:?}"
    );
    let (last, _) = delivered_so_far(&js, "SHUFT").await;
    assert_eq!((last, redelivered), (10, 0), "each delivered once");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_hands_the_buffer_back_unwritten_and_the_next_start_writes_it_once() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUFS", "shufs.>").await;
    create_target_stream(&js, "SHUFSDST", "copy.>", |_| {}).await;
    let mut cfg = shuffled(&server, "SHUFS", &server, "SHUFSDST");
    // The buffer would wait a minute, and AckWait is a minute: only the NAK at shutdown
    // lets the next start have the 10 messages before then.
    cfg["sinks"]["main"]["delivery"]["shuffle"]["flush_ms"] = json!(60_000);
    cfg["sinks"]["main"]["source"]["ack_wait_ms"] = json!(60_000);
    let listen = cfg["http"]["listen"].as_str().unwrap().to_string();
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    publish_n(&js, "shufs.x", 10).await;
    eventually(Duration::from_secs(10), "10 buffered", || async {
        metric_value(&listen, "jetsink_shuffle_buffered{sink=\"main\"}").await == Some(10.0)
    })
    .await;
    daemon.stop_cleanly();
    assert!(
        daemon
            .log_text()
            .contains("handing back the shuffle buffer"),
        "{}",
        daemon.log_text()
    );
    assert_eq!(stored(&js, "SHUFSDST").await, 0, "nothing written");
    cfg["sinks"]["main"]["delivery"]["shuffle"]["flush_ms"] = json!(100);
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(20), "all 10 in the target", || async {
        stored(&js, "SHUFSDST").await == 10
    })
    .await;
    eventually(Duration::from_secs(10), "source drained", || async {
        drained(&js, "SHUFS").await
    })
    .await;
    daemon.stop_cleanly();
    let (last, _) = delivered_so_far(&js, "SHUFS").await;
    assert_eq!(
        last, 20,
        "each delivered twice: buffered and handed back, then written"
    );
}

#[test]
fn a_consumer_too_small_for_the_buffer_and_a_shuffle_with_the_randomizer_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = json!({
        "nats": {"servers": ["nats://127.0.0.1:1"]},
        "sinks": {"main": {
            "source": {"stream": "S", "subjects": "s.>", "consumer": "c", "max_ack_pending": 1000},
            "delivery": {"batch_size": 100, "shuffle": {"buffer": 1000},
                         "randomizer": {"enabled": true}},
            "destination": {"type": "file", "directory": "out"}
        }}
    });
    let path = write_config(dir.path(), &cfg);
    let (code, out, err) = jetsink(
        &["validate", "--config", path.to_str().unwrap()],
        dir.path(),
    );
    let text = format!("{out}{err}");
    assert_eq!(code, 78, "{text}");
    assert!(
        text.contains("sinks.main.delivery.shuffle.buffer"),
        "{text}"
    );
    assert!(text.contains("sinks.main.source.max_ack_pending"), "{text}");
    assert!(text.contains("1100"), "{text}");
    assert!(
        text.contains("cannot be combined with sinks.main.delivery.randomizer.enabled"),
        "{text}"
    );
}

/// An HTTP receiver that holds every request until its gate opens, counting the records
/// it was sent (NDJSON lines) and the requests that reached it.
#[derive(Clone)]
struct GatedReceiver {
    open: tokio::sync::watch::Sender<bool>,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    records: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

async fn gated_post(
    axum::extract::State(r): axum::extract::State<GatedReceiver>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    use std::sync::atomic::Ordering::SeqCst;
    r.requests.fetch_add(1, SeqCst);
    let mut open = r.open.subscribe();
    let _ = open.wait_for(|o| *o).await;
    let lines = body.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    r.records.fetch_add(lines.count(), SeqCst);
    axum::http::StatusCode::OK
}

/// Starts the receiver on a free loopback port: its URL and its state.
async fn gated_receiver() -> (String, GatedReceiver) {
    let (open, _) = tokio::sync::watch::channel(false);
    let state = GatedReceiver {
        open,
        requests: Default::default(),
        records: Default::default(),
    };
    let app = axum::Router::new()
        .route("/in", axum::routing::post(gated_post))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/in", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, state)
}

/// The next buffer is pulled into while the flush before it is written: with the first
/// part of a flush held in the destination, the batches after the buffer have been
/// delivered too (pulled ahead, as without a shuffler), nothing is ACKed, and once the destination
/// answers every message lands once.
#[tokio::test(flavor = "multi_thread")]
async fn the_next_buffer_is_pulled_while_a_flush_is_written() {
    use std::sync::atomic::Ordering::SeqCst;
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "SHUFO", "shufo.>").await;
    // The backlog is there before the first pull, so every pull is a full batch of 50.
    publish_n(&js, "shufo.x", 400).await;
    let (url, receiver) = gated_receiver().await;
    let mut cfg = config(
        &server,
        "SHUFO",
        "shufo.>",
        json!({"type": "http", "url": url, "allow_insecure_http": true,
               "mode": "batch", "batch_format": "ndjson", "request_timeout_ms": 120000}),
        json!({"batch_size": 50, "batch_timeout_ms": 200,
               "shuffle": {"buffer": 100, "flush_ms": 600000}}),
    );
    cfg["sinks"]["main"]["source"]["max_ack_pending"] = json!(1000);
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    // Two pulls fill the buffer; its first part (50) is in the held request; the third
    // to sixth pulls went out while it was written (four batches pulled ahead of a
    // backlog: max_ack_pending carries the buffer and five batches).
    eventually(
        Duration::from_secs(30),
        "the third to sixth batches delivered while the first part is held",
        || async {
            receiver.requests.load(SeqCst) == 1 && delivered_so_far(&js, "SHUFO").await.0 == 300
        },
    )
    .await;
    let info = common::consumer_info(&js, "SHUFO", "jetsink").await;
    assert_eq!(
        (info.num_ack_pending, info.ack_floor.stream_sequence),
        (300, 0),
        "nothing ACKed while the write is held"
    );
    receiver.open.send_replace(true);
    eventually(Duration::from_secs(60), "source drained", || async {
        drained(&js, "SHUFO").await
    })
    .await;
    let (delivered, redelivered) = delivered_so_far(&js, "SHUFO").await;
    daemon.stop_cleanly();
    assert_eq!((delivered, redelivered), (400, 0), "each delivered once");
    assert_eq!(receiver.records.load(SeqCst), 400, "each written once");
}
