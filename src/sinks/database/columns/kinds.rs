//! The two sides of the type check at start-up: the kind of value a mapped source yields,
//! the class a database column's type falls into, and which kinds each class can hold.

/// The kind of value a source yields, for the type check at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// A string.
    Text,
    /// A non-negative integer (sequences, counts).
    Integer,
    /// A point in time.
    Timestamp,
    /// A JSON document (headers, labels).
    Json,
    /// Raw bytes (the payload).
    Bytes,
    /// Whatever the payload holds at a JSON pointer: string, number, boolean, null,
    /// object or array; known only per message.
    Any,
}

impl ValueKind {
    /// A word for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ValueKind::Text => "text",
            ValueKind::Integer => "an integer",
            ValueKind::Timestamp => "a timestamp",
            ValueKind::Json => "JSON",
            ValueKind::Bytes => "bytes",
            ValueKind::Any => "a JSON value",
        }
    }
}

/// Database-independent class of a column type, into which each database sorts its own
/// type names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Character strings (`text`, `varchar`, `char`).
    Text,
    /// Integers of any width.
    Integer,
    /// Exact or floating-point numbers (`numeric`, `decimal`, `double`).
    Decimal,
    /// Booleans.
    Boolean,
    /// Date and time (with or without time zone).
    Timestamp,
    /// Calendar dates.
    Date,
    /// JSON documents.
    Json,
    /// UUIDs.
    Uuid,
    /// Byte strings (`bytea`, `blob`, `varbinary`).
    Bytes,
    /// Enumerations (accept their labels as text).
    Enum,
    /// Anything else (arrays, geometry, intervals...): jetsink does not write these.
    Other,
}

/// Whether a column of `family` can hold values of `kind`. Conversions that can fail for
/// some values (text into a UUID column, a JSON value into an integer column) are allowed:
/// such a message is then refused on its own, as bad content, while every other message
/// commits. Conversions that can never work, or would silently lose data, are refused at
/// start-up.
pub fn compatible(kind: ValueKind, family: Family) -> bool {
    use Family as F;
    match kind {
        ValueKind::Text => matches!(family, F::Text | F::Enum | F::Uuid),
        ValueKind::Integer => matches!(family, F::Integer | F::Decimal | F::Text),
        ValueKind::Timestamp => matches!(family, F::Timestamp | F::Text),
        ValueKind::Json => matches!(family, F::Json | F::Text),
        ValueKind::Bytes => matches!(family, F::Bytes | F::Json | F::Text),
        ValueKind::Any => !matches!(family, F::Bytes | F::Other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compatibility_table() {
        use Family as F;
        use ValueKind as K;
        let yes = [
            (K::Text, F::Text),
            (K::Text, F::Enum),
            (K::Text, F::Uuid),
            (K::Integer, F::Integer),
            (K::Integer, F::Decimal),
            (K::Integer, F::Text),
            (K::Timestamp, F::Timestamp),
            (K::Timestamp, F::Text),
            (K::Json, F::Json),
            (K::Json, F::Text),
            (K::Bytes, F::Bytes),
            (K::Bytes, F::Json),
            (K::Bytes, F::Text),
            (K::Any, F::Integer),
            (K::Any, F::Boolean),
            (K::Any, F::Date),
            (K::Any, F::Json),
            (K::Any, F::Uuid),
        ];
        let no = [
            (K::Text, F::Integer),
            (K::Text, F::Json),
            (K::Text, F::Bytes),
            (K::Integer, F::Boolean),
            (K::Integer, F::Timestamp),
            (K::Timestamp, F::Date),
            (K::Timestamp, F::Integer),
            (K::Json, F::Bytes),
            (K::Bytes, F::Integer),
            (K::Any, F::Bytes),
            (K::Any, F::Other),
            (K::Text, F::Other),
        ];
        for (k, f) in yes {
            assert!(compatible(k, f), "{k:?} into {f:?}");
        }
        for (k, f) in no {
            assert!(!compatible(k, f), "{k:?} into {f:?}");
        }
    }
}
