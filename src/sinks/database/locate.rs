//! What `jetsink trace` asks a database destination's table, decided once for every
//! engine: which columns of the mapping answer it, which column the wanted value is
//! matched against, and how the row found becomes a [`Located`] answer. The engines only
//! run the query, with their own quoting and placeholders, on a connection of their own
//! that creates and writes nothing.

use super::columns::{Field, Mapping};
use crate::sinks::contract::{Located, Wanted};

/// One lookup of a message in a table, by column names of the mapping. Values are never
/// part of the SQL: `value` and the stream are parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query<'a> {
    /// The column holding the idempotency key (the row's identity in the answer).
    pub key: &'a str,
    /// The column holding the stream name, which every lookup is filtered on.
    pub stream: &'a str,
    /// The column holding the stream sequence, if the mapping stores it.
    pub sequence: Option<&'a str>,
    /// The column holding the delivery count that wrote the row, if the mapping stores it.
    pub delivered: Option<&'a str>,
    /// The column `value` is matched against.
    pub matched: &'a str,
    /// The key or the message id looked for.
    pub value: &'a str,
    /// The column to order by, descending, when several rows may match and the latest
    /// (highest stream sequence) answers: a message id can be carried by several messages
    /// of a stream.
    pub latest_by: Option<&'a str>,
}

impl<'a> Query<'a> {
    /// The lookup of `wanted` in a table laid out by `mapping`, or why the table cannot
    /// answer it (the mapping stores neither the key and the stream, as counting stored
    /// keys needs, nor, for a message id, the id).
    pub fn new(mapping: &'a Mapping, wanted: Wanted<'a>) -> Result<Query<'a>, String> {
        let Some((key, stream)) = mapping.key_and_stream_columns() else {
            return Err("the columns mapping stores no $idempotency_key or no $stream column, so rows cannot be matched to a message".into());
        };
        let (matched, value, latest) = match wanted {
            Wanted::Key(k) => (key, k, false),
            Wanted::MessageId(id) => match mapping.column_of(Field::MessageId) {
                Some(column) => (column, id, true),
                None => {
                    return Err("the columns mapping stores no $message_id column, so a message id cannot be looked up (ask by stream sequence instead)".into())
                }
            },
        };
        Ok(Query {
            key,
            stream,
            sequence: mapping.column_of(Field::StreamSequence),
            delivered: mapping.column_of(Field::Delivered),
            matched,
            value,
            latest_by: mapping.column_of(Field::StreamSequence).filter(|_| latest),
        })
    }

    /// The answer for what the query found in `table`: the row's key and, as text, its
    /// stream sequence and delivery count (the engines read them as text, so a user's
    /// column of any numeric or text type answers alike).
    pub fn answer(&self, table: &str, found: Found) -> Located {
        match found {
            Found::NoTable => Located::Absent(format!("table {table} does not exist yet")),
            Found::NoRow => Located::Absent(format!(
                "no row {} = {:?} in table {table}",
                self.matched, self.value
            )),
            Found::Row {
                key,
                sequence,
                delivered,
            } => Located::Stored {
                place: format!("table {table}, row {} = {key:?}", self.key),
                sequence: sequence.and_then(|s| s.trim().parse().ok()),
                delivered: delivered.and_then(|d| d.trim().parse().ok()),
            },
        }
    }
}

/// What an engine's query found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The table does not exist (or this user may not see it).
    NoTable,
    /// The table has no such row.
    NoRow,
    /// The row: its key, stream sequence and delivery count as text.
    Row {
        /// The idempotency key.
        key: String,
        /// The stream sequence, when the mapping stores it.
        sequence: Option<String>,
        /// The delivery count, when the mapping stores it.
        delivered: Option<String>,
    },
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn mapping(pairs: &[(&str, &str)]) -> Mapping {
        let columns: BTreeMap<String, String> = pairs
            .iter()
            .map(|(c, s)| (c.to_string(), s.to_string()))
            .collect();
        Mapping::parse(&columns).unwrap()
    }

    #[test]
    fn the_default_layout_matches_a_key_on_its_column_and_an_id_on_the_latest_row() {
        let m = Mapping::default_layout();
        let q = Query::new(&m, Wanted::Key("S:7")).unwrap();
        assert_eq!(
            (q.key, q.stream, q.matched, q.latest_by),
            ("idempotency_key", "stream", "idempotency_key", None)
        );
        assert_eq!(
            (q.sequence, q.delivered),
            (Some("stream_sequence"), Some("delivered"))
        );
        let q = Query::new(&m, Wanted::MessageId("m-7")).unwrap();
        assert_eq!(
            (q.matched, q.value, q.latest_by),
            ("message_id", "m-7", Some("stream_sequence"))
        );
    }

    #[test]
    fn a_mapping_without_the_key_or_the_id_cannot_be_asked_and_says_why() {
        let no_key = mapping(&[("s", "$stream"), ("p", "$payload")]);
        let why = Query::new(&no_key, Wanted::Key("S:1")).unwrap_err();
        assert!(why.contains("$idempotency_key"), "{why}");
        let no_id = mapping(&[("k", "$idempotency_key"), ("s", "$stream")]);
        assert!(Query::new(&no_id, Wanted::Key("S:1")).is_ok());
        let why = Query::new(&no_id, Wanted::MessageId("m")).unwrap_err();
        assert!(why.contains("$message_id"), "{why}");
    }

    #[test]
    fn a_found_row_answers_with_its_key_column_and_numbers_an_absent_one_with_where_it_looked() {
        let m = mapping(&[
            ("k", "$idempotency_key"),
            ("s", "$stream"),
            ("n", "$stream_sequence"),
        ]);
        let q = Query::new(&m, Wanted::Key("S:7")).unwrap();
        let row = Found::Row {
            key: "S:7".into(),
            sequence: Some("7".into()),
            delivered: None,
        };
        assert_eq!(
            q.answer("t", row),
            Located::Stored {
                place: "table t, row k = \"S:7\"".into(),
                sequence: Some(7),
                delivered: None,
            }
        );
        assert_eq!(
            q.answer("t", Found::NoRow),
            Located::Absent("no row k = \"S:7\" in table t".into())
        );
        assert!(
            matches!(q.answer("t", Found::NoTable), Located::Absent(w) if w.contains("does not exist"))
        );
    }
}
