//! Turns envelopes into rows of `mysql_async` parameter values, one per mapped column.
//!
//! Content jetsink can check itself is refused here with the message's batch index, before
//! anything is sent: a payload that is not JSON for a JSON column or pointer mapping, a
//! payload that is not UTF-8 for a text column, a timestamp MySQL cannot represent.

use mysql_async::Value;
use serde_json::Value as Json;
use time::OffsetDateTime;

use crate::envelope::{rfc3339, Envelope};
use crate::sinks::database::cells::{cell, is_json, value_text, Cell};
use crate::sinks::database::columns::{Family, TablePlan};
use crate::sinks::database::newest::{order_value, OrderValueError};

/// Why a value cannot be sent to MySQL: what is wrong, never what the value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ValueError {
    /// A payload for a JSON column that is not one JSON document.
    #[error("the payload is not JSON")]
    PayloadNotJson,
    /// A payload for a text or JSON column that is not UTF-8.
    #[error("the payload is not valid UTF-8 text")]
    PayloadNotUtf8,
    /// A timestamp a `DATETIME` cannot hold.
    #[error("a timestamp is outside the years 1000-9999 MySQL stores")]
    YearOutOfRange,
    /// The order column's value of an ordered upsert cannot be read.
    #[error("{0}")]
    Order(OrderValueError),
}

/// A row that cannot be sent: the column whose value is refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {problem}")]
pub(crate) struct ColumnError {
    /// The column as stored in the table.
    pub column: String,
    /// What is wrong with its value.
    pub problem: ValueError,
}

/// The parameter for one cell going into a column of `family`.
pub(crate) fn value(c: Cell<'_>, family: Family) -> Result<Value, ValueError> {
    Ok(match c {
        Cell::Null => Value::NULL,
        Cell::Text(s) => Value::Bytes(s.as_bytes().to_vec()),
        Cell::UInt(n) => match family {
            Family::Integer | Family::Decimal => Value::UInt(n),
            _ => Value::Bytes(n.to_string().into_bytes()),
        },
        Cell::Timestamp(t) => match family {
            Family::Timestamp => datetime(t)?,
            _ => Value::Bytes(rfc3339(t).into_bytes()),
        },
        Cell::Json(s) => Value::Bytes(s.into_bytes()),
        Cell::Bytes(b) => {
            match family {
                Family::Json if !is_json(b) => return Err(ValueError::PayloadNotJson),
                Family::Text | Family::Json if std::str::from_utf8(b).is_err() => {
                    return Err(ValueError::PayloadNotUtf8)
                }
                _ => {}
            }
            Value::Bytes(b.to_vec())
        }
        Cell::Value(j) => match (family, j) {
            (Family::Json, _) => Value::Bytes(j.to_string().into_bytes()),
            (_, Json::Bool(b)) if family != Family::Text && family != Family::Enum => {
                Value::Int(i64::from(*b))
            }
            (Family::Integer | Family::Boolean, Json::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Value::UInt(u)
                } else {
                    Value::Bytes(n.to_string().into_bytes())
                }
            }
            _ => Value::Bytes(value_text(j).into_owned().into_bytes()),
        },
    })
}

/// A UTC `DATETIME(6)` value (microseconds; nanoseconds are truncated).
fn datetime(t: OffsetDateTime) -> Result<Value, ValueError> {
    let t = t.to_offset(time::UtcOffset::UTC);
    let year = u16::try_from(t.year())
        .ok()
        .filter(|y| (1000..=9999).contains(y))
        .ok_or(ValueError::YearOutOfRange)?;
    Ok(Value::Date(
        year,
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.microsecond(),
    ))
}

/// Approximate bytes a value takes in a statement, for splitting big batches.
pub(crate) fn size(v: &Value) -> usize {
    match v {
        Value::Bytes(b) => b.len() + 9,
        _ => 9,
    }
}

/// One row's parameters for `plan`'s columns, the order column's value read as an order
/// (see `database::newest`); the error names the first column refused.
pub(crate) fn row(
    plan: &TablePlan,
    envelope: &Envelope,
    document: Option<&Json>,
    written_at: OffsetDateTime,
) -> Result<Vec<Value>, ColumnError> {
    let order_at = plan.newest.map(|n| n.order);
    plan.columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let refused = |problem| ColumnError {
                column: c.name.clone(),
                problem,
            };
            let mut v = cell(&c.source, envelope, document, written_at);
            if order_at == Some(i) {
                v = order_value(v, c.family)
                    .map_err(|e| refused(ValueError::Order(e)))?
                    .0;
            }
            value(v, c.family).map_err(refused)
        })
        .collect()
}
