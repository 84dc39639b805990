//! The Parquet schema of a layout, as the message text the `parquet` crate parses, and
//! the key-value metadata that tells a reader (`jetsink decrypt`, the destinations' key
//! counts) which column holds which envelope field. Pure.
//!
//! The jetsink layout is fixed and documented (docs/sinks/s3.md, "Parquet"); a unit test
//! pins [`DEFAULT_SCHEMA`] so a change to it is a deliberate, visible one.

use std::sync::Arc;

use parquet::schema::parser::parse_message_type;
use parquet::schema::types::Type;

use super::settings::Layout;

/// The schema text jetsink generates did not parse: a bug in jetsink, never in the data,
/// so the write that needed it is held rather than its messages refused.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the Parquet schema: {0}")]
pub struct SchemaError(#[source] parquet::errors::ParquetError);
use crate::sinks::database::columns::{Field, Source};

/// The jetsink layout: the file destination's record fields, typed. Sequences and counts
/// are signed 64-bit (what Spark, Athena and DuckDB read natively; JetStream sequences
/// stay below 2^63), times are UTC microseconds, headers a map of name to its list of
/// values, labels a list, `trace_id` the trace id of a valid W3C `traceparent` header (null
/// without one), the payload the stored bytes (sealed with `encryption`).
pub const DEFAULT_SCHEMA: &str = "message jetsink_event {
  required binary idempotency_key (STRING);
  required binary stream (STRING);
  required int64 stream_sequence;
  required int64 consumer_sequence;
  required binary subject (STRING);
  required int64 delivered;
  required int64 published_at (TIMESTAMP(MICROS,true));
  required int64 written_at (TIMESTAMP(MICROS,true));
  optional binary message_id (STRING);
  required group headers (MAP) {
    repeated group key_value {
      required binary key (STRING);
      required group value (LIST) {
        repeated group list {
          required binary element (STRING);
        }
      }
    }
  }
  optional binary priority (STRING);
  optional binary lane (STRING);
  optional binary classification (STRING);
  required group labels (LIST) {
    repeated group list {
      required binary element (STRING);
    }
  }
  optional binary trace_id (STRING);
  required binary payload;
}";

/// Which envelope field each column of the jetsink layout holds, in column order: the
/// database destinations' default layout, so an archive and a table have the same columns
/// (the schema test pins both the names and the Parquet types).
pub const DEFAULT_SOURCES: [(&str, Field); 16] = crate::sinks::database::columns::DEFAULT_LAYOUT;

/// Key-value metadata key: the layout's version (`1`).
pub const VERSION_KEY: &str = "jetsink.schema";
/// Key-value metadata key: a JSON object of column name to its source (`$stream`,
/// `/order/id`), as in a `columns` mapping.
pub const COLUMNS_KEY: &str = "jetsink.columns";

/// The schema text of `layout`.
pub fn message_text(layout: &Layout) -> String {
    match layout {
        Layout::Default => DEFAULT_SCHEMA.to_string(),
        Layout::Mapped(columns) => {
            let mut text = String::from("message jetsink_event {\n");
            for c in columns {
                text.push_str("  optional ");
                text.push_str(&c.ty.declaration().replace("{}", &c.name));
                text.push_str(";\n");
            }
            text.push('}');
            text
        }
    }
}

/// The parsed schema of `layout`. Column names are checked to be plain identifiers at
/// validation, so the text always parses; the error is kept for a caller that skipped it.
pub fn schema(layout: &Layout) -> Result<Arc<Type>, SchemaError> {
    parse_message_type(&message_text(layout))
        .map(Arc::new)
        .map_err(SchemaError)
}

/// The value of [`COLUMNS_KEY`] for `layout`.
pub fn columns_metadata(layout: &Layout) -> String {
    let pairs: serde_json::Map<String, serde_json::Value> = match layout {
        Layout::Default => DEFAULT_SOURCES
            .iter()
            .map(|(c, f)| (c.to_string(), Source::Field(*f).spelling().into()))
            .collect(),
        Layout::Mapped(columns) => columns
            .iter()
            .map(|c| (c.name.clone(), c.source.spelling().into()))
            .collect(),
    };
    serde_json::Value::Object(pairs).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::parquet::settings::{ColumnType, MappedColumn};

    #[test]
    fn the_default_schema_is_pinned_and_parses() {
        let t = schema(&Layout::Default).unwrap();
        let mut printed = Vec::new();
        parquet::schema::printer::print_schema(&mut printed, &t);
        let printed = String::from_utf8(printed).unwrap();
        // Every leaf and type, as a reader sees them: changing one breaks every query
        // written against the archive, so it must be a visible decision.
        let expected = DEFAULT_SCHEMA
            .replace("required", "REQUIRED")
            .replace("optional", "OPTIONAL")
            .replace("repeated", "REPEATED")
            .replace("binary", "BYTE_ARRAY")
            .replace("int64", "INT64");
        assert_eq!(printed.trim_end(), expected);
        assert!(printed.contains("REQUIRED group headers (MAP) {"));
        assert!(printed.contains("REQUIRED INT64 published_at (TIMESTAMP(MICROS,true));"));
        let leaves: Vec<String> = parquet::schema::types::SchemaDescriptor::new(t)
            .columns()
            .iter()
            .map(|c| c.path().string())
            .collect();
        assert_eq!(
            leaves,
            [
                "idempotency_key",
                "stream",
                "stream_sequence",
                "consumer_sequence",
                "subject",
                "delivered",
                "published_at",
                "written_at",
                "message_id",
                "headers.key_value.key",
                "headers.key_value.value.list.element",
                "priority",
                "lane",
                "classification",
                "labels.list.element",
                "trace_id",
                "payload",
            ]
        );
        let columns: serde_json::Value =
            serde_json::from_str(&columns_metadata(&Layout::Default)).unwrap();
        assert_eq!(columns["stream_sequence"], "$stream_sequence");
        assert_eq!(columns["trace_id"], "$trace_id");
        assert_eq!(columns.as_object().unwrap().len(), 16);
    }

    #[test]
    fn a_mapped_schema_has_one_optional_column_per_mapping_entry() {
        let layout = Layout::Mapped(vec![
            MappedColumn {
                name: "at".into(),
                source: Source::Field(Field::PublishedAt),
                ty: ColumnType::Timestamp,
            },
            MappedColumn {
                name: "id".into(),
                source: Source::Pointer("/order/id".into()),
                ty: ColumnType::Int64,
            },
            MappedColumn {
                name: "day".into(),
                source: Source::Pointer("/day".into()),
                ty: ColumnType::Date,
            },
        ]);
        assert_eq!(
            message_text(&layout),
            "message jetsink_event {\n  optional int64 at (TIMESTAMP(MICROS,true));\n  optional int64 id;\n  optional int32 day (DATE);\n}"
        );
        assert!(schema(&layout).is_ok());
        assert_eq!(
            columns_metadata(&layout),
            r#"{"at":"$published_at","day":"/day","id":"/order/id"}"#
        );
    }
}
