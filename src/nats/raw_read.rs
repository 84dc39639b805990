//! Reads what a consumer has delivered and not had acknowledged, and reads stored messages
//! by stream sequence without the client ever parsing their headers.
//!
//! A message whose header block the client cannot parse drops the connection each time it
//! is delivered, so it can never reach jetsink as a client `Message`. It can still be read
//! through the stream's `MSG.GET` API over a plain core request: the answer is JSON that
//! carries the header block and the payload base64-encoded, and nothing in the client
//! looks inside them. (The client's own `get_raw_message` parses the headers, and a
//! direct get answers with the headers on the wire, so neither can be used here.)

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::Client;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;

/// One stored message, as the stream holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawStored {
    /// The subject it was published on.
    pub subject: String,
    /// Its stream sequence.
    pub sequence: u64,
    /// The header block exactly as stored, `None` when it has none.
    pub headers: Option<Bytes>,
    /// The payload.
    pub payload: Bytes,
}

/// What the consumer has delivered and not yet had acknowledged, from its info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outstanding {
    /// Stream name.
    pub stream: String,
    /// Consumer name.
    pub consumer: String,
    /// The consumer's filter subjects (empty: every subject of the stream).
    pub filters: Vec<String>,
    /// Stream sequence of the ack floor: everything at or below it is acknowledged.
    pub floor: u64,
    /// Highest stream sequence delivered.
    pub delivered: u64,
    /// Highest consumer (delivery) sequence: a crafted acknowledgement subject carries it
    /// so the server takes it as in range.
    pub delivered_consumer_seq: u64,
}

impl Outstanding {
    /// The stream sequences that may hold a message delivered and not acknowledged, the
    /// lowest first, at most `limit` of them. The ack floor cannot pass an unacknowledged
    /// message, so a message that keeps failing sits just above it.
    pub fn candidates(&self, limit: u64) -> std::ops::RangeInclusive<u64> {
        let first = self.floor.saturating_add(1);
        let last = self.delivered.min(self.floor.saturating_add(limit.max(1)));
        first..=last
    }
}

/// A failed read; the sink logs it and tries again after the next reconnect.
#[derive(Debug, thiserror::Error)]
pub enum RawReadError {
    /// The request got no answer.
    #[error("reading stream {stream} sequence {sequence}: {message}")]
    Request {
        /// Stream name.
        stream: String,
        /// Stream sequence asked for.
        sequence: u64,
        /// The client's reason.
        message: String,
    },
    /// The server answered with an error other than "no such message".
    #[error("reading stream {stream} sequence {sequence}: server error {code}: {description}")]
    Api {
        /// Stream name.
        stream: String,
        /// Stream sequence asked for.
        sequence: u64,
        /// The API error code.
        code: u16,
        /// The server's description.
        description: String,
    },
    /// The answer is not what the API documents.
    #[error("reading stream {stream} sequence {sequence}: unreadable answer: {what}")]
    Decode {
        /// Stream name.
        stream: String,
        /// Stream sequence asked for.
        sequence: u64,
        /// What was wrong (never the message's content).
        what: String,
    },
    /// The consumer's info could not be read.
    #[error("reading consumer {consumer} of stream {stream}: {message}")]
    ConsumerInfo {
        /// Stream name.
        stream: String,
        /// Consumer name.
        consumer: String,
        /// The client's reason.
        message: String,
    },
}

/// Reads the consumer's outstanding range from the server (not from the cached info).
pub async fn outstanding(consumer: &PullConsumer) -> Result<Outstanding, RawReadError> {
    let cached = consumer.cached_info();
    let info = consumer
        .get_info()
        .await
        .map_err(|e| RawReadError::ConsumerInfo {
            stream: cached.stream_name.clone(),
            consumer: cached.name.clone(),
            message: e.to_string(),
        })?;
    let mut filters = info.config.filter_subjects.clone();
    if !info.config.filter_subject.is_empty() {
        filters.push(info.config.filter_subject.clone());
    }
    Ok(Outstanding {
        stream: info.stream_name,
        consumer: info.name,
        filters,
        floor: info.ack_floor.stream_sequence,
        delivered: info.delivered.stream_sequence,
        delivered_consumer_seq: info.delivered.consumer_sequence,
    })
}

/// Reads stream sequence `sequence` through `$JS.API.STREAM.MSG.GET.<stream>`; `None` when
/// the stream no longer holds it (deleted, purged, aged out).
pub async fn read(
    client: &Client,
    stream: &str,
    sequence: u64,
) -> Result<Option<RawStored>, RawReadError> {
    let subject = format!("$JS.API.STREAM.MSG.GET.{stream}");
    let body = format!("{{\"seq\":{sequence}}}");
    let answer = client
        .request(subject, body.into())
        .await
        .map_err(|e| RawReadError::Request {
            stream: stream.to_string(),
            sequence,
            message: e.to_string(),
        })?;
    parse_answer(stream, sequence, &answer.payload)
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    message: Option<Stored>,
    #[serde(default)]
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct Stored {
    subject: String,
    seq: u64,
    #[serde(default)]
    hdrs: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    description: String,
}

/// Decodes a `MSG.GET` answer (pure). A 404 is `None`; the sequence in the answer must be
/// the one asked for.
pub fn parse_answer(
    stream: &str,
    sequence: u64,
    body: &[u8],
) -> Result<Option<RawStored>, RawReadError> {
    let decode = |what: String| RawReadError::Decode {
        stream: stream.to_string(),
        sequence,
        what,
    };
    let answer: Answer = serde_json::from_slice(body).map_err(|e| decode(e.to_string()))?;
    if let Some(err) = answer.error {
        if err.code == 404 {
            return Ok(None);
        }
        return Err(RawReadError::Api {
            stream: stream.to_string(),
            sequence,
            code: err.code,
            description: err.description,
        });
    }
    let Some(m) = answer.message else {
        return Err(decode("neither `message` nor `error`".into()));
    };
    if m.seq != sequence {
        return Err(decode(format!("it holds sequence {}", m.seq)));
    }
    let b64 = |field: &str, text: Option<String>| -> Result<Option<Bytes>, RawReadError> {
        text.filter(|t| !t.is_empty())
            .map(|t| STANDARD.decode(t.as_bytes()).map(Bytes::from))
            .transpose()
            .map_err(|e| decode(format!("`{field}` is not base64: {e}")))
    };
    Ok(Some(RawStored {
        subject: m.subject,
        sequence,
        headers: b64("hdrs", m.hdrs)?,
        payload: b64("data", m.data)?.unwrap_or_default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn headers_and_payload_come_back_as_stored_bytes() {
        let hdrs = STANDARD.encode(b"NATS/1.0\r\nBad Name: x\r\n\r\n");
        let body = format!(
            r#"{{"type":"io.nats.jetstream.api.v1.stream_msg_get_response","message":{{"subject":"orders.new","seq":7,"hdrs":"{hdrs}","data":"aGk=","time":"2024-01-01T00:00:00Z"}}}}"#
        );
        let m = parse_answer("ORDERS", 7, body.as_bytes()).unwrap().unwrap();
        assert_eq!(m.subject, "orders.new");
        assert_eq!(
            m.headers.as_deref(),
            Some(&b"NATS/1.0\r\nBad Name: x\r\n\r\n"[..])
        );
        assert_eq!(&m.payload[..], b"hi");
    }

    #[test]
    fn a_message_without_headers_or_payload_is_read() {
        let body = br#"{"message":{"subject":"a","seq":3,"time":"2024-01-01T00:00:00Z"}}"#;
        let m = parse_answer("S", 3, body).unwrap().unwrap();
        assert_eq!(m.headers, None);
        assert!(m.payload.is_empty());
    }

    #[test]
    fn a_deleted_message_is_none_and_other_errors_are_named() {
        let gone = br#"{"error":{"code":404,"err_code":10037,"description":"no message found"}}"#;
        assert!(parse_answer("S", 3, gone).unwrap().is_none());
        let other =
            br#"{"error":{"code":503,"description":"JetStream system temporarily unavailable"}}"#;
        let e = parse_answer("S", 3, other).unwrap_err().to_string();
        assert!(
            e.contains("stream S sequence 3") && e.contains("503"),
            "{e}"
        );
        let wrong = br#"{"message":{"subject":"a","seq":4}}"#;
        assert!(parse_answer("S", 3, wrong).is_err());
        let bad = br#"{"message":{"subject":"a","seq":3,"data":"**"}}"#;
        assert!(parse_answer("S", 3, bad).is_err());
    }

    #[test]
    fn candidates_start_above_the_floor_and_stop_at_the_limit_or_the_last_delivery() {
        let o = Outstanding {
            stream: "S".into(),
            consumer: "c".into(),
            filters: vec![],
            floor: 10,
            delivered: 200,
            delivered_consumer_seq: 300,
        };
        assert_eq!(o.candidates(50), 11..=60);
        assert_eq!(o.candidates(1_000), 11..=200);
        let idle = Outstanding {
            floor: 200,
            ..o.clone()
        };
        assert!(idle.candidates(50).is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn any_answer_is_judged_without_panicking(body in proptest::collection::vec(any::<u8>(), 0..256), seq in any::<u64>()) {
            let _ = parse_answer("S", seq, &body);
        }

        #[test]
        fn any_stored_bytes_round_trip(hdrs in proptest::collection::vec(any::<u8>(), 0..128), data in proptest::collection::vec(any::<u8>(), 0..128), seq in 1u64..) {
            let body = serde_json::json!({"message": {"subject": "a.b", "seq": seq, "hdrs": STANDARD.encode(&hdrs), "data": STANDARD.encode(&data)}});
            let m = parse_answer("S", seq, body.to_string().as_bytes()).unwrap().unwrap();
            prop_assert_eq!(m.headers.map(|h| h.to_vec()).unwrap_or_default(), hdrs);
            prop_assert_eq!(m.payload.to_vec(), data);
        }

        #[test]
        fn candidates_never_leave_the_outstanding_range(floor in 0u64..1_000_000, extra in 0u64..100_000, limit in 0u64..20_000) {
            let o = Outstanding { stream: "S".into(), consumer: "c".into(), filters: vec![], floor, delivered: floor + extra, delivered_consumer_seq: 0 };
            let r = o.candidates(limit);
            if !r.is_empty() {
                prop_assert!(*r.start() > floor && *r.end() <= floor + extra);
                prop_assert!(r.end() - r.start() < limit.max(1));
            }
        }
    }
}
