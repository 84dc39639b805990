//! Envelopes into a Parquet file, one row group at a time, through the `parquet` crate's
//! column writers (no Arrow). Pure apart from the `Write` it is given: the s3 destination
//! gives a `Vec` and takes the bytes out as they come, so large objects are uploaded in
//! parts while the rest is encoded; the file destination gives the temporary file.
//!
//! A row group is converted whole before any of it is written, so a message whose value
//! does not fit its column is found first and refused by its batch position; the
//! destination then drops the unfinished file (or aborts the upload) and the runner
//! splits the batch around that message. A file that was finished is always whole.

use std::io::Write;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::{SerializedFileWriter, SerializedRowGroupWriter};
use serde_json::Value;
use time::OffsetDateTime;

use super::schema::{columns_metadata, schema, COLUMNS_KEY, VERSION_KEY};
use super::settings::{Codec, ColumnType, Layout, MappedColumn, Options};
use super::values::{convert, micros, Typed};
use crate::envelope::Envelope;
use crate::sinks::database::cells::{cell, parse_document};
use crate::sinks::database::columns::{Field, Source};

/// zstd's level: fast, about gzip's ratio (as the JSON Lines objects).
const ZSTD_LEVEL: i32 = 3;
/// Longest min/max kept in statistics and the column index, in bytes.
const STATISTICS_BYTES: usize = 64;

/// Why a row group was not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// The message at this batch position cannot be stored (its content).
    Refused {
        /// Batch position.
        index: usize,
        /// What is wrong, without content.
        message: String,
    },
    /// The encoder or its output failed.
    Failed(String),
}

fn failed(e: impl std::fmt::Display) -> EncodeError {
    EncodeError::Failed(e.to_string())
}

/// A Parquet file being written.
pub struct Encoder<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    options: Arc<Options>,
}

impl<W: Write + Send> Encoder<W> {
    /// Starts a file with `options`' schema, codec and metadata on `out`.
    pub fn new(out: W, options: Arc<Options>) -> Result<Encoder<W>, EncodeError> {
        let schema = schema(&options.layout).map_err(|e| EncodeError::Failed(e.to_string()))?;
        let writer = SerializedFileWriter::new(out, schema, Arc::new(properties(&options)))
            .map_err(failed)?;
        Ok(Encoder { writer, options })
    }

    /// Rows per row group.
    pub fn rows_per_group(&self) -> usize {
        self.options.row_group_rows.max(1)
    }

    /// Writes the messages at `members` of `batch` as one row group.
    pub fn write_group(
        &mut self,
        batch: &[Envelope],
        members: &[usize],
        written_at: OffsetDateTime,
    ) -> Result<(), EncodeError> {
        let leaves = match &self.options.layout {
            Layout::Default => default_leaves(batch, members, written_at)?,
            Layout::Mapped(columns) => mapped_leaves(columns, batch, members, written_at)?,
        };
        let mut group = self.writer.next_row_group().map_err(failed)?;
        for leaf in &leaves {
            write_leaf(&mut group, leaf).map_err(failed)?;
        }
        group.close().map_err(failed)?;
        Ok(())
    }

    /// The output, with everything written so far flushed into it. The s3 destination
    /// takes the bytes out of its `Vec`; the writer counts offsets itself, so that is safe.
    pub fn output(&mut self) -> Result<&mut W, EncodeError> {
        self.writer.flush().map_err(failed)?;
        Ok(self.writer.inner_mut())
    }

    /// Writes the footer and returns the output.
    pub fn finish(self) -> Result<W, EncodeError> {
        self.writer.into_inner().map_err(failed)
    }
}

/// Codec, statistics (per page and chunk, with a column index), metadata. The payload and
/// key columns skip the dictionary: their values rarely repeat.
fn properties(o: &Options) -> WriterProperties {
    let compression = match o.codec {
        Codec::Zstd => ZstdLevel::try_new(ZSTD_LEVEL)
            .map(Compression::ZSTD)
            .unwrap_or(Compression::SNAPPY),
        Codec::Snappy => Compression::SNAPPY,
        Codec::None => Compression::UNCOMPRESSED,
    };
    let mut b = WriterProperties::builder()
        .set_compression(compression)
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_statistics_truncate_length(Some(STATISTICS_BYTES))
        .set_column_index_truncate_length(Some(STATISTICS_BYTES))
        .set_max_row_group_row_count(Some(o.row_group_rows.max(1)))
        .set_created_by(format!("jetsink {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![
            KeyValue::new(VERSION_KEY.to_string(), "1".to_string()),
            KeyValue::new(COLUMNS_KEY.to_string(), columns_metadata(&o.layout)),
        ]));
    let unique: Vec<String> = match &o.layout {
        Layout::Default => vec!["payload".into(), "idempotency_key".into()],
        Layout::Mapped(columns) => columns
            .iter()
            .filter(|c| {
                matches!(
                    c.source,
                    Source::Field(Field::Payload | Field::IdempotencyKey)
                )
            })
            .map(|c| c.name.clone())
            .collect(),
    };
    for column in unique {
        b = b.set_column_dictionary_enabled(column.into(), false);
    }
    b.build()
}

/// One leaf column's values and levels for a row group.
struct Leaf {
    values: Values,
    def: Option<Vec<i16>>,
    rep: Option<Vec<i16>>,
}

enum Values {
    Bytes(Vec<ByteArray>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

impl Leaf {
    fn required(values: Values) -> Leaf {
        Leaf {
            values,
            def: None,
            rep: None,
        }
    }

    fn optional(values: Values, rows: usize) -> Leaf {
        Leaf {
            values,
            def: Some(Vec::with_capacity(rows)),
            rep: None,
        }
    }

    fn repeated(rows: usize) -> Leaf {
        Leaf {
            values: Values::Bytes(Vec::with_capacity(rows)),
            def: Some(Vec::with_capacity(rows)),
            rep: Some(Vec::with_capacity(rows)),
        }
    }

    /// Appends levels, and a value when there is one.
    fn push(&mut self, def: i16, rep: i16, value: Option<ByteArray>) {
        if let (Values::Bytes(v), Some(value)) = (&mut self.values, value) {
            v.push(value);
        }
        if let Some(d) = &mut self.def {
            d.push(def);
        }
        if let Some(r) = &mut self.rep {
            r.push(rep);
        }
    }
}

fn write_leaf<W: Write + Send>(
    group: &mut SerializedRowGroupWriter<'_, W>,
    leaf: &Leaf,
) -> parquet::errors::Result<()> {
    let Some(mut column) = group.next_column()? else {
        return Err(parquet::errors::ParquetError::General(
            "more leaves than the schema has columns".into(),
        ));
    };
    let (def, rep) = (leaf.def.as_deref(), leaf.rep.as_deref());
    match &leaf.values {
        Values::Bytes(v) => column.typed::<ByteArrayType>().write_batch(v, def, rep)?,
        Values::I64(v) => column.typed::<Int64Type>().write_batch(v, def, rep)?,
        Values::I32(v) => column.typed::<Int32Type>().write_batch(v, def, rep)?,
        Values::F64(v) => column.typed::<DoubleType>().write_batch(v, def, rep)?,
        Values::Bool(v) => column.typed::<BoolType>().write_batch(v, def, rep)?,
    };
    column.close()
}

/// The leaves of the jetsink layout ([`super::schema::DEFAULT_SCHEMA`]), in its order.
fn default_leaves(
    batch: &[Envelope],
    members: &[usize],
    written_at: OffsetDateTime,
) -> Result<Vec<Leaf>, EncodeError> {
    let rows: Vec<&Envelope> = members.iter().map(|&i| &batch[i]).collect();
    let text = |f: fn(&Envelope) -> &str| {
        Leaf::required(Values::Bytes(
            rows.iter().map(|e| ByteArray::from(f(e))).collect(),
        ))
    };
    let count = |what: &str, f: fn(&Envelope) -> u64| {
        members
            .iter()
            .map(|&i| {
                i64::try_from(f(&batch[i])).map_err(|_| EncodeError::Refused {
                    index: i,
                    message: format!("its {what} exceeds the int64 range of the Parquet column"),
                })
            })
            .collect::<Result<Vec<i64>, EncodeError>>()
            .map(|v| Leaf::required(Values::I64(v)))
    };
    let optional = |f: fn(&Envelope) -> Option<&str>| {
        let mut leaf = Leaf::optional(Values::Bytes(Vec::new()), rows.len());
        for e in &rows {
            let value = f(e).map(ByteArray::from);
            leaf.push(i16::from(value.is_some()), 0, value);
        }
        leaf
    };
    let written = micros(written_at);
    let (keys, values) = headers(&rows);
    Ok(vec![
        text(|e| &e.idempotency_key),
        text(|e| &e.stream),
        count("stream sequence", |e| e.stream_sequence)?,
        count("consumer sequence", |e| e.consumer_sequence)?,
        text(|e| &e.subject),
        count("delivery count", |e| e.delivered)?,
        Leaf::required(Values::I64(
            rows.iter().map(|e| micros(e.published_at)).collect(),
        )),
        Leaf::required(Values::I64(vec![written; rows.len()])),
        optional(|e| e.message_id.as_deref()),
        keys,
        values,
        optional(|e| e.priority.as_deref()),
        optional(|e| e.lane.as_deref()),
        optional(|e| e.classification.as_deref()),
        labels(&rows),
        optional(|e| e.trace_id()),
        Leaf::required(Values::Bytes(
            rows.iter()
                .map(|e| ByteArray::from(e.payload.clone()))
                .collect(),
        )),
    ])
}

/// `headers` as `MAP<STRING, LIST<STRING>>`: the key leaf (levels up to 1) and the value
/// element leaf (levels up to 2). A row without headers is an empty map.
fn headers(rows: &[&Envelope]) -> (Leaf, Leaf) {
    let (mut keys, mut elements) = (Leaf::repeated(rows.len()), Leaf::repeated(rows.len()));
    for e in rows {
        if e.headers.is_empty() {
            keys.push(0, 0, None);
            elements.push(0, 0, None);
            continue;
        }
        for (k, (name, values)) in e.headers.iter().enumerate() {
            let entry_rep = i16::from(k > 0);
            keys.push(1, entry_rep, Some(ByteArray::from(name.as_str())));
            if values.is_empty() {
                elements.push(1, entry_rep, None);
            }
            for (v, value) in values.iter().enumerate() {
                let rep = if v > 0 { 2 } else { entry_rep };
                elements.push(2, rep, Some(ByteArray::from(value.as_str())));
            }
        }
    }
    (keys, elements)
}

/// `labels` as `LIST<STRING>` (levels up to 1); no labels is an empty list.
fn labels(rows: &[&Envelope]) -> Leaf {
    let mut leaf = Leaf::repeated(rows.len());
    for e in rows {
        if e.labels.is_empty() {
            leaf.push(0, 0, None);
        }
        for (j, l) in e.labels.iter().enumerate() {
            leaf.push(1, i16::from(j > 0), Some(ByteArray::from(l.as_str())));
        }
    }
    leaf
}

/// The leaves of a mapped layout, one optional leaf per column, in column order. Payloads
/// are parsed once per row when a column reads them with a JSON pointer.
fn mapped_leaves(
    columns: &[MappedColumn],
    batch: &[Envelope],
    members: &[usize],
    written_at: OffsetDateTime,
) -> Result<Vec<Leaf>, EncodeError> {
    let pointers = columns
        .iter()
        .any(|c| matches!(c.source, Source::Pointer(_)));
    let documents: Vec<Option<Value>> = members
        .iter()
        .map(|&i| {
            if !pointers {
                return Ok(None);
            }
            parse_document(&batch[i], i)
                .map(Some)
                .map_err(|e| EncodeError::Refused {
                    index: i,
                    message: e.to_string(),
                })
        })
        .collect::<Result<_, _>>()?;
    let mut leaves = Vec::with_capacity(columns.len());
    for c in columns {
        let spelling = c.source.spelling();
        let mut leaf = Leaf::optional(
            match c.ty {
                ColumnType::String | ColumnType::Json | ColumnType::Binary => {
                    Values::Bytes(Vec::with_capacity(members.len()))
                }
                ColumnType::Int64 | ColumnType::Timestamp => Values::I64(Vec::new()),
                ColumnType::Date => Values::I32(Vec::new()),
                ColumnType::Double => Values::F64(Vec::new()),
                ColumnType::Boolean => Values::Bool(Vec::new()),
            },
            members.len(),
        );
        for (&i, document) in members.iter().zip(&documents) {
            let e = &batch[i];
            let typed = if c.source == Source::Field(Field::Payload) && c.ty == ColumnType::Binary {
                Typed::Bytes(ByteArray::from(e.payload.clone()))
            } else {
                convert(
                    cell(&c.source, e, document.as_ref(), written_at),
                    c.ty,
                    &spelling,
                )
                .map_err(|why| EncodeError::Refused {
                    index: i,
                    message: format!("column {}: {why}", c.name),
                })?
            };
            let present = push_typed(&mut leaf.values, typed).ok_or_else(|| {
                EncodeError::Failed(format!("column {}: a value of another type", c.name))
            })?;
            if let Some(d) = &mut leaf.def {
                d.push(i16::from(present));
            }
        }
        leaves.push(leaf);
    }
    Ok(leaves)
}

/// Appends `t` to `values`: `Some(false)` for a null, `None` for a value of another
/// physical type than the column's (which [`convert`] never returns).
fn push_typed(values: &mut Values, t: Typed) -> Option<bool> {
    match (values, t) {
        (_, Typed::Null) => return Some(false),
        (Values::Bytes(v), Typed::Bytes(b)) => v.push(b),
        (Values::I64(v), Typed::I64(n)) => v.push(n),
        (Values::I32(v), Typed::I32(n)) => v.push(n),
        (Values::F64(v), Typed::F64(n)) => v.push(n),
        (Values::Bool(v), Typed::Bool(b)) => v.push(b),
        _ => return None,
    }
    Some(true)
}
