//! Both layouts of the `$JS.ACK` reply subject, live. nats-server 2.14 sends the v2 layout
//! (`$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.…`, ADR-15) when started with
//! `feature_flags { js_ack_fc_v2: true }`; a sink must drain such a stream completely, with
//! the stream sequences read from the new layout and every message ACKed on it.

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::json;

const N: usize = 2_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_served_with_v2_ack_subjects_drains_committed_and_acked() {
    match nats_server_version() {
        Some(v) if v >= (2, 14, 0) => {}
        other => {
            println!(
                "skipped: the v2 ACK layout needs nats-server 2.14 or newer, {} is {other:?} \
                 (set JETSINK_TEST_NATS_SERVER)",
                nats_server_binary()
            );
            return;
        }
    }
    let server = NatsServer::start_with_config(Some("feature_flags { js_ack_fc_v2: true }\n"));
    let dir = tempfile::tempdir().unwrap();
    let client = server.client().await;
    let js = async_nats::jetstream::new(client.clone());
    create_stream(&js, "ACKV2", "ackv2.>").await;
    publish_n(&js, "ackv2.x", N).await;
    // Every ACK jetsink sends is a publish to a reply subject: watch them go by.
    let mut acks = client.subscribe("$JS.ACK.>").await.unwrap();
    client.flush().await.unwrap();

    let cfg = config(
        &server,
        "ACKV2",
        "ackv2.>",
        json!({"type": "sqlite", "path": "data/v2.db", "table": "events"}),
        json!({"batch_size": 100}),
    );
    let mut daemon = Daemon::start(&write_config(dir.path(), &cfg), dir.path());
    let db = dir.path().join("data/v2.db");
    eventually(Duration::from_secs(60), "every row", || async {
        sqlite_count(&db, "events") == N as u64
    })
    .await;
    eventually(
        Duration::from_secs(20),
        "ACK floor at the last message",
        || async {
            let i = common::consumer_info(&js, "ACKV2", "jetsink").await;
            i.ack_floor.stream_sequence == N as u64 && i.num_ack_pending == 0 && i.num_pending == 0
        },
    )
    .await;
    daemon.stop_cleanly();

    // The server really used the v2 layout: 9 tokens after `$JS.ACK.`, the first the domain
    // (`_` for none), then the account hash, then the stream and consumer.
    let mut acked = std::collections::BTreeSet::new();
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), acks.next()).await {
        let tokens: Vec<&str> = m.subject.split('.').skip(2).collect();
        assert_eq!(tokens.len(), 9, "v2 ACK subject: {}", m.subject);
        assert_eq!(
            (tokens[0], tokens[2], tokens[3]),
            ("_", "ACKV2", "jetsink"),
            "{}",
            m.subject
        );
        if m.payload.as_ref() == b"+ACK" {
            acked.insert(tokens[5].parse::<u64>().expect("stream sequence token"));
        }
    }
    assert_eq!(
        acked,
        (1..=N as u64).collect(),
        "every stream sequence ACKed on a v2 subject"
    );

    // The parser read the stream sequence from the v2 layout: rows carry 1..=N.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (distinct, min, max): (i64, i64, i64) = conn
        .query_row(
            "SELECT count(DISTINCT stream_sequence), min(stream_sequence), max(stream_sequence) FROM events",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!((distinct, min, max), (N as i64, 1, N as i64));
}
