//! Envelopes and checks shared by the database destination suites (PostgreSQL, MySQL):
//! both write the same envelopes and expect the same error shapes.

use bytes::Bytes;
use jetsink::config::IdempotencyKey;
use jetsink::envelope::{normalize, Delivery, Envelope};
use jetsink::sinks::SinkError;
use time::OffsetDateTime;

/// Envelope `seq` of stream ORDERS with repeated headers, a message ID, a priority and
/// labels, so every column of the jetsink layout gets a value.
pub fn envelope(seq: u64, payload: &[u8]) -> Envelope {
    let id = format!("id-{seq}");
    let mut e = normalize(
        "orders.new",
        Delivery {
            stream: "ORDERS",
            consumer: "sink",
            stream_sequence: seq,
            consumer_sequence: seq + 100,
            delivered: 1,
            published: OffsetDateTime::from_unix_timestamp_nanos(
                1_700_000_000_123_456_000 + i128::from(seq) * 1_000,
            )
            .unwrap(),
        },
        [
            ("A", "1"),
            ("B", "x"),
            ("A", "2"),
            ("Nats-Msg-Id", id.as_str()),
        ],
        Bytes::copy_from_slice(payload),
        IdempotencyKey::StreamSequence,
    );
    e.priority = Some("high".into());
    e.labels = vec!["a".into(), "b".into()];
    e
}

/// A valid W3C `traceparent`, and the trace id the destinations store for it.
pub const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
pub const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// Gives `e` the header [`TRACEPARENT`].
pub fn traced(e: &mut Envelope) {
    e.headers
        .push(("traceparent".into(), vec![TRACEPARENT.into()]));
}

/// Envelopes `seqs` with small JSON payloads.
pub fn json_batch(seqs: std::ops::RangeInclusive<u64>) -> Vec<Envelope> {
    seqs.map(|s| envelope(s, format!("{{\"n\":{s}}}").as_bytes()))
        .collect()
}

/// Fails the test unless `result` is a configuration error mentioning every needle.
pub fn misconfigured(result: Result<(), SinkError>, needles: &[&str]) {
    match result {
        Err(SinkError::Misconfigured { message }) => {
            for n in needles {
                assert!(message.contains(n), "{message:?} lacks {n:?}");
            }
        }
        other => panic!("expected misconfigured with {needles:?}, got {other:?}"),
    }
}
