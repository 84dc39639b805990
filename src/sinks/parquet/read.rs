//! Reading jetsink's Parquet files back: every row as a JSON object (for `jetsink
//! decrypt`, which needs the stream, sequence, subject, headers and payload of each row),
//! the idempotency keys of one stream (for `jetsink bench`'s check that nothing was
//! lost), and the stream sequences a file holds (for the destinations' look for messages
//! already stored, `crate::sinks::util::archive`). Through the `parquet` crate's row
//! reader; no Arrow.
//!
//! Which column holds which envelope field comes from the file's own key-value metadata
//! ([`COLUMNS_KEY`]), so a mapped layout is read as it was written.

use std::collections::HashSet;

use base64::Engine as _;
use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::metadata::FileMetaData;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::{Field, Row};
use parquet::schema::types::Type;
use serde_json::{Map, Value};

use super::schema::COLUMNS_KEY;

/// The first and last four bytes of every Parquet file.
pub const MAGIC: &[u8; 4] = b"PAR1";

/// Whether `bytes` looks like a whole Parquet file.
pub fn is_parquet(bytes: &[u8]) -> bool {
    bytes.len() >= 12 && bytes.starts_with(MAGIC) && bytes.ends_with(MAGIC)
}

/// Why a Parquet file, or a row of it, could not be read. The caller names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The footer or the metadata cannot be read: not a Parquet file, or a damaged one.
    #[error("not a readable Parquet file: {0}")]
    NotParquet(ParquetError),
    /// The row reader cannot be started.
    #[error("cannot read the rows: {0}")]
    Rows(ParquetError),
    /// One row cannot be read.
    #[error("cannot read the row: {0}")]
    Row(ParquetError),
    /// The columns read cannot be projected out of the file's schema.
    #[error("cannot select the columns to read: {0}")]
    KeyColumns(ParquetError),
}

fn reader(data: Bytes) -> Result<SerializedFileReader<Bytes>, ReadError> {
    SerializedFileReader::new(data).map_err(ReadError::NotParquet)
}

/// The rows of a file, each a JSON object or why it could not be read.
pub type Rows = Vec<Result<Map<String, Value>, ReadError>>;

/// Every row of the file as a JSON object: binary values as standard padded base64,
/// timestamps as RFC 3339 UTC, maps as objects, lists as arrays. A row that cannot be
/// read is an `Err` in its place.
pub fn rows(data: Bytes) -> Result<Rows, ReadError> {
    let reader = reader(data)?;
    let iter = reader.get_row_iter(None).map_err(ReadError::Rows)?;
    Ok(iter
        .map(|row| row.map(|r| object(&r)).map_err(ReadError::Row))
        .collect())
}

/// Adds the idempotency keys of `stream`'s rows to `keys`. `Ok(false)` when the file's
/// layout has no idempotency key or no stream column, so keys cannot be counted.
pub fn stream_keys(
    data: Bytes,
    stream: &str,
    keys: &mut HashSet<String>,
) -> Result<bool, ReadError> {
    let reader = reader(data)?;
    let meta = reader.metadata().file_metadata();
    let (Some(key), Some(stream_column)) = (
        column_of(meta, "$idempotency_key"),
        column_of(meta, "$stream"),
    ) else {
        return Ok(false);
    };
    let projection = project(meta, &[&key, &stream_column])?;
    let iter = reader
        .get_row_iter(Some(projection))
        .map_err(ReadError::Rows)?;
    for row in iter {
        let row = row.map_err(ReadError::Row)?;
        let (mut k, mut s) = (None, None);
        for (name, field) in row.get_column_iter() {
            if let Field::Str(text) = field {
                if *name == key {
                    k = Some(text);
                }
                if *name == stream_column {
                    s = Some(text);
                }
            }
        }
        if let (Some(k), Some(s)) = (k, s) {
            if s == stream {
                keys.insert(k.clone());
            }
        }
    }
    Ok(true)
}

/// The stream sequences of the file's rows, sorted, from the column its metadata names
/// `$stream_sequence`. `Ok(None)` when the layout has no such column, or a row has no
/// sequence in it (a null, a negative or non-integer value): then the file cannot say
/// which messages it holds.
pub fn sequences(data: Bytes) -> Result<Option<Vec<u64>>, ReadError> {
    let reader = reader(data)?;
    let meta = reader.metadata().file_metadata();
    let Some(column) = column_of(meta, "$stream_sequence") else {
        return Ok(None);
    };
    let projection = project(meta, &[&column])?;
    let iter = reader
        .get_row_iter(Some(projection))
        .map_err(ReadError::Rows)?;
    let mut out = Vec::with_capacity(usize::try_from(meta.num_rows()).unwrap_or(0));
    for row in iter {
        let row = row.map_err(ReadError::Row)?;
        let value = row.get_column_iter().find(|(name, _)| **name == column);
        match value.map(|(_, f)| f) {
            Some(Field::Long(n)) if *n >= 0 => out.push(*n as u64),
            _ => return Ok(None),
        }
    }
    out.sort_unstable();
    Ok(Some(out))
}

/// The column of the file's layout that holds `source` (`$stream`), from its
/// [`COLUMNS_KEY`] metadata.
fn column_of(meta: &FileMetaData, source: &str) -> Option<String> {
    let columns: Map<String, Value> = meta
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == COLUMNS_KEY))
        .and_then(|k| k.value.as_deref())
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    columns
        .iter()
        .find(|(_, s)| s.as_str() == Some(source))
        .map(|(c, _)| c.clone())
}

/// The file's schema cut down to the top-level `columns`.
fn project(meta: &FileMetaData, columns: &[&str]) -> Result<Type, ReadError> {
    let schema = meta.schema();
    let fields: Vec<_> = schema
        .get_fields()
        .iter()
        .filter(|f| columns.contains(&f.name()))
        .cloned()
        .collect();
    Type::group_type_builder(schema.name())
        .with_fields(fields)
        .build()
        .map_err(ReadError::KeyColumns)
}

fn object(row: &Row) -> Map<String, Value> {
    row.get_column_iter()
        .map(|(name, field)| (name.clone(), json(field)))
        .collect()
}

/// One value as JSON.
fn json(f: &Field) -> Value {
    match f {
        Field::Null => Value::Null,
        Field::Bool(b) => Value::Bool(*b),
        Field::Byte(n) => Value::from(*n),
        Field::Short(n) => Value::from(*n),
        Field::Int(n) => Value::from(*n),
        Field::Long(n) => Value::from(*n),
        Field::UByte(n) => Value::from(*n),
        Field::UShort(n) => Value::from(*n),
        Field::UInt(n) => Value::from(*n),
        Field::ULong(n) => Value::from(*n),
        Field::Float(n) => Value::from(f64::from(*n)),
        Field::Double(n) => Value::from(*n),
        Field::Str(s) => Value::from(s.as_str()),
        Field::Bytes(b) => Value::from(base64::engine::general_purpose::STANDARD.encode(b.data())),
        Field::TimestampMicros(us) => timestamp(i128::from(*us) * 1_000),
        Field::TimestampMillis(ms) => timestamp(i128::from(*ms) * 1_000_000),
        Field::Group(row) => Value::Object(object(row)),
        Field::ListInternal(list) => Value::Array(list.elements().iter().map(json).collect()),
        Field::MapInternal(map) => Value::Object(
            map.entries()
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Field::Str(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (key, json(v))
                })
                .collect(),
        ),
        other => Value::from(other.to_string()),
    }
}

fn timestamp(nanos: i128) -> Value {
    match time::OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => Value::from(crate::envelope::rfc3339(t)),
        Err(_) => Value::Null,
    }
}
