//! The headers of one message's copy (pure).
//!
//! Every header of the original is kept, in the envelope's order, except the ones that
//! would make the target server treat the copy differently from a plain publish:
//! `Nats-Msg-Id` is replaced by `<stream>:<sequence>` of the original, so every
//! redelivery of one source message publishes the same id and the target's duplicate
//! window stores it once; the `Nats-Expected-*` publish expectations are dropped, since
//! they were checked against the source stream and would refuse the copy on the target,
//! and the `Nats-Batch-*` headers of an atomic batch that filled the source are dropped,
//! since the target would take the copy for part of a batch.
//! Two headers name the original: `Jetsink-Source-Stream` and `Jetsink-Source-Sequence`.
//! With payload encryption on, the copy carries the sealed payload and says so in
//! `Jetsink-Payload-Encoding`, as the file records do in their `payload_encoding`.

use async_nats::HeaderMap;

use crate::envelope::{Envelope, MSG_ID_HEADER};

/// The header naming the stream the copy came from.
pub const SOURCE_STREAM: &str = "Jetsink-Source-Stream";
/// The header naming the copy's stream sequence in that stream.
pub const SOURCE_SEQUENCE: &str = "Jetsink-Source-Sequence";

/// The header naming the payload's encoding when it is not the published bytes.
pub const PAYLOAD_ENCODING: &str = "Jetsink-Payload-Encoding";

/// Whether an original header is left out of the copy.
fn dropped(name: &str) -> bool {
    name.eq_ignore_ascii_case(MSG_ID_HEADER)
        || name.eq_ignore_ascii_case(SOURCE_STREAM)
        || name.eq_ignore_ascii_case(SOURCE_SEQUENCE)
        || name.eq_ignore_ascii_case(PAYLOAD_ENCODING)
        || name
            .get(..14)
            .is_some_and(|p| p.eq_ignore_ascii_case("Nats-Expected-"))
        // A source filled by atomic batches stores their headers; copied, they would make
        // the target take each copy for part of a batch.
        || name
            .get(..11)
            .is_some_and(|p| p.eq_ignore_ascii_case("Nats-Batch-"))
}

/// The copy's headers.
pub fn headers(e: &Envelope) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, values) in &e.headers {
        if dropped(name) {
            continue;
        }
        for v in values {
            map.append(name.as_str(), v.as_str());
        }
    }
    map.insert(SOURCE_STREAM, e.stream.as_str());
    map.insert(SOURCE_SEQUENCE, e.stream_sequence.to_string().as_str());
    if let Some(encoding) = e.payload_encoding() {
        map.insert(PAYLOAD_ENCODING, encoding);
    }
    map.insert(
        MSG_ID_HEADER,
        format!("{}:{}", e.stream, e.stream_sequence).as_str(),
    );
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use time::OffsetDateTime;

    fn envelope(headers: Vec<(&str, Vec<&str>)>) -> Envelope {
        Envelope {
            subject: "orders.eu".into(),
            stream: "ORDERS".into(),
            consumer: "c".into(),
            stream_sequence: 42,
            consumer_sequence: 7,
            delivered: 2,
            published_at: OffsetDateTime::UNIX_EPOCH,
            headers: headers
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.into_iter().map(String::from).collect()))
                .collect(),
            message_id: None,
            idempotency_key: "ORDERS:42".into(),
            priority: None,
            lane: None,
            classification: None,
            labels: Vec::new(),
            job_id: None,
            payload: Bytes::from_static(b"{}"),
            clear: None,
        }
    }

    fn values(map: &HeaderMap, name: &str) -> Vec<String> {
        map.get_all(name)
            .map(|v| v.as_str().to_string())
            .collect::<Vec<_>>()
    }

    #[test]
    fn headers_are_kept_and_the_source_is_named() {
        let map = headers(&envelope(vec![
            ("Trace", vec!["a", "b"]),
            ("X-Tenant", vec!["t1"]),
        ]));
        assert_eq!(values(&map, "Trace"), ["a", "b"]);
        assert_eq!(values(&map, "X-Tenant"), ["t1"]);
        assert_eq!(values(&map, SOURCE_STREAM), ["ORDERS"]);
        assert_eq!(values(&map, SOURCE_SEQUENCE), ["42"]);
        assert_eq!(values(&map, MSG_ID_HEADER), ["ORDERS:42"]);
    }

    #[test]
    fn the_id_is_the_source_position_and_expectations_are_dropped() {
        let map = headers(&envelope(vec![
            ("nats-msg-id", vec!["client-id"]),
            ("Nats-Expected-Last-Sequence", vec!["3"]),
            ("nats-expected-stream", vec!["ORDERS"]),
            ("Jetsink-Source-Stream", vec!["OLDER"]),
            ("Nats-Batch-Id", vec!["b"]),
            ("nats-batch-sequence", vec!["2"]),
        ]));
        assert!(values(&map, "Nats-Batch-Id").is_empty());
        assert!(values(&map, "nats-batch-sequence").is_empty());
        assert_eq!(values(&map, MSG_ID_HEADER), ["ORDERS:42"]);
        assert!(values(&map, "Nats-Expected-Last-Sequence").is_empty());
        assert!(values(&map, "nats-expected-stream").is_empty());
        assert_eq!(values(&map, SOURCE_STREAM), ["ORDERS"]);
    }
}
