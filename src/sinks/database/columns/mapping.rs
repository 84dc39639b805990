//! Which column receives which value: the jetsink table layout, and a user's own mapping
//! parsed from the config's `columns`, with the column names every database can quote.

use std::collections::BTreeMap;

use super::source::{parse_source, Field, Source};

/// The columns of the jetsink table layout and where their values come from, in table
/// order.
pub const DEFAULT_LAYOUT: [(&str, Field); 16] = [
    ("idempotency_key", Field::IdempotencyKey),
    ("stream", Field::Stream),
    ("stream_sequence", Field::StreamSequence),
    ("consumer_sequence", Field::ConsumerSequence),
    ("subject", Field::Subject),
    ("delivered", Field::Delivered),
    ("published_at", Field::PublishedAt),
    ("written_at", Field::WrittenAt),
    ("message_id", Field::MessageId),
    ("headers", Field::Headers),
    ("priority", Field::Priority),
    ("lane", Field::Lane),
    ("classification", Field::Classification),
    ("labels", Field::Labels),
    ("trace_id", Field::TraceId),
    ("payload", Field::Payload),
];

/// Which column receives which value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Column name and its source, in a stable order.
    pub columns: Vec<(String, Source)>,
    /// The column whose value orders the writes of one key, so that an upsert replaces a
    /// row only with a newer message; `None` where the write keeps the first row
    /// (`insert_ignore`) or the last write wins (`order: "arrival"`).
    pub order: Option<String>,
}

impl Mapping {
    /// The jetsink table layout.
    pub fn default_layout() -> Mapping {
        Mapping {
            columns: DEFAULT_LAYOUT
                .iter()
                .map(|(c, f)| (c.to_string(), Source::Field(*f)))
                .collect(),
            order: None,
        }
    }

    /// Parses a config's `columns`. Errors are `(column, message)` pairs, every one found,
    /// in the shape config validation reports its problems in (an empty column for the
    /// mapping as a whole).
    pub fn parse(columns: &BTreeMap<String, String>) -> Result<Mapping, Vec<(String, String)>> {
        let mut errors = Vec::new();
        let mut out = Vec::with_capacity(columns.len());
        if columns.is_empty() {
            errors.push((String::new(), "must map at least one column".to_string()));
        }
        for (column, text) in columns {
            if let Err(e) = check_column_name(column) {
                errors.push((column.clone(), e.to_string()));
            }
            match parse_source(text) {
                Ok(s) => out.push((column.clone(), s)),
                Err(e) => errors.push((column.clone(), e.to_string())),
            }
        }
        if errors.is_empty() {
            Ok(Mapping {
                columns: out,
                order: None,
            })
        } else {
            Err(errors)
        }
    }

    /// Whether any column reads the payload as JSON.
    pub fn needs_document(&self) -> bool {
        self.columns.iter().any(|(_, s)| s.reads_payload())
    }

    /// Whether the columns are the jetsink table layout's (whatever orders an upsert).
    pub fn is_default_layout(&self) -> bool {
        self.columns == Mapping::default_layout().columns
    }

    /// The columns that store the idempotency key and the stream as they are, when both
    /// exist: what counting a stream's stored keys needs.
    pub fn key_and_stream_columns(&self) -> Option<(&str, &str)> {
        Some((
            self.column_of(Field::IdempotencyKey)?,
            self.column_of(Field::Stream)?,
        ))
    }

    /// This mapping without the columns named in `names`: the jetsink layout for a table
    /// from an earlier version that lacks columns added to the layout since and that this
    /// user may not alter, so it is still written, without them.
    pub fn without(&self, names: &[&str]) -> Mapping {
        Mapping {
            columns: self
                .columns
                .iter()
                .filter(|(c, _)| !names.contains(&c.as_str()))
                .cloned()
                .collect(),
            order: self.order.clone(),
        }
    }

    /// The column that stores `field` as it is, if one does.
    pub fn column_of(&self, field: Field) -> Option<&str> {
        self.columns
            .iter()
            .find(|(_, s)| *s == Source::Field(field))
            .map(|(c, _)| c.as_str())
    }
}

/// A column name no database could be given safely, quoted as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column names must be 1-63 bytes without control characters, got {name:?}")]
pub struct ColumnNameError {
    /// The name as written.
    pub name: String,
}

/// A column name jetsink can quote for any database: 1–63 bytes, no control characters.
pub fn check_column_name(name: &str) -> Result<(), ColumnNameError> {
    if name.is_empty() || name.len() > 63 || name.chars().any(char::is_control) {
        Err(ColumnNameError { name: name.into() })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_reports_every_bad_entry() {
        let columns: BTreeMap<String, String> = [
            ("ok".to_string(), "/a".to_string()),
            ("bad".to_string(), "nope".to_string()),
            (String::new(), "/b".to_string()),
            ("ctl\u{7}".to_string(), "$subject".to_string()),
        ]
        .into_iter()
        .collect();
        let errors = Mapping::parse(&columns).unwrap_err();
        let cols: Vec<&str> = errors.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(cols, ["", "bad", "ctl\u{7}"]);
        assert!(Mapping::parse(&BTreeMap::new()).is_err());
        assert!(!Mapping::default_layout().needs_document());
        let m =
            Mapping::parse(&[("x".to_string(), "/x".to_string())].into_iter().collect()).unwrap();
        assert!(m.needs_document());
    }

    #[test]
    fn the_layout_holds_the_trace_id_and_can_be_written_without_it() {
        let layout = Mapping::default_layout();
        assert_eq!(layout.column_of(Field::TraceId), Some("trace_id"));
        let older = layout.without(&["trace_id"]);
        assert_eq!(older.columns.len(), layout.columns.len() - 1);
        assert_eq!(older.column_of(Field::TraceId), None);
        assert_eq!(older.column_of(Field::Labels), Some("labels"));
        let mapped = Mapping::parse(
            &[("t".to_string(), "$trace_id".to_string())]
                .into_iter()
                .collect(),
        )
        .unwrap();
        assert_eq!(mapped.column_of(Field::TraceId), Some("t"));
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1_000))]

            #[test]
            fn accepted_column_names_fit_every_database(name in any::<String>()) {
                if check_column_name(&name).is_ok() {
                    prop_assert!(!name.is_empty() && name.len() <= 63);
                    prop_assert!(!name.chars().any(char::is_control));
                }
            }

            #[test]
            fn any_column_map_is_planned_or_refused_by_column(
                map in prop::collection::btree_map(any::<String>(), any::<String>(), 0..8)
            ) {
                if let Err(problems) = Mapping::parse(&map) {
                    prop_assert!(!problems.is_empty());
                    for (column, _) in &problems {
                        prop_assert!(map.contains_key(column) || column.is_empty(), "{}", column);
                    }
                }
            }
        }
    }
}
