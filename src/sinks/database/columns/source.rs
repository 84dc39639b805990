//! Where a column's value comes from: the envelope fields (`$stream_sequence`), a header
//! (`$header:Name`) or a JSON pointer into the payload (`/order/id`), and the parsing of
//! those config spellings; and the one source no config spelling names, the delete column
//! of an upsert's delete marker.

use super::kinds::ValueKind;

/// An envelope field a column can be mapped from, written `$name` in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// `$subject`: the subject the message was published on.
    Subject,
    /// `$stream`: the stream that stored it.
    Stream,
    /// `$consumer`: the durable consumer that delivered it.
    Consumer,
    /// `$stream_sequence`: stable across redeliveries.
    StreamSequence,
    /// `$consumer_sequence`: grows with each redelivery.
    ConsumerSequence,
    /// `$delivered`: delivery count, this delivery included.
    Delivered,
    /// `$published_at`: when the server stored it.
    PublishedAt,
    /// `$written_at`: when this batch was written.
    WrittenAt,
    /// `$message_id`: the publisher's `Nats-Msg-Id`, if any.
    MessageId,
    /// `$idempotency_key`: what makes the write idempotent.
    IdempotencyKey,
    /// `$headers`: all headers as a JSON object of name → list of values.
    Headers,
    /// `$priority`: normalized priority (message metadata).
    Priority,
    /// `$lane`: the priority lane the message was scheduled in.
    Lane,
    /// `$classification`: normalized classification (message metadata).
    Classification,
    /// `$labels`: normalized labels as a JSON array.
    Labels,
    /// `$trace_id`: the trace id of a valid W3C `traceparent` header (NULL without one), so
    /// a row leads back to the producer's trace.
    TraceId,
    /// `$payload`: the payload bytes.
    Payload,
}

/// Every field with its config spelling (without the `$`).
pub const FIELDS: [(&str, Field); 17] = [
    ("subject", Field::Subject),
    ("stream", Field::Stream),
    ("consumer", Field::Consumer),
    ("stream_sequence", Field::StreamSequence),
    ("consumer_sequence", Field::ConsumerSequence),
    ("delivered", Field::Delivered),
    ("published_at", Field::PublishedAt),
    ("written_at", Field::WrittenAt),
    ("message_id", Field::MessageId),
    ("idempotency_key", Field::IdempotencyKey),
    ("headers", Field::Headers),
    ("priority", Field::Priority),
    ("lane", Field::Lane),
    ("classification", Field::Classification),
    ("labels", Field::Labels),
    ("trace_id", Field::TraceId),
    ("payload", Field::Payload),
];

impl Field {
    /// The config spelling, without the `$`.
    pub fn name(self) -> &'static str {
        FIELDS
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
            .unwrap_or("?")
    }

    /// What kind of value the field is.
    pub fn kind(self) -> ValueKind {
        match self {
            Field::StreamSequence | Field::ConsumerSequence | Field::Delivered => {
                ValueKind::Integer
            }
            Field::PublishedAt | Field::WrittenAt => ValueKind::Timestamp,
            Field::Headers | Field::Labels => ValueKind::Json,
            Field::Payload => ValueKind::Bytes,
            _ => ValueKind::Text,
        }
    }

    /// Whether a redelivery of the same message yields the same value. Only such values
    /// may form the key that makes a write idempotent.
    pub fn is_stable(self) -> bool {
        !matches!(
            self,
            Field::ConsumerSequence | Field::Delivered | Field::WrittenAt | Field::Lane
        )
    }
}

/// Where one column's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Source {
    /// An envelope field (`$stream_sequence`).
    Field(Field),
    /// The last value of a header (`$header:Name`; the name matches case-insensitively).
    Header(String),
    /// A JSON pointer (RFC 6901) into the payload, which must then be JSON (`/order/id`).
    Pointer(String),
    /// The delete column of an upsert (`delete.column`, never written in `columns`): the
    /// time the message was stored in the stream when it carries the delete marker, NULL
    /// for any other message, so a newer update brings a deleted key back.
    Deleted(Marker),
}

/// Where a message says that it deletes its key, and the value that says so.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Marker {
    /// The header or JSON pointer read.
    pub at: MarkerAt,
    /// The value meaning "delete", compared exactly (a JSON value by its plain text).
    pub value: String,
}

/// Where a delete marker is read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MarkerAt {
    /// The last value of a header (name matched case-insensitively).
    Header(String),
    /// A JSON pointer into the payload.
    Pointer(String),
}

impl Marker {
    /// The marker as `validate` shows it: `header Jetsink-Op = "delete"`.
    pub fn describe(&self) -> String {
        match &self.at {
            MarkerAt::Header(h) => format!("header {h} = {:?}", self.value),
            MarkerAt::Pointer(p) => format!("payload {p} = {:?}", self.value),
        }
    }
}

impl Source {
    /// What kind of value the source yields.
    pub fn kind(&self) -> ValueKind {
        match self {
            Source::Field(f) => f.kind(),
            Source::Header(_) => ValueKind::Text,
            Source::Pointer(_) => ValueKind::Any,
            Source::Deleted(_) => ValueKind::Timestamp,
        }
    }

    /// Whether a redelivery yields the same value (see [`Field::is_stable`]).
    pub fn is_stable(&self) -> bool {
        match self {
            Source::Field(f) => f.is_stable(),
            Source::Header(_) | Source::Pointer(_) | Source::Deleted(_) => true,
        }
    }

    /// The config spelling.
    pub fn spelling(&self) -> String {
        match self {
            Source::Field(f) => format!("${}", f.name()),
            Source::Header(h) => format!("$header:{h}"),
            Source::Pointer(p) => p.clone(),
            Source::Deleted(m) => format!("the delete marker, {}", m.describe()),
        }
    }

    /// Whether some message can give no value (SQL NULL): a pointer, a header, an optional
    /// envelope field, the delete column of a message that is not a delete.
    pub fn may_be_null(&self) -> bool {
        match self {
            Source::Field(f) => matches!(
                f,
                Field::MessageId
                    | Field::Priority
                    | Field::Lane
                    | Field::Classification
                    | Field::TraceId
            ),
            Source::Header(_) | Source::Pointer(_) | Source::Deleted(_) => true,
        }
    }

    /// Whether the value is read from the payload as JSON (a pointer, or a delete marker
    /// at a pointer).
    pub fn reads_payload(&self) -> bool {
        matches!(
            self,
            Source::Pointer(_)
                | Source::Deleted(Marker {
                    at: MarkerAt::Pointer(_),
                    ..
                })
        )
    }
}

/// Why a mapping value is not a source, quoting the value as written (the caller names the
/// column it was given for).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `$header:` with no name, or one a NATS header cannot have.
    #[error("`$header:` needs a header name (printable ASCII, no `:`), got {text:?}")]
    HeaderName {
        /// The value as written.
        text: String,
    },
    /// `$name` that names no envelope field.
    #[error(
        "unknown envelope field {text:?} (one of {}, or $header:NAME)",
        field_spellings()
    )]
    UnknownField {
        /// The value as written.
        text: String,
    },
    /// Neither `$...` nor a JSON pointer.
    #[error(
        "must be a JSON pointer starting with `/` (such as /order/id) or an envelope \
         field such as $subject, got {text:?}"
    )]
    NotAPointer {
        /// The value as written.
        text: String,
    },
    /// A JSON pointer with a `~` that is not `~0` or `~1` (RFC 6901).
    #[error("invalid JSON pointer {text:?}: `~` must be written `~0`, and `/` inside a key `~1`")]
    BadEscape {
        /// The value as written.
        text: String,
    },
}

/// Every field as the config spells it, for the message naming the choices.
fn field_spellings() -> String {
    let names: Vec<String> = FIELDS.iter().map(|(n, _)| format!("${n}")).collect();
    names.join(", ")
}

/// Parses a mapping value: `$field`, `$header:Name` or a JSON pointer starting with `/`.
pub fn parse_source(text: &str) -> Result<Source, SourceError> {
    if let Some(rest) = text.strip_prefix('$') {
        if let Some(name) = rest.strip_prefix("header:") {
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b':' && b != b'$');
            return if ok {
                Ok(Source::Header(name.to_string()))
            } else {
                Err(SourceError::HeaderName { text: text.into() })
            };
        }
        return FIELDS
            .iter()
            .find(|(n, _)| *n == rest)
            .map(|(_, f)| Source::Field(*f))
            .ok_or_else(|| SourceError::UnknownField { text: text.into() });
    }
    if !text.starts_with('/') {
        return Err(SourceError::NotAPointer { text: text.into() });
    }
    // RFC 6901: `~` only as `~0` or `~1`.
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.peek(), Some('0') | Some('1')) {
            return Err(SourceError::BadEscape { text: text.into() });
        }
    }
    Ok(Source::Pointer(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_or_say_why_not() {
        assert_eq!(
            parse_source("$stream_sequence"),
            Ok(Source::Field(Field::StreamSequence))
        );
        assert_eq!(
            parse_source("$header:X-Trace"),
            Ok(Source::Header("X-Trace".into()))
        );
        assert_eq!(
            parse_source("/order/id"),
            Ok(Source::Pointer("/order/id".into()))
        );
        assert_eq!(
            parse_source("/a~1b/~0c"),
            Ok(Source::Pointer("/a~1b/~0c".into()))
        );
        for (bad, needle) in [
            ("$nope", "unknown envelope field"),
            ("$header:", "needs a header name"),
            ("$header:a b", "needs a header name"),
            ("order/id", "must be a JSON pointer"),
            ("", "must be a JSON pointer"),
            ("/a~2", "invalid JSON pointer"),
            ("/a~", "invalid JSON pointer"),
        ] {
            let e = parse_source(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad:?}: {e}");
        }
        for (name, f) in FIELDS {
            assert_eq!(parse_source(&format!("${name}")), Ok(Source::Field(f)));
            assert_eq!(f.name(), name);
        }
    }

    #[test]
    fn an_unknown_field_lists_every_field() {
        let e = parse_source("$nope").unwrap_err().to_string();
        assert!(e.starts_with("unknown envelope field \"$nope\" (one of $subject, $stream,"));
        assert!(e.ends_with("$payload, or $header:NAME)"), "{e}");
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        fn source() -> impl Strategy<Value = Source> {
            prop_oneof![
                prop::sample::select(FIELDS.iter().map(|(_, f)| *f).collect::<Vec<_>>())
                    .prop_map(Source::Field),
                "[!-#%-9;-~]{1,24}".prop_map(Source::Header),
                "(/([A-Za-z0-9_ .-]|~0|~1){0,6}){1,4}".prop_map(Source::Pointer),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1_000))]

            #[test]
            fn any_mapping_value_is_parsed_or_refused_without_panic(text in any::<String>()) {
                if let Err(e) = parse_source(&text) {
                    prop_assert!(!e.to_string().is_empty());
                }
            }

            #[test]
            fn every_source_reads_back_from_its_config_spelling(src in source()) {
                prop_assert_eq!(parse_source(&src.spelling()), Ok(src));
            }
        }
    }
}
