//! A JSON reader that refuses duplicate object keys, over-long strings and NUL.
//!
//! `serde_json` keeps the last of two equal keys without a word, so a config with
//! `"batch_size"` written twice would silently run with whichever came last. Operators
//! edit these files by hand; a duplicate is almost always a merge mistake, so it is an
//! error naming the JSON path of the object that holds it. NaN and Infinity are not
//! JSON and `serde_json` already rejects them.
//!
//! No string (key or value) may be longer than [`MAX_STRING_BYTES`] or hold U+0000: no
//! setting needs either, a 50 MB value would otherwise be carried into every message
//! that quotes it, and a NUL byte cannot be part of a path, an argument, an environment
//! variable or a header, so `run` would refuse it later, as a dependency failure (exit 69)
//! instead of a config error. The refusal names the path and the length, never the text.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a config text was not read.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON: a syntax error, trailing characters, NaN or Infinity. The message is
    /// `serde_json`'s, with its line and column.
    #[error("{0}")]
    Syntax(serde_json::Error),
    /// JSON this reader refuses, at the line and column where `serde_json` stood when
    /// the refusal was raised (as `serde_json` words its own errors).
    #[error("{refusal}{}", position(*line, *column))]
    Refused {
        /// What was refused and at which JSON path.
        refusal: Refusal,
        /// 1-based line; 0 when unknown.
        line: usize,
        /// 1-based column.
        column: usize,
    },
}

/// `serde_json`'s way of saying where: ` at line L column C`, or nothing when unknown.
fn position(line: usize, column: usize) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" at line {line} column {column}")
    }
}

/// What [`parse`] refuses that `serde_json` accepts, with the JSON path of where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An object holds `key` twice; `path` is the second one's.
    #[error("{path}: duplicate key `{key}`")]
    DuplicateKey {
        /// The JSON path of the second occurrence.
        path: String,
        /// The key.
        key: String,
    },
    /// A string longer than [`MAX_STRING_BYTES`]; its text is never quoted.
    #[error(
        "{}: {part} of {bytes} bytes; a config string holds at most {MAX_STRING_BYTES}",
        shown(path)
    )]
    TooLong {
        /// The JSON path of the value, or of the object holding the key.
        path: String,
        /// A key or a value.
        part: Part,
        /// Its length.
        bytes: usize,
    },
    /// A string holding U+0000.
    #[error(
        "{}: {part} holds a NUL character (U+0000), which no setting may contain",
        shown(path)
    )]
    Nul {
        /// The JSON path of the value, or of the object holding the key.
        path: String,
        /// A key or a value.
        part: Part,
    },
    /// A number that is not finite.
    #[error("{path}: not a finite number")]
    NotFinite {
        /// The JSON path of the number.
        path: String,
    },
}

/// Which string of an object member a [`Refusal`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// A member's name.
    Key,
    /// A string value.
    Value,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(match self {
            Part::Key => "a key",
            Part::Value => "a string",
        })
    }
}

/// A JSON path as a refusal shows it: the root has no name of its own.
fn shown(path: &str) -> &str {
    if path.is_empty() {
        "(root)"
    } else {
        path
    }
}

/// Parses `text` as JSON, failing on any duplicate key with its path.
pub fn parse(text: &str) -> Result<Value, JsonError> {
    // The visitor reports a refusal to serde as text, which is all serde carries; the
    // typed refusal is kept here, and matched with the error serde returns for it.
    let refused = RefCell::new(None);
    let fail = |e: serde_json::Error| match refused.borrow_mut().take() {
        Some(refusal) => JsonError::Refused {
            refusal,
            line: e.line(),
            column: e.column(),
        },
        None => JsonError::Syntax(e),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = ValueSeed {
        path: String::new(),
        refused: &refused,
    }
    .deserialize(&mut de)
    .map_err(fail)?;
    de.end().map_err(fail)?;
    Ok(value)
}

/// The longest string a config may hold, key or value, in bytes.
pub const MAX_STRING_BYTES: usize = 65_536;

/// Why `text`, found at `path`, cannot be a config string; `None` when it can.
fn bad_string(path: &str, part: Part, text: &str) -> Option<Refusal> {
    if text.len() > MAX_STRING_BYTES {
        return Some(Refusal::TooLong {
            path: path.to_string(),
            part,
            bytes: text.len(),
        });
    }
    text.contains('\0').then(|| Refusal::Nul {
        path: path.to_string(),
        part,
    })
}

struct ValueSeed<'r> {
    path: String,
    /// Where a refusal is kept for [`parse`] to return.
    refused: &'r RefCell<Option<Refusal>>,
}

impl ValueSeed<'_> {
    /// Keeps `refusal` and hands serde its text, which ends the parse.
    fn refuse<E: de::Error>(&self, refusal: Refusal) -> E {
        let e = E::custom(&refusal);
        *self.refused.borrow_mut() = Some(refusal);
        e
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        match serde_json::Number::from_f64(v) {
            Some(n) => Ok(Value::Number(n)),
            None => Err(self.refuse(Refusal::NotFinite {
                path: self.path.clone(),
            })),
        }
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        match bad_string(&self.path, Part::Value, v) {
            Some(refusal) => Err(self.refuse(refusal)),
            None => Ok(Value::String(v.to_string())),
        }
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        match bad_string(&self.path, Part::Value, &v) {
            Some(refusal) => Err(self.refuse(refusal)),
            None => Ok(Value::String(v)),
        }
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(ValueSeed {
            path: format!("{}[{}]", self.path, out.len()),
            refused: self.refused,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if let Some(refusal) = bad_string(&self.path, Part::Key, &key) {
                return Err(self.refuse(refusal));
            }
            let path = child(&self.path, &key);
            if out.contains_key(&key) {
                return Err(self.refuse(Refusal::DuplicateKey { path, key }));
            }
            let value = map.next_value_seed(ValueSeed {
                path,
                refused: self.refused,
            })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_key_is_rejected_with_its_path() {
        let err = parse(r#"{"sinks": {"a": {"delivery": {"batch_size": 1, "batch_size": 2}}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sinks.a.delivery.batch_size: duplicate key `batch_size`"),
            "{err}"
        );
    }

    #[test]
    fn a_refusal_is_typed_and_worded_as_serde_json_words_its_errors() {
        let err = parse("{\n  \"a\": 1,\n  \"a\": 2\n}").unwrap_err();
        let JsonError::Refused { refusal, line, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(
            *refusal,
            Refusal::DuplicateKey {
                path: "a".into(),
                key: "a".into()
            }
        );
        assert_eq!(*line, 3);
        assert!(
            err.to_string()
                .starts_with("a: duplicate key `a` at line 3 column "),
            "{err}"
        );
        assert!(matches!(parse("{").unwrap_err(), JsonError::Syntax(_)));
    }

    #[test]
    fn duplicate_key_inside_an_array_names_the_index() {
        let err = parse(r#"{"l": [{"x": 1}, {"x": 1, "x": 2}]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("l[1].x: duplicate key"), "{err}");
    }

    #[test]
    fn an_overlong_string_is_refused_by_path_and_length_without_its_text() {
        let long = "x".repeat(MAX_STRING_BYTES + 1);
        let err = parse(&format!(r#"{{"a": {{"b": ["{long}"]}}}}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("a.b[0]: a string of 65537 bytes; a config string holds at most 65536"),
            "{}",
            &err[..err.len().min(200)]
        );
        assert!(!err.contains("xxxxxxxx"), "the text is not quoted");
        let err = parse(&format!(r#"{{"a": {{"{long}": 1}}}}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("a: a key of 65537 bytes"),
            "{}",
            &err[..err.len().min(200)]
        );
        let exact = "y".repeat(MAX_STRING_BYTES);
        assert!(parse(&format!(r#"{{"a": "{exact}"}}"#)).is_ok());
    }

    #[test]
    fn a_nul_character_is_refused_in_values_and_keys() {
        let err = parse(r#"{"sinks": {"a": {"destination": {"path": "db\u0000.sqlite"}}}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("sinks.a.destination.path: a string holds a NUL character"),
            "{err}"
        );
        let err = parse(r#"{"k\u0000": 1}"#).unwrap_err().to_string();
        assert!(
            err.starts_with("(root): a key holds a NUL character"),
            "{err}"
        );
    }

    #[test]
    fn nan_and_infinity_are_not_json() {
        assert!(parse(r#"{"a": NaN}"#).is_err());
        assert!(parse(r#"{"a": Infinity}"#).is_err());
    }

    #[test]
    fn trailing_garbage_is_rejected() {
        assert!(parse(r#"{"a": 1} x"#).is_err());
    }

    #[test]
    fn ordinary_documents_round_trip() {
        let v = parse(r#"{"a": [1, -2, 3.5, "x", null, true], "b": {}}"#).unwrap();
        assert_eq!(v["a"][2], serde_json::json!(3.5));
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;
        use serde_json::{Map, Value};

        /// Any string a config may hold: no NUL.
        fn text() -> impl Strategy<Value = String> {
            any::<String>().prop_map(|s| s.replace('\0', ""))
        }

        /// Any JSON document with unique keys, finite numbers and strings without NUL.
        fn document() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                // Decimals serde_json reads back exactly (it is not built with
                // `float_roundtrip`; configs hold weights and shares, not 17-digit floats).
                (-1_000_000_000i64..1_000_000_000).prop_map(|n| Value::from(n as f64 / 1000.0)),
                text().prop_map(Value::String),
            ];
            leaf.prop_recursive(4, 64, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::btree_map(text(), inner, 0..6)
                        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1_000))]

            #[test]
            fn any_text_is_parsed_or_refused_without_panic(text in any::<String>()) {
                let _ = parse(&text);
            }

            #[test]
            fn any_json_document_with_unique_keys_reads_back_unchanged(v in document()) {
                let text = serde_json::to_string(&v).unwrap();
                prop_assert_eq!(parse(&text).map_err(|e| e.to_string()), Ok(v));
            }

            #[test]
            fn a_key_written_twice_is_refused_at_any_depth(
                v in document(),
                key in "[a-z_]{1,12}",
                depth in 0usize..4,
            ) {
                let mut inner = format!(r#"{{"{key}": 1, "{key}": 2}}"#);
                for level in 0..depth {
                    inner = format!(r#"{{"level{level}": [{inner}]}}"#);
                }
                let text = format!(
                    r#"{{"doc": {}, "dup": {inner}}}"#,
                    serde_json::to_string(&v).unwrap()
                );
                let err = parse(&text).unwrap_err().to_string();
                let expected = format!("duplicate key `{key}`");
                prop_assert!(err.contains(&expected), "{}", err);
            }
        }
    }
}
