//! The normalized form of one JetStream message, as every destination sees it.
//!
//! Destinations never touch the raw NATS message (and so can never ACK it). Normalization
//! is a pure function of the delivery metadata, headers and payload, so it is tested and
//! fuzzed without a server. The payload is a reference-counted [`Bytes`]: normalizing does
//! not copy it.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use time::OffsetDateTime;

use crate::shared::idempotency::IdempotencyKey;

pub use crate::shared::idempotency::MSG_ID_HEADER;

/// One message, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The subject the message was published on.
    pub subject: String,
    /// The stream that stored it.
    pub stream: String,
    /// The durable consumer that delivered it.
    pub consumer: String,
    /// Its sequence in the stream: stable across redeliveries.
    pub stream_sequence: u64,
    /// Its sequence in this consumer's deliveries: grows with each redelivery.
    pub consumer_sequence: u64,
    /// How many times it has been delivered, this delivery included (1 = first).
    pub delivered: u64,
    /// When the server stored it.
    pub published_at: OffsetDateTime,
    /// Headers, each name with all its values in arrival order.
    pub headers: Vec<(String, Vec<String>)>,
    /// The publisher's `Nats-Msg-Id`, if any.
    pub message_id: Option<String>,
    /// What makes a write idempotent (`<stream>:<stream_sequence>` by default).
    pub idempotency_key: String,
    /// Normalized priority (message metadata); `None` until metadata rules assign one.
    pub priority: Option<String>,
    /// The priority lane the scheduler put the message in; `None` with lanes disabled.
    pub lane: Option<String>,
    /// Normalized classification (message metadata).
    pub classification: Option<String>,
    /// Normalized labels (message metadata), in the order given.
    pub labels: Vec<String>,
    /// Job-queue mode: the job's id (from where `results.job_id` says), set by the runner
    /// before the write, for the destinations that hand it to the job (`exec`'s
    /// `JETSINK_JOB_ID`); `None` otherwise.
    pub job_id: Option<String>,
    /// The payload, shared with the NATS message, never copied — or, once the encryption
    /// stage ran, the sealed value ([`Envelope::payload_encoding`] says which).
    pub payload: Bytes,
    /// The message as published, kept when the encryption stage replaced its payload (and
    /// listed headers): dead-letter copies carry it, so a copy replays as the original.
    /// `None` for a message stored in clear.
    pub clear: Option<Arc<Clear>>,
}

/// The `payload_encoding` of an encrypted payload: AES-256-GCM, sealed value format 1.
pub const ENCRYPTED_ENCODING: &str = "aes256gcm-v1";

/// What the encryption stage replaced. Its `Debug` never shows the content.
#[derive(Clone, PartialEq)]
pub struct Clear {
    /// The payload as published.
    pub payload: Bytes,
    /// The headers as published, when some were encrypted; `None` when all stayed clear.
    pub headers: Option<Vec<(String, Vec<String>)>>,
}

impl std::fmt::Debug for Clear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clear({} payload bytes, redacted)", self.payload.len())
    }
}

/// Delivery metadata taken from the JetStream reply subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    /// Stream name.
    pub stream: &'a str,
    /// Consumer name.
    pub consumer: &'a str,
    /// Stream sequence.
    pub stream_sequence: u64,
    /// Consumer sequence.
    pub consumer_sequence: u64,
    /// Delivery count as the server reports it (0 is read as 1).
    pub delivered: u64,
    /// Server store time.
    pub published: OffsetDateTime,
}

/// Most header values a message may carry (every value of every name counted). A message
/// with more is refused before the write as a metadata failure (dead-lettered with reason
/// `metadata`): nothing a sink stores needs more, and each value costs work in every stage.
pub const MAX_HEADER_VALUES: usize = 1024;

/// Builds an [`Envelope`]. `headers` are `(name, value)` pairs; repeated names are grouped
/// under the first occurrence. Message metadata (priority, classification, labels) is
/// filled in by a later stage.
pub fn normalize<'h>(
    subject: &str,
    delivery: Delivery<'_>,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    payload: Bytes,
    key: IdempotencyKey,
) -> Envelope {
    // An index by name keeps grouping linear: a linear search per header made a message
    // with thousands of headers cost millions of comparisons.
    let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (name, value) in headers {
        match index.get(name) {
            Some(&i) => grouped[i].1.push(value.to_string()),
            None => {
                index.insert(name, grouped.len());
                grouped.push((name.to_string(), vec![value.to_string()]));
            }
        }
    }
    let message_id = grouped
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(MSG_ID_HEADER))
        .and_then(|(_, v)| v.last())
        .filter(|v| !v.is_empty())
        .cloned();
    let idempotency_key = match (key, &message_id) {
        (IdempotencyKey::MessageId, Some(id)) => id.clone(),
        _ => stream_key(delivery.stream, delivery.stream_sequence),
    };
    Envelope {
        subject: subject.to_string(),
        stream: delivery.stream.to_string(),
        consumer: delivery.consumer.to_string(),
        stream_sequence: delivery.stream_sequence,
        consumer_sequence: delivery.consumer_sequence,
        delivered: delivery.delivered.max(1),
        published_at: delivery.published,
        headers: grouped,
        message_id,
        idempotency_key,
        priority: None,
        lane: None,
        classification: None,
        labels: Vec::new(),
        job_id: None,
        payload,
        clear: None,
    }
}

/// `<stream>:<sequence>`, built without the formatting machinery: it runs once per message,
/// and `format!` was a fifth of normalization's cost.
fn stream_key(stream: &str, sequence: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(sequence);
    let mut key = String::with_capacity(stream.len() + 1 + digits.len());
    key.push_str(stream);
    key.push(':');
    key.push_str(digits);
    key
}

/// Formats a time as RFC 3339 with nanoseconds in UTC, the form every destination stores.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let mut out = String::with_capacity(RFC3339_LEN);
    write_rfc3339(t, &mut out);
    out
}

/// Length of [`rfc3339`]'s output for years 0 to 9999.
pub const RFC3339_LEN: usize = 30;

/// Appends [`rfc3339`]'s form to `out` without allocating: it runs once or twice per
/// stored message.
pub fn write_rfc3339(t: OffsetDateTime, out: &mut String) {
    let bytes = rfc3339_bytes(t);
    // Only ASCII digits and separators are written.
    out.push_str(std::str::from_utf8(&bytes).unwrap_or_default());
}

/// [`rfc3339`]'s form as a fixed-size array of ASCII bytes, for writers of byte buffers.
pub fn rfc3339_bytes(t: OffsetDateTime) -> [u8; RFC3339_LEN] {
    fn digits(out: &mut [u8], mut v: u32) {
        for slot in out.iter_mut().rev() {
            *slot = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }
    let t = t.to_offset(time::UtcOffset::UTC);
    let mut out = *b"0000-00-00T00:00:00.000000000Z";
    digits(&mut out[0..4], t.year().clamp(0, 9999) as u32);
    digits(&mut out[5..7], u8::from(t.month()).into());
    digits(&mut out[8..10], t.day().into());
    digits(&mut out[11..13], t.hour().into());
    digits(&mut out[14..16], t.minute().into());
    digits(&mut out[17..19], t.second().into());
    digits(&mut out[20..29], t.nanosecond());
    out
}

impl Envelope {
    /// The trace id of the producer's W3C `traceparent` header, when it has a valid one
    /// among the headers as stored (an encrypted `traceparent` is not read): destinations
    /// that keep a message's metadata store it, so a row leads back to its trace.
    pub fn trace_id(&self) -> Option<&str> {
        crate::shared::traceparent::find(&self.headers).map(|t| t.trace_id)
    }

    /// `Some("aes256gcm-v1")` when `payload` holds a sealed value; `None` in clear, where
    /// each destination keeps its own encoding of the bytes.
    pub fn payload_encoding(&self) -> Option<&'static str> {
        self.clear.as_ref().map(|_| ENCRYPTED_ENCODING)
    }

    /// The payload as published, whether or not it was encrypted.
    pub fn clear_payload(&self) -> &Bytes {
        self.clear.as_ref().map_or(&self.payload, |c| &c.payload)
    }

    /// The headers as published, whether or not some were encrypted.
    pub fn clear_headers(&self) -> &[(String, Vec<String>)] {
        match self.clear.as_ref().and_then(|c| c.headers.as_ref()) {
            Some(h) => h,
            None => &self.headers,
        }
    }

    /// How many header values the message carries, every value of every name counted.
    pub fn header_values(&self) -> usize {
        self.headers.iter().map(|(_, v)| v.len()).sum()
    }

    /// Appends the headers as a JSON object of name → list of values (the stored form) to
    /// `out`, without building a `serde_json::Value`.
    pub fn write_headers_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (name, values)) in self.headers.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Writing strings into a Vec<u8> cannot fail.
            let _ = serde_json::to_writer(&mut *out, name);
            out.push(b':');
            let _ = serde_json::to_writer(&mut *out, values);
        }
        out.push(b'}');
    }

    /// Headers as a JSON object of name → list of values, the stored form.
    pub fn headers_json(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> = self
            .headers
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::from(v.clone())))
            .collect();
        serde_json::Value::Object(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn delivery(seq: u64, delivered: u64) -> Delivery<'static> {
        Delivery {
            stream: "ORDERS",
            consumer: "sink",
            stream_sequence: seq,
            consumer_sequence: seq + 10,
            delivered,
            published: OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789)
                .unwrap(),
        }
    }

    #[test]
    fn default_key_is_stream_and_sequence() {
        let e = normalize(
            "orders.new",
            delivery(42, 1),
            [],
            Bytes::from_static(b"{}"),
            IdempotencyKey::StreamSequence,
        );
        assert_eq!(e.idempotency_key, "ORDERS:42");
        assert_eq!(e.consumer_sequence, 52);
        assert_eq!(e.message_id, None);
    }

    #[test]
    fn message_id_key_uses_the_header_and_falls_back_without_it() {
        let with = normalize(
            "s",
            delivery(7, 1),
            [("Nats-Msg-Id", "order-9")],
            Bytes::new(),
            IdempotencyKey::MessageId,
        );
        assert_eq!(with.idempotency_key, "order-9");
        assert_eq!(with.message_id.as_deref(), Some("order-9"));
        let without = normalize(
            "s",
            delivery(7, 1),
            [],
            Bytes::new(),
            IdempotencyKey::MessageId,
        );
        assert_eq!(without.idempotency_key, "ORDERS:7");
    }

    #[test]
    fn repeated_header_names_keep_every_value_in_order() {
        let e = normalize(
            "s",
            delivery(1, 3),
            [("A", "1"), ("B", "x"), ("A", "2")],
            Bytes::new(),
            IdempotencyKey::StreamSequence,
        );
        assert_eq!(
            e.headers,
            vec![
                ("A".to_string(), vec!["1".to_string(), "2".to_string()]),
                ("B".to_string(), vec!["x".to_string()])
            ]
        );
        assert_eq!(e.delivered, 3);
        assert_eq!(
            e.headers_json(),
            serde_json::json!({"A": ["1", "2"], "B": ["x"]})
        );
    }

    #[test]
    fn timestamps_keep_nanoseconds_in_utc() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_700_000_000_123_456_789).unwrap();
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123456789Z");
        let t = OffsetDateTime::from_unix_timestamp_nanos(5).unwrap();
        assert_eq!(rfc3339(t), "1970-01-01T00:00:00.000000005Z");
        assert_eq!(rfc3339(t).len(), RFC3339_LEN);
    }

    #[test]
    fn grouping_tens_of_thousands_of_headers_keeps_every_value() {
        let names: Vec<String> = (0..50_000).map(|i| format!("X-{}", i % 20_000)).collect();
        let e = normalize(
            "a",
            delivery(1, 1),
            names.iter().map(|n| (n.as_str(), "v")),
            Bytes::new(),
            IdempotencyKey::StreamSequence,
        );
        assert_eq!(e.headers.len(), 20_000);
        assert_eq!(e.header_values(), 50_000);
        assert_eq!(e.headers[0].0, "X-0");
        assert_eq!(e.headers[0].1.len(), 3);
    }

    proptest! {
        #[test]
        fn grouping_equals_grouping_by_search(
            headers in proptest::collection::vec(("[abc]{1,2}", "[xy]{0,2}"), 0..40),
        ) {
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let mut naive: Vec<(String, Vec<String>)> = Vec::new();
            for (n, v) in &pairs {
                match naive.iter_mut().find(|(m, _)| m == n) {
                    Some((_, vs)) => vs.push(v.to_string()),
                    None => naive.push((n.to_string(), vec![v.to_string()])),
                }
            }
            let e = normalize("a", delivery(1, 1), pairs, Bytes::new(), IdempotencyKey::StreamSequence);
            prop_assert_eq!(e.headers, naive);
        }
    }

    proptest! {
        #[test]
        fn rfc3339_agrees_with_the_time_crate(nanos in 0i128..253_402_300_799_000_000_000i128) {
            let t = OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap();
            let ours = rfc3339(t);
            let parsed = OffsetDateTime::parse(&ours, &time::format_description::well_known::Rfc3339).unwrap();
            prop_assert_eq!(parsed, t);
        }

        #[test]
        fn written_headers_equal_the_json_value(headers in proptest::collection::vec(("[A-Za-z\"\\-]{1,8}", "[ -~é]{0,16}"), 0..6)) {
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let e = normalize("s", delivery(1, 1), pairs, Bytes::new(), IdempotencyKey::StreamSequence);
            let mut out = Vec::new();
            e.write_headers_json(&mut out);
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(v, e.headers_json());
        }
    }

    proptest! {
        #[test]
        fn any_payload_and_headers_normalize_without_loss(
            payload in proptest::collection::vec(any::<u8>(), 0..512),
            headers in proptest::collection::vec(("[A-Za-z-]{1,8}", "[ -~]{0,16}"), 0..8),
            seq in 1u64..u64::MAX,
        ) {
            let pairs: Vec<(&str, &str)> = headers.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let e = normalize("s", delivery(seq, 1), pairs.clone(), Bytes::from(payload.clone()), IdempotencyKey::StreamSequence);
            prop_assert_eq!(&e.payload[..], &payload[..]);
            let total: usize = e.headers.iter().map(|(_, v)| v.len()).sum();
            prop_assert_eq!(total, pairs.len());
            prop_assert_eq!(e.idempotency_key, format!("ORDERS:{seq}"));
        }
    }
}
