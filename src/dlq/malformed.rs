//! The dead-letter copy of a message whose header block the NATS client cannot read.
//!
//! Such a message never becomes an [`Envelope`](crate::envelope::Envelope): it is read raw
//! by sequence, and its headers cannot be put in a header map. The copy therefore carries
//! the usual context headers (built with [`copy`](super::copy)'s names and helpers) and
//! keeps the original header block byte for byte, base64-encoded, in
//! `Jetsink-Original-Headers-Base64`, so nothing of the original is lost and an operator
//! can decode exactly what the publisher sent. The payload is the original payload,
//! unchanged (or empty with `include_payload: false`); the block is left out with
//! `include_headers: false`, like the headers of every other copy.

use std::time::Duration;

use async_nats::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use time::OffsetDateTime;

use super::copy::{
    bounded_error, Copy, ERROR, ERROR_CLASS, FAILED_AT, ORIGINAL_SEQUENCE, ORIGINAL_STREAM,
    ORIGINAL_SUBJECT, REASON, SINK,
};
use super::{DeadLetters, PublishFailed, Reason};
use crate::config::dead_letter::DeadLetterConfig;
use crate::envelope::rfc3339;

/// The `Jetsink-Error-Class` of these copies.
pub const CLASS: &str = "malformed_message";
/// Header: the original header block, standard base64 with padding.
pub use super::copy::ORIGINAL_HEADERS_BASE64;

/// What is known of a message read raw from its stream.
#[derive(Debug, Clone)]
pub struct Unreadable<'a> {
    /// The stream that holds it.
    pub stream: &'a str,
    /// The subject it was published on.
    pub subject: &'a str,
    /// Its stream sequence.
    pub sequence: u64,
    /// The header block exactly as stored.
    pub headers: &'a [u8],
    /// Its payload.
    pub payload: Bytes,
}

/// Builds the copy (pure). `why` says what the client refuses in the block.
pub fn build(
    cfg: &DeadLetterConfig,
    sink: &str,
    m: &Unreadable<'_>,
    why: &str,
    failed_at: OffsetDateTime,
) -> Copy {
    let mut headers = HeaderMap::new();
    if cfg.include_headers {
        headers.insert(ORIGINAL_HEADERS_BASE64, STANDARD.encode(m.headers).as_str());
    }
    let msg_id = format!("{}:{}", m.stream, m.sequence);
    headers.insert(ERROR_CLASS, CLASS);
    headers.insert(ERROR, bounded_error(why, cfg.max_error_length).as_str());
    headers.insert(SINK, sink);
    headers.insert(ORIGINAL_SUBJECT, m.subject);
    headers.insert(ORIGINAL_STREAM, m.stream);
    headers.insert(ORIGINAL_SEQUENCE, m.sequence.to_string().as_str());
    headers.insert(FAILED_AT, rfc3339(failed_at).as_str());
    headers.insert(REASON, Reason::Malformed.as_str());
    headers.insert("Nats-Msg-Id", format!("{sink}:{msg_id}").as_str());
    Copy {
        subject: cfg.subject_for(sink, m.subject),
        headers,
        payload: if cfg.include_payload {
            m.payload.clone()
        } else {
            Bytes::new()
        },
        msg_id,
    }
}

impl DeadLetters {
    /// Publishes the copy of an unreadable message and waits for the stream to store it.
    pub async fn publish_unreadable(
        &self,
        m: &Unreadable<'_>,
        why: &str,
    ) -> Result<(), PublishFailed> {
        let c = build(&self.cfg, &self.sink, m, why, OffsetDateTime::now_utc());
        let fail = |message: String| PublishFailed {
            subject: c.subject.clone(),
            message,
        };
        let ack = self
            .js
            .publish_with_headers(c.subject.clone(), c.headers.clone(), c.payload.clone())
            .await
            .map_err(|e| fail(e.to_string()))?;
        let limit = Duration::from_millis(self.cfg.publish_timeout_ms);
        match tokio::time::timeout(limit, ack).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(fail(e.to_string())),
            Err(_) => Err(fail(format!(
                "no acknowledgement within {} ms",
                self.cfg.publish_timeout_ms
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreadable(block: &[u8]) -> Unreadable<'_> {
        Unreadable {
            stream: "ORDERS",
            subject: "orders.new",
            sequence: 42,
            headers: block,
            payload: Bytes::from_static(b"{\"n\":1}"),
        }
    }

    #[test]
    fn the_copy_keeps_the_block_byte_for_byte_and_the_payload_unchanged() {
        let cfg = DeadLetterConfig {
            subject: "dlq.{sink}.{subject}".into(),
            ..Default::default()
        };
        let block = b"NATS/1.0\r\nBad Name: x\r\nY: \xff\r\n\r\n";
        let at = OffsetDateTime::from_unix_timestamp(1_700_000_100).unwrap();
        let c = build(
            &cfg,
            "db",
            &unreadable(block),
            "header line 2: bad name",
            at,
        );
        assert_eq!(c.subject, "dlq.db.orders.new");
        assert_eq!(&c.payload[..], b"{\"n\":1}");
        let get = |n: &str| c.headers.get(n).map(|v| v.as_str().to_string());
        let b64 = get(ORIGINAL_HEADERS_BASE64).unwrap();
        assert_eq!(STANDARD.decode(b64).unwrap(), block);
        assert_eq!(get(ERROR_CLASS).as_deref(), Some("malformed_message"));
        assert_eq!(get(REASON).as_deref(), Some("malformed"));
        assert_eq!(get(SINK).as_deref(), Some("db"));
        assert_eq!(get(ORIGINAL_STREAM).as_deref(), Some("ORDERS"));
        assert_eq!(get(ORIGINAL_SEQUENCE).as_deref(), Some("42"));
        assert_eq!(get(ORIGINAL_SUBJECT).as_deref(), Some("orders.new"));
        assert_eq!(get(ERROR).as_deref(), Some("header line 2: bad name"));
        assert_eq!(get("Nats-Msg-Id").as_deref(), Some("db:ORDERS:42"));
    }

    #[test]
    fn include_switches_leave_out_the_block_and_the_payload() {
        let cfg = DeadLetterConfig {
            include_payload: false,
            include_headers: false,
            ..Default::default()
        };
        let c = build(
            &cfg,
            "db",
            &unreadable(b"NATS/1.0\r\nA B: c\r\n\r\n"),
            "x",
            OffsetDateTime::UNIX_EPOCH,
        );
        assert!(c.payload.is_empty());
        assert!(c.headers.get(ORIGINAL_HEADERS_BASE64).is_none());
        assert!(c.headers.get(ERROR_CLASS).is_some());
    }
}
