//! Turns a batch of envelopes into column arrays ready to bind: one typed array per mapped
//! column for `unnest(...)`, read row by row for binary `COPY`.
//!
//! Everything that can be refused *before* the database sees it is refused here, with the
//! message's batch index, so the runner isolates exactly that message: a payload that is
//! not JSON where a JSON column or pointer needs it, text that is not UTF-8 or holds a NUL
//! character (PostgreSQL `text` cannot), an integer beyond `bigint`.

use std::borrow::Cow;
use std::error::Error as StdError;

use bytes::{BufMut, BytesMut};
use serde_json::Value;
use time::OffsetDateTime;
use tokio_postgres::types::{to_sql_checked, IsNull, ToSql, Type};

use super::schema::Wire;
use crate::envelope::{rfc3339, Envelope};
use crate::sinks::database::cells::{cell, is_json, parse_documents, value_text, Cell};
use crate::sinks::database::columns::{Family, TablePlan};
use crate::sinks::database::newest::{newest_of_each_key, order_value};

/// JSON text sent as `jsonb` (binary format: version byte 1, then the text) or `json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonText<'a>(pub Cow<'a, [u8]>);

impl ToSql for JsonText<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        if *ty == Type::JSONB {
            out.put_u8(1);
        }
        out.put_slice(&self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::JSONB || *ty == Type::JSON
    }

    to_sql_checked!();
}

/// Why a value cannot be sent to PostgreSQL: what is wrong, never what the value is (the
/// caller names the column and the message's batch index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValueError {
    /// A payload for a text or JSON column that is not UTF-8.
    #[error("the payload is not valid UTF-8 text")]
    PayloadNotUtf8,
    /// A payload for a JSON column that is not one JSON document.
    #[error("the payload is not JSON")]
    PayloadNotJson,
    /// Text with a NUL character, which `text` cannot hold.
    #[error("text contains a NUL character, which PostgreSQL cannot store")]
    NulInText,
    /// An integer above `bigint`'s maximum.
    #[error("an integer exceeds the bigint range")]
    BeyondBigint,
}

/// One column's values for the rows of a batch.
#[derive(Debug)]
pub(crate) enum ColumnData<'a> {
    /// `text[]`.
    Text(Vec<Option<Cow<'a, str>>>),
    /// `int8[]`.
    Int8(Vec<Option<i64>>),
    /// `timestamptz[]`.
    Timestamptz(Vec<Option<OffsetDateTime>>),
    /// `jsonb[]`.
    Jsonb(Vec<Option<JsonText<'a>>>),
    /// `bytea[]`.
    Bytea(Vec<Option<&'a [u8]>>),
}

impl<'a> ColumnData<'a> {
    fn new(wire: Wire, rows: usize) -> ColumnData<'a> {
        match wire {
            Wire::Text => ColumnData::Text(Vec::with_capacity(rows)),
            Wire::Int8 => ColumnData::Int8(Vec::with_capacity(rows)),
            Wire::Timestamptz => ColumnData::Timestamptz(Vec::with_capacity(rows)),
            Wire::Jsonb => ColumnData::Jsonb(Vec::with_capacity(rows)),
            Wire::Bytea => ColumnData::Bytea(Vec::with_capacity(rows)),
        }
    }

    /// An empty column (for the dry run at open).
    pub(crate) fn empty(wire: Wire) -> ColumnData<'a> {
        ColumnData::new(wire, 0)
    }

    /// The whole column as one array parameter.
    pub(crate) fn as_param(&self) -> &(dyn ToSql + Sync) {
        match self {
            ColumnData::Text(v) => v,
            ColumnData::Int8(v) => v,
            ColumnData::Timestamptz(v) => v,
            ColumnData::Jsonb(v) => v,
            ColumnData::Bytea(v) => v,
        }
    }

    /// Row `r`'s value, for `COPY`.
    pub(crate) fn row(&self, r: usize) -> &(dyn ToSql + Sync) {
        match self {
            ColumnData::Text(v) => &v[r],
            ColumnData::Int8(v) => &v[r],
            ColumnData::Timestamptz(v) => &v[r],
            ColumnData::Jsonb(v) => &v[r],
            ColumnData::Bytea(v) => &v[r],
        }
    }

    /// Appends `cell` for a column of `family`.
    fn push(&mut self, c: Cell<'a>, family: Family) -> Result<(), ValueError> {
        match self {
            ColumnData::Text(v) => {
                let text: Option<Cow<'a, str>> = match c {
                    Cell::Null => None,
                    Cell::Text(s) => Some(s),
                    Cell::UInt(n) => Some(Cow::Owned(n.to_string())),
                    Cell::Timestamp(t) => Some(Cow::Owned(rfc3339(t))),
                    Cell::Json(s) => Some(Cow::Owned(s)),
                    Cell::Bytes(b) => {
                        let s = std::str::from_utf8(b).map_err(|_| ValueError::PayloadNotUtf8)?;
                        if family == Family::Json && !is_json(b) {
                            return Err(ValueError::PayloadNotJson);
                        }
                        Some(Cow::Borrowed(s))
                    }
                    Cell::Value(j) if family == Family::Json => Some(Cow::Owned(j.to_string())),
                    Cell::Value(j) => Some(value_text(j)),
                };
                if let Some(s) = &text {
                    if s.contains('\0') {
                        return Err(ValueError::NulInText);
                    }
                }
                v.push(text);
            }
            ColumnData::Int8(v) => v.push(match c {
                Cell::UInt(n) => Some(i64::try_from(n).map_err(|_| ValueError::BeyondBigint)?),
                _ => None,
            }),
            ColumnData::Timestamptz(v) => v.push(match c {
                Cell::Timestamp(t) => Some(t),
                _ => None,
            }),
            ColumnData::Jsonb(v) => v.push(match c {
                Cell::Null => None,
                Cell::Json(s) => Some(JsonText(Cow::Owned(s.into_bytes()))),
                Cell::Value(j) => Some(JsonText(Cow::Owned(j.to_string().into_bytes()))),
                Cell::Bytes(b) => {
                    if !is_json(b) {
                        return Err(ValueError::PayloadNotJson);
                    }
                    Some(JsonText(Cow::Borrowed(b)))
                }
                Cell::Text(s) => Some(JsonText(Cow::Owned(
                    Value::String(s.into_owned()).to_string().into_bytes(),
                ))),
                Cell::UInt(n) => Some(JsonText(Cow::Owned(n.to_string().into_bytes()))),
                Cell::Timestamp(t) => Some(JsonText(Cow::Owned(
                    Value::String(rfc3339(t)).to_string().into_bytes(),
                ))),
            }),
            ColumnData::Bytea(v) => v.push(match c {
                Cell::Bytes(b) => Some(b),
                _ => None,
            }),
        }
        Ok(())
    }
}

/// Why a batch could not be encoded: the message at `index` cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// Batch position of the message.
    pub index: usize,
    /// What is wrong, without content.
    pub message: String,
}

/// A batch as bindable columns.
#[derive(Debug)]
pub(crate) struct Encoded<'a> {
    /// One entry per planned column.
    pub columns: Vec<ColumnData<'a>>,
    /// Rows encoded (fewer than the batch when an upsert dropped repeated keys).
    pub rows: usize,
}

/// Encodes `batch` for `plan`. `documents` holds the payloads parsed as JSON when the plan
/// reads pointers (see [`documents`]). With `dedupe` (an upsert), each key keeps one
/// message, the newest ([`newest_rows`]).
pub(crate) fn encode<'a>(
    batch: &'a [Envelope],
    documents: &'a [Option<Value>],
    plan: &'a TablePlan,
    wires: &[Wire],
    written_at: OffsetDateTime,
    dedupe: bool,
) -> Result<Encoded<'a>, Refused> {
    let doc = |r: usize| documents.get(r).and_then(Option::as_ref);
    let rows: Vec<usize> = if dedupe {
        newest_rows(batch, documents, plan, written_at)?
    } else {
        (0..batch.len()).collect()
    };
    let order_at = plan.newest.map(|n| n.order);
    let mut columns = Vec::with_capacity(plan.columns.len());
    for (i, (c, w)) in plan.columns.iter().zip(wires).enumerate() {
        let mut data = ColumnData::new(*w, rows.len());
        for &r in &rows {
            let mut value = cell(&c.source, &batch[r], doc(r), written_at);
            if order_at == Some(i) {
                value = order_value(value, c.family)
                    .map_err(|why| Refused {
                        index: r,
                        message: format!("column {}: {why}", c.name),
                    })?
                    .0;
            }
            data.push(value, c.family).map_err(|why| Refused {
                index: r,
                message: format!("column {}: {why}", c.name),
            })?;
        }
        columns.push(data);
    }
    Ok(Encoded {
        columns,
        rows: rows.len(),
    })
}

/// The rows an upsert writes: one per key, since PostgreSQL cannot update a row twice in
/// one statement. With an order, the message of greatest `(order, $stream_sequence when a
/// column holds it)`, the first of equals: what the guard would keep had they come one at
/// a time. By arrival, the last. In key order, so two writers (batches in flight) lock the
/// rows they share in the same order and cannot deadlock. A message whose order cannot be
/// read is refused with its index.
pub(crate) fn newest_rows(
    batch: &[Envelope],
    documents: &[Option<Value>],
    plan: &TablePlan,
    written_at: OffsetDateTime,
) -> Result<Vec<usize>, Refused> {
    let doc = |r: usize| documents.get(r).and_then(Option::as_ref);
    let keys: Vec<String> = (0..batch.len())
        .map(|r| {
            plan.columns
                .iter()
                .filter(|c| c.key)
                .map(|c| format!("{:?}", cell(&c.source, &batch[r], doc(r), written_at)))
                .collect::<Vec<_>>()
                .join("\u{1f}")
        })
        .collect();
    let mut ranked = Vec::with_capacity(batch.len());
    for (r, key) in keys.iter().enumerate() {
        let rank = match plan.newest {
            None => (None, r as u64),
            Some(n) => {
                let c = &plan.columns[n.order];
                let (_, order) =
                    order_value(cell(&c.source, &batch[r], doc(r), written_at), c.family).map_err(
                        |why| Refused {
                            index: r,
                            message: format!("column {}: {why}", c.name),
                        },
                    )?;
                let tie = n.tie.map_or(0, |_| batch[r].stream_sequence);
                (Some(order), tie)
            }
        };
        ranked.push((key.as_str(), rank));
    }
    let mut rows = newest_of_each_key(ranked);
    rows.sort_by(|a, b| keys[*a].cmp(&keys[*b]));
    Ok(rows)
}

/// Parses every payload as JSON when `plan` reads pointers; otherwise a vector of `None`.
pub(crate) fn documents(
    batch: &[Envelope],
    plan: &TablePlan,
) -> Result<Vec<Option<Value>>, Refused> {
    parse_documents(batch, plan).map_err(|e| Refused {
        index: e.index,
        message: e.to_string(),
    })
}

/// The value of `text` as an `int8`, when it is one in the form both Rust and PostgreSQL
/// read the same way: an optional `-` and ASCII digits, within the 64-bit range. Anything
/// else (`+5`, ` 5`, `1e3`, `0x1F`) is left to the server's cast.
pub(crate) fn int8_text(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Whether every value of a text column is NULL or reads as an `int8` ([`int8_text`]), so
/// the batch can go by binary `COPY` into an `int8` column with no cast.
pub(crate) fn reads_as_int8(column: &ColumnData<'_>) -> bool {
    match column {
        ColumnData::Text(v) => v.iter().flatten().all(|t| int8_text(t).is_some()),
        _ => false,
    }
}

/// The whole encoded batch in PostgreSQL's binary `COPY` format, built in one buffer so it
/// goes out in a few large messages instead of one await per row. `Err` is the row whose
/// value could not be encoded (it cannot happen for the wires jetsink chooses, nor for a
/// text column sent as `int8` after [`reads_as_int8`]).
pub(crate) fn copy_data(encoded: &Encoded<'_>, wires: &[Wire]) -> Result<BytesMut, Refused> {
    let types: Vec<Type> = wires.iter().map(|w| w.pg_type()).collect();
    let mut buf = BytesMut::with_capacity(64 + encoded.rows * 64 * types.len().max(1));
    buf.put_slice(b"PGCOPY\n\xff\r\n\0");
    buf.put_i32(0); // flags
    buf.put_i32(0); // header extension length
    let fields = i16::try_from(encoded.columns.len()).unwrap_or(i16::MAX);
    for r in 0..encoded.rows {
        buf.put_i16(fields);
        for (column, ty) in encoded.columns.iter().zip(&types) {
            let at = buf.len();
            buf.put_i32(0);
            let refused = |e: Box<dyn StdError + Sync + Send>| Refused {
                index: r,
                message: format!("a value cannot be encoded for COPY: {e}"),
            };
            let written = match (column, *ty == Type::INT8) {
                // A JSON value's text going into an int8 column as int8 (the batch was
                // checked with `reads_as_int8`).
                (ColumnData::Text(v), true) => match v[r].as_deref().map(int8_text) {
                    None => Ok(IsNull::Yes),
                    Some(Some(n)) => n.to_sql(ty, &mut buf),
                    Some(None) => Err("not an integer".into()),
                },
                _ => column.row(r).to_sql_checked(ty, &mut buf),
            };
            let len = match written.map_err(refused)? {
                IsNull::Yes => -1,
                IsNull::No => i32::try_from(buf.len() - at - 4).map_err(|_| Refused {
                    index: r,
                    message: "a value exceeds 2 GiB".into(),
                })?,
            };
            buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
    }
    buf.put_i16(-1);
    Ok(buf)
}
