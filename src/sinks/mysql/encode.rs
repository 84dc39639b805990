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
use crate::sinks::database::columns::{Family, PlannedColumn};

/// The parameter for one cell going into a column of `family`. `Err` says what is wrong,
/// never what the value is.
pub(crate) fn value(c: Cell<'_>, family: Family) -> Result<Value, String> {
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
                Family::Json if !is_json(b) => return Err("the payload is not JSON".into()),
                Family::Text | Family::Json if std::str::from_utf8(b).is_err() => {
                    return Err("the payload is not valid UTF-8 text".into())
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
fn datetime(t: OffsetDateTime) -> Result<Value, String> {
    let t = t.to_offset(time::UtcOffset::UTC);
    let year = u16::try_from(t.year())
        .ok()
        .filter(|y| (1000..=9999).contains(y))
        .ok_or_else(|| "a timestamp is outside the years 1000-9999 MySQL stores".to_string())?;
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

/// One row's parameters for `columns`. `Err` is `(column, why)`.
pub(crate) fn row(
    columns: &[PlannedColumn],
    envelope: &Envelope,
    document: Option<&Json>,
    written_at: OffsetDateTime,
) -> Result<Vec<Value>, String> {
    columns
        .iter()
        .map(|c| {
            value(cell(&c.source, envelope, document, written_at), c.family)
                .map_err(|why| format!("column {}: {why}", c.name))
        })
        .collect()
}
