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

use async_nats::HeaderMap;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::Bytes;
use time::OffsetDateTime;

use super::copy::{finish, Context, Copy};
use super::{DeadLetters, PublishFailed, Reason};
use crate::config::dead_letter::DeadLetterConfig;

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
    let ctx = Context {
        sink,
        subject: m.subject,
        stream: m.stream,
        sequence: m.sequence,
        class: CLASS,
        error: why,
        reason: Reason::Malformed.as_str(),
        failed_at,
    };
    finish(cfg, &ctx, headers, &m.payload)
}

impl DeadLetters {
    /// Publishes the copy of an unreadable message and waits for the stream to store it,
    /// without its payload (and header block) when it is too large, like every copy.
    pub async fn publish_unreadable(
        &self,
        m: &Unreadable<'_>,
        why: &str,
    ) -> Result<(), PublishFailed> {
        let at = OffsetDateTime::now_utc();
        self.publish_copy(
            |cfg| build(cfg, &self.sink, m, why, at),
            m.payload.len(),
            m.stream,
            m.sequence,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::copy::{
        ERROR, ERROR_CLASS, ORIGINAL_SEQUENCE, ORIGINAL_STREAM, ORIGINAL_SUBJECT, PAYLOAD_OMITTED,
        REASON, SINK,
    };

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
        // Marked like every copy without its payload, so `dlq replay` refuses it.
        assert_eq!(
            c.headers.get(PAYLOAD_OMITTED).map(|v| v.as_str()),
            Some("7")
        );
    }
}
