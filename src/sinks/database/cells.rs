//! The value each mapped column takes for one envelope, and the payload parsing that JSON
//! pointers need: the write path of the column mapping in [`super::columns`], shared by the
//! PostgreSQL and MySQL encoders so both read `$subject` or `/order/id` the same way.

use std::borrow::Cow;

use serde_json::Value;
use time::OffsetDateTime;

use super::columns::{Field, Marker, MarkerAt, Source, TablePlan};
use crate::envelope::Envelope;

/// One column's value for one envelope, before a database encodes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell<'a> {
    /// SQL `NULL` (an absent optional field, a missing or `null` JSON pointer target).
    Null,
    /// A string.
    Text(Cow<'a, str>),
    /// A non-negative integer.
    UInt(u64),
    /// A point in time.
    Timestamp(OffsetDateTime),
    /// A JSON document, serialized.
    Json(String),
    /// Raw bytes (the payload).
    Bytes(&'a [u8]),
    /// A value found at a JSON pointer (never `null`).
    Value(&'a Value),
}

/// The value `source` gives for `envelope`. `document` is the payload parsed as JSON
/// when the mapping has pointers; `written_at` is the batch's write time.
pub fn cell<'a>(
    source: &'a Source,
    envelope: &'a Envelope,
    document: Option<&'a Value>,
    written_at: OffsetDateTime,
) -> Cell<'a> {
    let text = |s: &'a str| Cell::Text(Cow::Borrowed(s));
    let opt = |s: &'a Option<String>| s.as_deref().map_or(Cell::Null, text);
    match source {
        Source::Field(f) => match f {
            Field::Subject => text(&envelope.subject),
            Field::Stream => text(&envelope.stream),
            Field::Consumer => text(&envelope.consumer),
            Field::StreamSequence => Cell::UInt(envelope.stream_sequence),
            Field::ConsumerSequence => Cell::UInt(envelope.consumer_sequence),
            Field::Delivered => Cell::UInt(envelope.delivered),
            Field::PublishedAt => Cell::Timestamp(envelope.published_at),
            Field::WrittenAt => Cell::Timestamp(written_at),
            Field::MessageId => opt(&envelope.message_id),
            Field::IdempotencyKey => text(&envelope.idempotency_key),
            Field::Headers => Cell::Json(envelope.headers_json().to_string()),
            Field::Priority => opt(&envelope.priority),
            Field::Lane => opt(&envelope.lane),
            Field::Classification => opt(&envelope.classification),
            Field::Labels => {
                Cell::Json(serde_json::to_string(&envelope.labels).unwrap_or_else(|_| "[]".into()))
            }
            Field::TraceId => envelope.trace_id().map_or(Cell::Null, text),
            Field::Payload => Cell::Bytes(&envelope.payload[..]),
        },
        Source::Header(name) => envelope
            .headers
            .iter()
            .rev()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .find_map(|(_, values)| values.last())
            .map_or(Cell::Null, |v| text(v)),
        Source::Pointer(p) => match document.and_then(|d| d.pointer(p)) {
            None | Some(Value::Null) => Cell::Null,
            Some(v) => Cell::Value(v),
        },
        Source::Deleted(marker) => {
            if deletes(marker, envelope, document) {
                Cell::Timestamp(envelope.published_at)
            } else {
                Cell::Null
            }
        }
    }
}

/// Whether `envelope` carries the delete marker: the header's last value, or the plain
/// text of the JSON value at the pointer, is the marker's value exactly.
pub fn deletes(marker: &Marker, envelope: &Envelope, document: Option<&Value>) -> bool {
    match &marker.at {
        MarkerAt::Header(name) => envelope
            .headers
            .iter()
            .rev()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .find_map(|(_, values)| values.last())
            .is_some_and(|v| *v == marker.value),
        MarkerAt::Pointer(p) => match document.and_then(|d| d.pointer(p)) {
            None | Some(Value::Null) => false,
            Some(v) => value_text(v) == marker.value.as_str(),
        },
    }
}

/// The text form of a JSON value for a non-JSON column: a string's content, a number's
/// digits, `true`/`false`, or the JSON text of an object or array.
pub fn value_text(v: &Value) -> Cow<'_, str> {
    match v {
        Value::String(s) => Cow::Borrowed(s.as_str()),
        Value::Number(n) => Cow::Owned(n.to_string()),
        Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Value::Null => Cow::Borrowed("null"),
        other => Cow::Owned(other.to_string()),
    }
}

/// Whether `bytes` is one complete JSON document.
pub fn is_json(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// A payload the column mapping reads with JSON pointers that is not JSON: where it is in
/// the batch and where its JSON breaks, never the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the payload of the message at batch index {index} is not JSON ({category}, line {line} \
     column {column}), but the column mapping reads it with JSON pointers"
)]
pub struct PayloadNotJson {
    /// Batch position of the message.
    pub index: usize,
    /// What kind of JSON error (`syntax error`, `truncated`, ...).
    pub category: &'static str,
    /// Line of the payload where parsing stopped.
    pub line: usize,
    /// Column of that line.
    pub column: usize,
}

/// Parses the payload for JSON pointers; `index` is its batch position, for the error.
pub fn parse_document(envelope: &Envelope, index: usize) -> Result<Value, PayloadNotJson> {
    serde_json::from_slice(&envelope.payload).map_err(|e| PayloadNotJson {
        index,
        category: classify_json_error(&e),
        line: e.line(),
        column: e.column(),
    })
}

/// Parses every payload as JSON when `plan` reads pointers; otherwise a vector of `None`.
/// The error names the first message whose payload is not JSON.
pub fn parse_documents(
    batch: &[Envelope],
    plan: &TablePlan,
) -> Result<Vec<Option<Value>>, PayloadNotJson> {
    if !plan.needs_document() {
        return Ok(vec![None; batch.len()]);
    }
    batch
        .iter()
        .enumerate()
        .map(|(i, e)| parse_document(e, i).map(Some))
        .collect()
}

fn classify_json_error(e: &serde_json::Error) -> &'static str {
    match e.classify() {
        serde_json::error::Category::Io => "read error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "data error",
        serde_json::error::Category::Eof => "truncated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::IdempotencyKey;
    use crate::envelope::{normalize, Delivery};
    use crate::sinks::database::columns::parse_source;
    use bytes::Bytes;

    fn envelope() -> Envelope {
        let mut e = normalize(
            "orders.new",
            Delivery {
                stream: "ORDERS",
                consumer: "sink",
                stream_sequence: 7,
                consumer_sequence: 9,
                delivered: 2,
                published: OffsetDateTime::UNIX_EPOCH,
            },
            [("X-Trace", "t1"), ("x-trace", "t2"), ("Nats-Msg-Id", "m")],
            Bytes::from_static(br#"{"order":{"id":5,"tags":["a"]},"n":null,"s":"x"}"#),
            IdempotencyKey::StreamSequence,
        );
        e.labels = vec!["l".into()];
        e
    }

    #[test]
    fn cells_take_their_values_from_the_envelope_and_payload() {
        let e = envelope();
        let doc: Value = serde_json::from_slice(&e.payload).unwrap();
        let now = OffsetDateTime::now_utc();
        let get = |s: &str| {
            let source = parse_source(s).unwrap();
            format!("{:?}", cell(&source, &e, Some(&doc), now))
        };
        assert_eq!(get("$stream_sequence"), "UInt(7)");
        assert_eq!(get("$consumer_sequence"), "UInt(9)");
        assert_eq!(get("$delivered"), "UInt(2)");
        assert_eq!(get("$subject"), "Text(\"orders.new\")");
        assert_eq!(get("$message_id"), "Text(\"m\")");
        assert_eq!(get("$idempotency_key"), "Text(\"ORDERS:7\")");
        assert_eq!(get("$priority"), "Null");
        assert_eq!(get("$labels"), "Json(\"[\\\"l\\\"]\")");
        assert_eq!(get("$trace_id"), "Null", "no traceparent header");
        assert_eq!(get("$header:X-TRACE"), "Text(\"t2\")");
        assert_eq!(get("$header:absent"), "Null");
        assert_eq!(get("/order/id"), "Value(Number(5))");
        assert_eq!(get("/n"), "Null");
        assert_eq!(get("/missing/deep"), "Null");
        assert_eq!(
            cell(&Source::Field(Field::WrittenAt), &e, None, now),
            Cell::Timestamp(now)
        );
        assert_eq!(
            cell(&Source::Field(Field::Payload), &e, None, now),
            Cell::Bytes(&e.payload[..])
        );
    }

    #[test]
    fn trace_id_is_the_trace_of_a_valid_traceparent_and_null_otherwise() {
        let mut e = envelope();
        let now = OffsetDateTime::now_utc();
        let source = parse_source("$trace_id").unwrap();
        assert_eq!(
            source.kind(),
            crate::sinks::database::columns::ValueKind::Text
        );
        e.headers.push((
            "traceparent".into(),
            vec!["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()],
        ));
        assert_eq!(
            cell(&source, &e, None, now),
            Cell::Text(Cow::Borrowed("4bf92f3577b34da6a3ce929d0e0e4736"))
        );
        // All-zero trace ids are invalid (W3C): treated as absent.
        e.headers.last_mut().unwrap().1 =
            vec!["00-00000000000000000000000000000000-00f067aa0ba902b7-01".into()];
        assert_eq!(cell(&source, &e, None, now), Cell::Null);
    }

    #[test]
    fn value_text_renders_scalars_plainly() {
        assert_eq!(value_text(&serde_json::json!("a\"b")), "a\"b");
        assert_eq!(value_text(&serde_json::json!(12.5)), "12.5");
        assert_eq!(value_text(&serde_json::json!(true)), "true");
        assert_eq!(value_text(&serde_json::json!([1, "x"])), "[1,\"x\"]");
        assert!(is_json(b" {\"a\": [1]} "));
        assert!(!is_json(b"{\"a\": [1]} x"));
        assert!(!is_json(b""));
    }

    #[test]
    fn the_delete_column_holds_the_store_time_of_a_marked_message_and_null_otherwise() {
        let mut e = envelope();
        let doc: Value = serde_json::json!({"op": "d", "flag": true});
        let now = OffsetDateTime::now_utc();
        let marker = |at: MarkerAt, value: &str| {
            Source::Deleted(Marker {
                at,
                value: value.into(),
            })
        };
        let by_header = marker(MarkerAt::Header("jetsink-op".into()), "delete");
        assert_eq!(cell(&by_header, &e, None, now), Cell::Null);
        e.headers
            .push(("Jetsink-Op".into(), vec!["upsert".into(), "delete".into()]));
        assert_eq!(
            cell(&by_header, &e, None, now),
            Cell::Timestamp(e.published_at),
            "the last value, the name in any case"
        );
        let other_case = marker(MarkerAt::Header("Jetsink-Op".into()), "DELETE");
        assert_eq!(
            cell(&other_case, &e, None, now),
            Cell::Null,
            "values match exactly"
        );
        let by_pointer = marker(MarkerAt::Pointer("/op".into()), "d");
        assert_eq!(
            cell(&by_pointer, &e, Some(&doc), now),
            Cell::Timestamp(e.published_at)
        );
        let by_flag = marker(MarkerAt::Pointer("/flag".into()), "true");
        assert!(deletes(
            match &by_flag {
                Source::Deleted(m) => m,
                _ => unreachable!(),
            },
            &e,
            Some(&doc)
        ));
        let absent = marker(MarkerAt::Pointer("/gone".into()), "d");
        assert_eq!(cell(&absent, &e, Some(&doc), now), Cell::Null);
        assert!(by_pointer.reads_payload() && !by_header.reads_payload());
    }
}
