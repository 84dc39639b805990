//! A mapped column's value for one message, converted to its Parquet type, or why it does
//! not fit. Pure. The values come from the database destinations' [`cell`] (so `$subject`
//! or `/order/id` mean what they mean there), and a value that does not fit its column is
//! refused as that message's content, like a database refusing it: the runner isolates
//! and dead-letters that one message and every other row is written. The reasons name
//! the column and the source, never the value.
//!
//! [`cell`]: crate::sinks::database::cells::cell

use parquet::data_type::ByteArray;
use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::{Date, OffsetDateTime};

use super::settings::ColumnType;
use crate::envelope::rfc3339;
use crate::sinks::database::cells::{is_json, value_text, Cell};

/// One typed value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Typed {
    /// Absent (an optional field without a value, a missing or `null` pointer target).
    Null,
    /// `BYTE_ARRAY` (string, json, binary).
    Bytes(ByteArray),
    /// `INT64` (int64, timestamp in microseconds).
    I64(i64),
    /// `INT32` (date, days since 1970-01-01).
    I32(i32),
    /// `DOUBLE`.
    F64(f64),
    /// `BOOLEAN`.
    Bool(bool),
}

/// Microseconds since the epoch of `t`; every `OffsetDateTime` fits.
pub fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos().div_euclid(1_000)).unwrap_or(i64::MAX)
}

/// Why a value does not fit its column: names the source (its config spelling), never
/// the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// The value read from `from` is not of the kind the column holds.
    #[error("the value of {from} is not {expected}")]
    NotA {
        /// The column's source (`/order/id`, `$subject`).
        from: String,
        /// What the column needs.
        expected: Expected,
    },
    /// A JSON integer past `i64::MAX`.
    #[error("the value of {from} exceeds the int64 range")]
    ValueOutOfRange {
        /// The column's source.
        from: String,
    },
    /// An envelope number (a sequence) past `i64::MAX`.
    #[error("{from} exceeds the int64 range")]
    FieldOutOfRange {
        /// The column's source.
        from: String,
    },
    /// Bytes for a string column that are not UTF-8.
    #[error("{from} is not valid UTF-8 text")]
    NotUtf8 {
        /// The column's source.
        from: String,
    },
    /// Bytes for a json column that are not JSON.
    #[error("{from} is not JSON")]
    NotJson {
        /// The column's source.
        from: String,
    },
    /// A source validation does not allow in a column of this type.
    #[error("{from} cannot be stored in a {} column", .ty.name())]
    Incompatible {
        /// The column's source.
        from: String,
        /// The column's type.
        ty: ColumnType,
    },
}

/// What a column needs, in [`ValueError::NotA`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// An int64 column.
    Integer,
    /// A double column.
    Number,
    /// A boolean column.
    Boolean,
    /// A timestamp column.
    Timestamp,
    /// A date column.
    Date,
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Expected::Integer => "an integer",
            Expected::Number => "a number",
            Expected::Boolean => "a boolean",
            Expected::Timestamp => "an RFC 3339 timestamp",
            Expected::Date => "a date (YYYY-MM-DD)",
        })
    }
}

/// `c`, the value of a column of type `ty` reading `source` (its config spelling, for
/// the reason), converted; `Err` says why it does not fit.
pub fn convert(c: Cell<'_>, ty: ColumnType, source: &str) -> Result<Typed, ValueError> {
    let from = || source.to_string();
    let not = |expected: Expected| ValueError::NotA {
        from: from(),
        expected,
    };
    Ok(match (ty, c) {
        (_, Cell::Null) => Typed::Null,
        (ColumnType::String, c) => Typed::Bytes(ByteArray::from(text(c, source)?.into_bytes())),
        (ColumnType::Json, c) => Typed::Bytes(ByteArray::from(json(c, source)?.into_bytes())),
        (ColumnType::Binary, Cell::Bytes(b)) => Typed::Bytes(ByteArray::from(b.to_vec())),
        (ColumnType::Int64, Cell::UInt(n)) => {
            Typed::I64(i64::try_from(n).map_err(|_| ValueError::FieldOutOfRange { from: from() })?)
        }
        (ColumnType::Int64, Cell::Value(v)) => Typed::I64(match v {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i,
                (None, Some(_)) => return Err(ValueError::ValueOutOfRange { from: from() }),
                _ => return Err(not(Expected::Integer)),
            },
            Value::String(s) => s.trim().parse().map_err(|_| not(Expected::Integer))?,
            _ => return Err(not(Expected::Integer)),
        }),
        (ColumnType::Double, Cell::UInt(n)) => Typed::F64(n as f64),
        (ColumnType::Double, Cell::Value(v)) => Typed::F64(match v {
            Value::Number(n) => n.as_f64().ok_or_else(|| not(Expected::Number))?,
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or_else(|| not(Expected::Number))?,
            _ => return Err(not(Expected::Number)),
        }),
        (ColumnType::Boolean, Cell::Value(v)) => Typed::Bool(match v {
            Value::Bool(b) => *b,
            Value::String(s) if s == "true" => true,
            Value::String(s) if s == "false" => false,
            _ => return Err(not(Expected::Boolean)),
        }),
        (ColumnType::Timestamp, Cell::Timestamp(t)) => Typed::I64(micros(t)),
        (ColumnType::Timestamp, Cell::Value(Value::String(s))) => Typed::I64(micros(
            OffsetDateTime::parse(s.trim(), &Rfc3339).map_err(|_| not(Expected::Timestamp))?,
        )),
        (ColumnType::Date, Cell::Value(Value::String(s))) => {
            let format = time::format_description::well_known::Iso8601::DATE;
            let d = Date::parse(s.trim(), &format).map_err(|_| not(Expected::Date))?;
            Typed::I32(d.to_julian_day() - EPOCH_JULIAN_DAY)
        }
        (ColumnType::Timestamp, _) => return Err(not(Expected::Timestamp)),
        (ColumnType::Date, _) => return Err(not(Expected::Date)),
        // Validation refuses the remaining pairs (compatible()); a value reaching one is
        // refused rather than written wrong.
        (ty, _) => return Err(ValueError::Incompatible { from: from(), ty }),
    })
}

/// The Julian day of 1970-01-01.
const EPOCH_JULIAN_DAY: i32 = 2_440_588;

/// The text form of a value for a string column.
fn text(c: Cell<'_>, source: &str) -> Result<String, ValueError> {
    Ok(match c {
        Cell::Null => String::new(),
        Cell::Text(s) => s.into_owned(),
        Cell::UInt(n) => n.to_string(),
        Cell::Timestamp(t) => rfc3339(t),
        Cell::Json(s) => s,
        Cell::Bytes(b) => std::str::from_utf8(b)
            .map_err(|_| ValueError::NotUtf8 {
                from: source.to_string(),
            })?
            .to_string(),
        Cell::Value(v) => value_text(v).into_owned(),
    })
}

/// The JSON text of a value for a json column.
fn json(c: Cell<'_>, source: &str) -> Result<String, ValueError> {
    Ok(match c {
        Cell::Null => "null".into(),
        Cell::Json(s) => s,
        Cell::Value(v) => v.to_string(),
        Cell::Bytes(b) => {
            if !is_json(b) {
                return Err(ValueError::NotJson {
                    from: source.to_string(),
                });
            }
            String::from_utf8_lossy(b).into_owned()
        }
        Cell::Text(s) => Value::String(s.into_owned()).to_string(),
        Cell::UInt(n) => n.to_string(),
        Cell::Timestamp(t) => Value::String(rfc3339(t)).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn conv(v: &Value, ty: ColumnType) -> Result<Typed, ValueError> {
        convert(Cell::Value(v), ty, "/x")
    }

    #[test]
    fn json_values_convert_to_their_column_type_or_say_why_not() {
        use ColumnType as T;
        assert_eq!(conv(&json!(42), T::Int64), Ok(Typed::I64(42)));
        assert_eq!(conv(&json!("-7"), T::Int64), Ok(Typed::I64(-7)));
        assert_eq!(conv(&json!(1.5), T::Double), Ok(Typed::F64(1.5)));
        assert_eq!(conv(&json!("2.25"), T::Double), Ok(Typed::F64(2.25)));
        assert_eq!(conv(&json!(true), T::Boolean), Ok(Typed::Bool(true)));
        assert_eq!(
            conv(&json!("1970-01-01T00:00:01.5Z"), T::Timestamp),
            Ok(Typed::I64(1_500_000))
        );
        assert_eq!(conv(&json!("1970-01-11"), T::Date), Ok(Typed::I32(10)));
        assert_eq!(
            conv(&json!({"a": [1]}), T::Json),
            Ok(Typed::Bytes(ByteArray::from(br#"{"a":[1]}"#.to_vec())))
        );
        assert_eq!(
            conv(&json!(12), T::String),
            Ok(Typed::Bytes(ByteArray::from(b"12".to_vec())))
        );
        for (v, ty, why) in [
            (json!(1.5), T::Int64, "the value of /x is not an integer"),
            (json!("abc"), T::Int64, "the value of /x is not an integer"),
            (
                json!(u64::MAX),
                T::Int64,
                "the value of /x exceeds the int64 range",
            ),
            (json!([1]), T::Double, "the value of /x is not a number"),
            (json!("NaN"), T::Double, "the value of /x is not a number"),
            (json!(1), T::Boolean, "the value of /x is not a boolean"),
            (
                json!("yesterday"),
                T::Timestamp,
                "the value of /x is not an RFC 3339 timestamp",
            ),
            (
                json!(3),
                T::Date,
                "the value of /x is not a date (YYYY-MM-DD)",
            ),
        ] {
            assert_eq!(
                conv(&v, ty).map_err(|e| e.to_string()),
                Err(why.to_string()),
                "{v} into {ty:?}"
            );
        }
        assert_eq!(convert(Cell::Null, T::Int64, "/x"), Ok(Typed::Null));
    }

    #[test]
    fn envelope_values_convert_and_payloads_are_checked() {
        use ColumnType as T;
        assert_eq!(
            convert(Cell::UInt(u64::MAX), T::Int64, "$stream_sequence"),
            Err(ValueError::FieldOutOfRange {
                from: "$stream_sequence".into()
            })
        );
        assert_eq!(
            convert(Cell::Bytes(b"\xff"), T::String, "$payload").map_err(|e| e.to_string()),
            Err("$payload is not valid UTF-8 text".into())
        );
        assert_eq!(
            convert(Cell::Bytes(b"not json"), T::Json, "$payload").map_err(|e| e.to_string()),
            Err("$payload is not JSON".into())
        );
        let t = OffsetDateTime::from_unix_timestamp_nanos(-1_500).unwrap();
        assert_eq!(micros(t), -2, "floor, so times before 1970 sort right");
        assert_eq!(
            convert(Cell::Timestamp(t), T::Timestamp, "$published_at"),
            Ok(Typed::I64(-2))
        );
    }

    const REASONS: [&str; 6] = [
        "is not an integer",
        "exceeds the int64 range",
        "is not a number",
        "is not a boolean",
        "is not an RFC 3339 timestamp",
        "is not a date (YYYY-MM-DD)",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn any_json_value_in_any_column_is_converted_or_refused_without_panic(
            text in any::<String>(),
            n in any::<i64>(),
            f in any::<f64>(),
        ) {
            use ColumnType as T;
            for v in [json!(text), json!(n), json!(f), json!([text.clone()]), json!({"k": n})] {
                for ty in [T::String, T::Int64, T::Double, T::Boolean, T::Timestamp, T::Date, T::Json] {
                    if let Err(why) = conv(&v, ty).map_err(|e| e.to_string()) {
                        // A fixed reason about the source: never the value.
                        let reason = why.strip_prefix("the value of /x ").unwrap_or("");
                        prop_assert!(REASONS.contains(&reason), "{}", why);
                    }
                }
            }
            prop_assert_eq!(conv(&json!(n), T::Int64), Ok(Typed::I64(n)));
        }
    }
}
