//! The dead-letter copy of a refused message, built as a pure function so its headers are
//! tested without a server.
//!
//! The copy keeps the original payload and headers and adds the context an operator needs
//! to triage it. Server directives among the original headers (`Nats-Msg-Id`,
//! `Nats-Expected-*`, `Nats-Rollup`, `Nats-TTL`, ...) are not copied: they would act on the
//! dead-letter publish itself. The original `Nats-Msg-Id` is kept as
//! `Jetsink-Original-Msg-Id`, and the copy's own `Nats-Msg-Id` is
//! `<sink>:<stream>:<sequence>`, so the dead-letter stream drops a second copy of the same
//! original from the same sink, while two sinks dead-lettering the same original into one
//! stream each keep their copy. A copy without the original payload — `include_payload:
//! false`, or a copy too large to publish ([`without_payload`]) — says so with
//! `Jetsink-Payload-Omitted: <original payload bytes>`, so a replay can refuse it. An
//! original header
//! with the name of a context header is dropped, so a publisher cannot forge the context;
//! every other header, `Jetsink-Priority` and `Nats-Sinks-Priority` included, is kept, so a
//! replayed message keeps its metadata.

use async_nats::HeaderMap;
use bytes::Bytes;
use time::OffsetDateTime;

use crate::config::dead_letter::DeadLetterConfig;
use crate::envelope::{rfc3339, Envelope};

/// Header: `transient` or `permanent` (or `max_deliveries` for advisory-driven copies).
pub const ERROR_CLASS: &str = "Jetsink-Error-Class";
/// Header: the bounded error text.
pub const ERROR: &str = "Jetsink-Error";
/// Header: the sink that refused the message.
pub const SINK: &str = "Jetsink-Sink";
/// Header: the subject the message was published on.
pub const ORIGINAL_SUBJECT: &str = "Jetsink-Original-Subject";
/// Header: the stream that stored it.
pub const ORIGINAL_STREAM: &str = "Jetsink-Original-Stream";
/// Header: its stream sequence.
pub const ORIGINAL_SEQUENCE: &str = "Jetsink-Original-Sequence";
/// Header: the publisher's `Nats-Msg-Id`, if it had one.
pub const ORIGINAL_MSG_ID: &str = "Jetsink-Original-Msg-Id";
/// Header: its delivery count when it was refused.
pub const DELIVERED: &str = "Jetsink-Delivered";
/// Header: when it was refused (RFC 3339, UTC).
pub const FAILED_AT: &str = "Jetsink-Failed-At";
/// Header: why it was dead-lettered (`metadata`, `lane`, `destination`, `last_delivery`,
/// `max_deliveries`).
pub const REASON: &str = "Jetsink-Reason";
/// Header: the copy carries no payload; the value is the original payload's size in bytes.
pub const PAYLOAD_OMITTED: &str = "Jetsink-Payload-Omitted";
/// Every `Jetsink-Error-Class` a copy can carry: a destination's or a stage's refusal
/// (`permanent`), an error nobody recognised that outlasted `max_held_ms`
/// (`unclassified`), a message given up at shutdown on its last delivery (`transient`),
/// one the server gave up on (`max_deliveries`), one the client could not read
/// (`malformed_message`).
pub const ERROR_CLASSES: [&str; 5] = [
    "permanent",
    "unclassified",
    "transient",
    "max_deliveries",
    "malformed_message",
];
/// Header of a copy of a message the client could not read: its raw header block, base64.
pub const ORIGINAL_HEADERS_BASE64: &str = "Jetsink-Original-Headers-Base64";
/// Every context header jetsink adds (not `Nats-Msg-Id`).
pub const CONTEXT: [&str; 13] = [
    ERROR_CLASS,
    ERROR,
    SINK,
    ORIGINAL_SUBJECT,
    ORIGINAL_STREAM,
    ORIGINAL_SEQUENCE,
    ORIGINAL_MSG_ID,
    DELIVERED,
    FAILED_AT,
    REASON,
    PAYLOAD_OMITTED,
    ORIGINAL_HEADERS_BASE64,
    "Jetsink-Replayed",
];

/// Whether a header is one of jetsink's context headers.
pub fn is_context(name: &str) -> bool {
    CONTEXT.iter().any(|c| c.eq_ignore_ascii_case(name))
}

/// Whether a header tells the server how to store a publish; such headers must not travel
/// from an original to its copy or replay.
pub fn is_server_directive(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "nats-msg-id" | "nats-rollup" | "nats-ttl" | "nats-incr"
    ) || n.starts_with("nats-expected-")
        || n.starts_with("nats-batch-")
        || n.starts_with("nats-schedule")
}

/// A copy ready to publish.
#[derive(Debug, Clone)]
pub struct Copy {
    /// Dead-letter subject.
    pub subject: String,
    /// Headers, `Nats-Msg-Id` included.
    pub headers: HeaderMap,
    /// Payload (empty when `include_payload` is false or it was omitted for size).
    pub payload: Bytes,
    /// `<sink>:<stream>:<sequence>` of the original: the copy's `Nats-Msg-Id`.
    pub msg_id: String,
}

/// The size the server counts against `max_payload` for a publish of this copy: the
/// serialized header block plus the payload.
pub fn wire_size(c: &Copy) -> usize {
    let mut headers = "NATS/1.0\r\n".len() + "\r\n".len();
    for (name, values) in c.headers.iter() {
        for v in values {
            headers +=
                AsRef::<str>::as_ref(name).len() + ": ".len() + v.as_str().len() + "\r\n".len();
        }
    }
    headers + c.payload.len()
}

/// The copy without its payload, marked with [`PAYLOAD_OMITTED`] and the original size:
/// what is published when the whole copy would exceed the server's `max_payload` or the
/// dead-letter stream's message size limit, so the message is dead-lettered instead of
/// handed back forever.
pub fn without_payload(mut c: Copy, original_len: usize) -> Copy {
    c.headers
        .insert(PAYLOAD_OMITTED, original_len.to_string().as_str());
    c.payload = Bytes::new();
    c
}

/// Makes an error text safe for a header: control characters (a header cannot hold CR or
/// LF) become spaces, and the text is cut to `max_chars` characters.
pub fn bounded_error(text: &str, max_chars: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(max_chars)
        .collect();
    if text.chars().count() > max_chars {
        out.push('…');
    }
    out
}

/// What every copy says about its original and why it was copied.
pub struct Context<'a> {
    /// The sink that copied it.
    pub sink: &'a str,
    /// The original's subject.
    pub subject: &'a str,
    /// The stream holding the original.
    pub stream: &'a str,
    /// The original's stream sequence.
    pub sequence: u64,
    /// `Jetsink-Error-Class`.
    pub class: &'a str,
    /// `Jetsink-Error`, bounded by `max_error_length`.
    pub error: &'a str,
    /// `Jetsink-Reason`.
    pub reason: &'a str,
    /// `Jetsink-Failed-At`.
    pub failed_at: OffsetDateTime,
}

/// Completes a copy: adds the context headers and the copy's `Nats-Msg-Id` — one per sink
/// and original, so a repeated copy from one sink is dropped by the duplicate window and
/// copies from two sinks are both kept — to `headers`
/// (the original's own headers, or whatever stands for them), and takes the payload — or,
/// with `include_payload: false`, marks it omitted. Every kind of copy ends here, so they
/// all carry the same context.
pub fn finish(
    cfg: &DeadLetterConfig,
    ctx: &Context<'_>,
    mut headers: HeaderMap,
    payload: &Bytes,
) -> Copy {
    let msg_id = format!("{}:{}:{}", ctx.sink, ctx.stream, ctx.sequence);
    headers.insert(ERROR_CLASS, ctx.class);
    headers.insert(
        ERROR,
        bounded_error(ctx.error, cfg.max_error_length).as_str(),
    );
    headers.insert(SINK, ctx.sink);
    headers.insert(ORIGINAL_SUBJECT, ctx.subject);
    headers.insert(ORIGINAL_STREAM, ctx.stream);
    headers.insert(ORIGINAL_SEQUENCE, ctx.sequence.to_string().as_str());
    headers.insert(FAILED_AT, rfc3339(ctx.failed_at).as_str());
    headers.insert(REASON, ctx.reason);
    headers.insert("Nats-Msg-Id", msg_id.as_str());
    if !cfg.include_payload {
        headers.insert(PAYLOAD_OMITTED, payload.len().to_string().as_str());
    }
    Copy {
        subject: cfg.subject_for(ctx.sink, ctx.subject),
        headers,
        payload: if cfg.include_payload {
            payload.clone()
        } else {
            Bytes::new()
        },
        msg_id,
    }
}

/// Builds the dead-letter copy of `envelope`.
pub fn build(
    cfg: &DeadLetterConfig,
    sink: &str,
    envelope: &Envelope,
    class: &str,
    error: &str,
    reason: &str,
    failed_at: OffsetDateTime,
) -> Copy {
    let mut headers = HeaderMap::new();
    if cfg.include_headers {
        for (name, values) in envelope.clear_headers() {
            if is_server_directive(name) || is_context(name) {
                continue;
            }
            for v in values {
                headers.append(name.as_str(), v.as_str());
            }
        }
    }
    if let Some(id) = &envelope.message_id {
        headers.insert(ORIGINAL_MSG_ID, id.as_str());
    }
    headers.insert(DELIVERED, envelope.delivered.to_string().as_str());
    let ctx = Context {
        sink,
        subject: &envelope.subject,
        stream: &envelope.stream,
        sequence: envelope.stream_sequence,
        class,
        error,
        reason,
        failed_at,
    };
    finish(cfg, &ctx, headers, envelope.clear_payload())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdempotencyKey;
    use crate::envelope::{normalize, Delivery};

    fn envelope() -> Envelope {
        normalize(
            "orders.new",
            Delivery {
                stream: "ORDERS",
                consumer: "c",
                stream_sequence: 42,
                consumer_sequence: 50,
                delivered: 3,
                published: OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap(),
            },
            [
                ("Nats-Msg-Id", "order-7"),
                ("Nats-Expected-Stream", "ORDERS"),
                ("X-Trace", "abc"),
                ("Jetsink-Error", "forged"),
                ("Jetsink-Priority", "urgent"),
                ("Nats-Sinks-Priority", "high"),
            ],
            Bytes::from_static(b"{\"bad\":true}"),
            IdempotencyKey::StreamSequence,
        )
    }

    #[test]
    fn the_copy_keeps_payload_and_headers_and_adds_every_context_header() {
        let cfg = DeadLetterConfig {
            subject: "dlq.{sink}.{subject}".into(),
            ..Default::default()
        };
        let at = OffsetDateTime::from_unix_timestamp(1_700_000_100).unwrap();
        let c = build(
            &cfg,
            "db",
            &envelope(),
            "permanent",
            "CHECK constraint failed",
            "destination",
            at,
        );
        assert_eq!(c.subject, "dlq.db.orders.new");
        assert_eq!(&c.payload[..], b"{\"bad\":true}");
        let get = |n: &str| c.headers.get(n).map(|v| v.as_str().to_string());
        assert_eq!(get("X-Trace").as_deref(), Some("abc"));
        assert_eq!(get(ERROR_CLASS).as_deref(), Some("permanent"));
        assert_eq!(get(ERROR).as_deref(), Some("CHECK constraint failed"));
        assert_eq!(get(SINK).as_deref(), Some("db"));
        assert_eq!(get(ORIGINAL_SUBJECT).as_deref(), Some("orders.new"));
        assert_eq!(get(ORIGINAL_STREAM).as_deref(), Some("ORDERS"));
        assert_eq!(get(ORIGINAL_SEQUENCE).as_deref(), Some("42"));
        assert_eq!(get(ORIGINAL_MSG_ID).as_deref(), Some("order-7"));
        assert_eq!(get(DELIVERED).as_deref(), Some("3"));
        assert_eq!(
            get(FAILED_AT).as_deref(),
            Some("2023-11-14T22:15:00.000000000Z")
        );
        assert_eq!(get(REASON).as_deref(), Some("destination"));
        assert_eq!(get("Nats-Msg-Id").as_deref(), Some("db:ORDERS:42"));
        assert_eq!(get(PAYLOAD_OMITTED), None, "the payload is there");
        assert_eq!(
            get("Nats-Expected-Stream"),
            None,
            "server directives are not copied"
        );
        assert_ne!(
            get(ERROR).as_deref(),
            Some("forged"),
            "a publisher cannot forge the context"
        );
    }

    #[test]
    fn payload_and_headers_can_be_left_out() {
        let cfg = DeadLetterConfig {
            include_payload: false,
            include_headers: false,
            ..Default::default()
        };
        let c = build(
            &cfg,
            "db",
            &envelope(),
            "permanent",
            "x",
            "metadata",
            OffsetDateTime::UNIX_EPOCH,
        );
        assert!(c.payload.is_empty());
        assert!(c.headers.get("X-Trace").is_none());
        assert!(c.headers.get(ERROR).is_some());
        assert_eq!(
            c.headers.get(PAYLOAD_OMITTED).map(|v| v.as_str()),
            Some("12"),
            "a copy without payload says so, with the original size"
        );
    }

    #[test]
    fn two_sinks_copying_one_original_get_different_msg_ids() {
        let cfg = DeadLetterConfig::default();
        let at = OffsetDateTime::UNIX_EPOCH;
        let a = build(&cfg, "a", &envelope(), "permanent", "x", "destination", at);
        let b = build(&cfg, "b", &envelope(), "permanent", "x", "destination", at);
        assert_ne!(a.msg_id, b.msg_id);
        assert_eq!(
            a.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
            Some(a.msg_id.as_str())
        );
    }

    #[test]
    fn wire_size_counts_headers_and_payload_like_the_server() {
        let cfg = DeadLetterConfig::default();
        let c = build(
            &cfg,
            "db",
            &envelope(),
            "permanent",
            "x",
            "destination",
            OffsetDateTime::UNIX_EPOCH,
        );
        let mut block = String::from("NATS/1.0\r\n");
        for (name, values) in c.headers.iter() {
            for v in values {
                block.push_str(&format!("{}: {}\r\n", name, v.as_str()));
            }
        }
        block.push_str("\r\n");
        assert_eq!(wire_size(&c), block.len() + 12);
        let bare = without_payload(c, 12);
        assert!(bare.payload.is_empty());
        assert_eq!(
            bare.headers.get(PAYLOAD_OMITTED).map(|v| v.as_str()),
            Some("12")
        );
        assert!(wire_size(&bare) < block.len() + 12 + 40);
    }

    #[test]
    fn a_forged_payload_omitted_header_is_not_copied() {
        let mut e = envelope();
        e.headers
            .push((PAYLOAD_OMITTED.to_string(), vec!["1".to_string()]));
        let c = build(
            &DeadLetterConfig::default(),
            "db",
            &e,
            "permanent",
            "x",
            "destination",
            OffsetDateTime::UNIX_EPOCH,
        );
        assert_eq!(c.headers.get(PAYLOAD_OMITTED), None);
    }

    #[test]
    fn error_texts_are_bounded_and_single_line() {
        assert_eq!(bounded_error("a\r\nb\tc", 100), "a  b c");
        let long = "x".repeat(5000);
        let b = bounded_error(&long, 64);
        assert_eq!(b.chars().count(), 65);
        assert!(b.ends_with('…'));
    }
}
