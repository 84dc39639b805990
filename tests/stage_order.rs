//! The order of the preparation stages, locked with all three in one sink: metadata and
//! priority lanes read the message in clear, encryption seals it after the lane decision,
//! and the randomizer runs last, on what the lanes ordered. The design's pipeline encrypts
//! before the lanes; jetsink does not, because the priority header may be one of the
//! sealed headers (docs/priority-lanes.md, "Differences from the source document").

use crate::common;

use std::path::Path;
use std::time::Duration;

use async_nats::HeaderMap;
use common::*;
use serde_json::{json, Value};

const N: usize = 100;
const SECRET: &str = "stage-order-secret";

fn sink_config(server: &NatsServer, out: &Path, key: &Path) -> Value {
    let mut cfg = config(
        server,
        "ORDER",
        "order.>",
        json!({"type": "file", "directory": out}),
        json!({
            "batch_size": N,
            "batch_timeout_ms": 200,
            "priority_lanes": {
                "enabled": true,
                "default_lane": "routine",
                "lanes": [
                    {"name": "urgent", "priorities": ["urgent"], "weight": 3},
                    {"name": "routine", "priorities": ["routine"], "weight": 1}
                ]
            },
            "randomizer": {
                "enabled": true,
                "process_immediately_probability": 0.5,
                "min_delay_ms": 50,
                "max_delay_ms": 200
            }
        }),
    );
    let sink = &mut cfg["sinks"]["main"];
    sink["source"]["ack_wait_ms"] = json!(10_000);
    // The priority header is sealed: lanes can only have read it before encryption.
    sink["encryption"] = json!({
        "active_key": "k",
        "keys": [{"id": "k", "file": key}],
        "headers": ["Jetsink-Priority"]
    });
    cfg
}

/// The first half of the stream is routine, the second urgent, so without lanes every
/// routine message would be committed before the first urgent one.
async fn publish_routine_then_urgent(server: &NatsServer) {
    let js = server.js().await;
    for i in 0..N {
        let priority = if i < N / 2 { "routine" } else { "urgent" };
        let mut h = HeaderMap::new();
        h.insert("Jetsink-Priority", priority);
        js.publish_with_headers(
            "order.jobs",
            h,
            format!("{{\"secret\":\"{SECRET}\",\"i\":{i}}}").into(),
        )
        .await
        .expect("publish")
        .await
        .expect("puback");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lanes_read_in_clear_then_encryption_seals_then_the_randomizer_delays() {
    let server = NatsServer::start();
    let dir = tempfile::tempdir().unwrap();
    let js = server.js().await;
    create_stream(&js, "ORDER", "order.>").await;
    publish_routine_then_urgent(&server).await;
    let key = dir.path().join("k.key");
    let (code, o, e) = jetsink(&["keygen", "--out", key.to_str().unwrap()], dir.path());
    assert_eq!(code, 0, "{o}{e}");
    let out = dir.path().join("out");
    let cfg = sink_config(&server, &out, &key);
    let path = write_config(dir.path(), &cfg);
    let mut daemon = Daemon::start(&path, dir.path());
    eventually(Duration::from_secs(60), "every message written", || {
        let out = out.clone();
        async move { distinct_keys(&jsonl_lines(&out)).len() == N }
    })
    .await;
    eventually(Duration::from_secs(20), "consumer drained", || async {
        consumer_state(&js, "ORDER", "jetsink").await == (0, 0)
    })
    .await;
    daemon.stop_cleanly();
    let lines = jsonl_lines(&out);
    assert_eq!(lines.len(), N, "each message written once");

    for l in &lines {
        let i = l["stream_sequence"].as_u64().unwrap() as usize - 1;
        let want = if i < N / 2 { "routine" } else { "urgent" };
        // Lanes decided on the clear header value ...
        assert_eq!(l["priority"], want, "{l}");
        assert_eq!(l["lane"], want, "{l}");
        // ... which is stored sealed, like the payload, on every delivery.
        assert_eq!(l["payload_encoding"], "aes256gcm-v1", "{l}");
        let stored = l["headers"]["Jetsink-Priority"][0].as_str().unwrap_or("");
        assert!(!stored.is_empty() && stored != want, "header in clear: {l}");
    }
    assert!(
        !lines.iter().any(|l| l.to_string().contains(SECRET)),
        "a payload is stored in clear"
    );

    // The randomizer ran after encryption: delayed messages came back (delivery 2), were
    // scheduled by the lanes again and sealed again.
    let delayed: Vec<&Value> = lines.iter().filter(|l| l["delivered"] == 2).collect();
    assert!(!delayed.is_empty(), "the randomizer delayed nothing");

    // The randomizer ran after the lanes and only took messages out: among the first
    // deliveries of the first batch, each lane keeps the fetched order, and an urgent
    // message (published after every routine one) was committed before a routine one.
    let first_batch = &lines[0]["written_at"];
    let kept: Vec<&Value> = lines
        .iter()
        .filter(|l| l["delivered"] == 1 && &l["written_at"] == first_batch)
        .collect();
    for lane in ["urgent", "routine"] {
        let seqs: Vec<u64> = kept
            .iter()
            .filter(|l| l["lane"] == lane)
            .map(|l| l["stream_sequence"].as_u64().unwrap())
            .collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{lane}: {seqs:?}");
    }
    let first_urgent = kept.iter().position(|l| l["lane"] == "urgent");
    let last_routine = kept.iter().rposition(|l| l["lane"] == "routine");
    assert!(
        matches!((first_urgent, last_routine), (Some(u), Some(r)) if u < r),
        "the lanes did not reorder the first batch: {:?}",
        kept.iter()
            .map(|l| (l["stream_sequence"].clone(), l["lane"].clone()))
            .collect::<Vec<_>>()
    );

    // Everything decrypts back to what was published.
    let file = dir.path().join("all.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let (code, o, e) = jetsink(
        &[
            "decrypt",
            "--config",
            path.to_str().unwrap(),
            "--sink",
            "main",
            file.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{e}");
    for r in o.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        assert_eq!(r["payload"]["secret"], SECRET, "{r}");
        assert_eq!(r["headers"]["Jetsink-Priority"][0], r["lane"], "{r}");
    }
}
