//! The settings the `s3` and `file` destinations share for `format: "parquet"`, and their
//! checks: the codec, the row-group size, and the column layout — the jetsink layout, or a
//! column mapping (the database destinations' `columns`, parsed by the same code) with a
//! Parquet type per column. Pure: no I/O, so `validate` reports every problem at its key.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::database::columns::{compatible, Family, Mapping, Source, ValueKind};

/// The Parquet settings a sink was built with, refused: validation reports each problem
/// by its key before start-up, and a sink built anyway holds them to refuse its open with
/// every one named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(|(k, m)| format!("{k}: {m}")).collect::<Vec<_>>().join("; "))]
pub struct SettingsRefused(pub Vec<(String, String)>);

/// How a destination lays out what it writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// JSON Lines, one record per message (the default).
    #[default]
    Jsonl,
    /// Apache Parquet: typed columns, compressed, with statistics.
    Parquet,
}

/// The compression of a Parquet file's pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Codec {
    /// zstd level 3 (the default): about gzip's ratio, several times faster.
    #[default]
    Zstd,
    /// Snappy: faster, larger files.
    Snappy,
    /// No compression.
    None,
}

/// The Parquet type of a mapped column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    /// UTF-8 text (`BYTE_ARRAY` `STRING`).
    String,
    /// A signed 64-bit integer (`INT64`).
    Int64,
    /// A 64-bit float (`DOUBLE`).
    Double,
    /// `BOOLEAN`.
    Boolean,
    /// A UTC point in time, in microseconds (`INT64` `TIMESTAMP(MICROS,true)`).
    Timestamp,
    /// A calendar date (`INT32` `DATE`).
    Date,
    /// A JSON document as text (`BYTE_ARRAY` `JSON`).
    Json,
    /// Raw bytes (`BYTE_ARRAY`).
    Binary,
}

impl ColumnType {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::String => "string",
            ColumnType::Int64 => "int64",
            ColumnType::Double => "double",
            ColumnType::Boolean => "boolean",
            ColumnType::Timestamp => "timestamp",
            ColumnType::Date => "date",
            ColumnType::Json => "json",
            ColumnType::Binary => "binary",
        }
    }

    /// The database type class with the same conversions, so the mapping's type check
    /// ([`compatible`]) is the one the database destinations apply.
    pub fn family(self) -> Family {
        match self {
            ColumnType::String => Family::Text,
            ColumnType::Int64 => Family::Integer,
            ColumnType::Double => Family::Decimal,
            ColumnType::Boolean => Family::Boolean,
            ColumnType::Timestamp => Family::Timestamp,
            ColumnType::Date => Family::Date,
            ColumnType::Json => Family::Json,
            ColumnType::Binary => Family::Bytes,
        }
    }

    /// The column's Parquet declaration, without repetition and name.
    pub fn declaration(self) -> &'static str {
        match self {
            ColumnType::String => "binary {} (STRING)",
            ColumnType::Int64 => "int64 {}",
            ColumnType::Double => "double {}",
            ColumnType::Boolean => "boolean {}",
            ColumnType::Timestamp => "int64 {} (TIMESTAMP(MICROS,true))",
            ColumnType::Date => "int32 {} (DATE)",
            ColumnType::Json => "binary {} (JSON)",
            ColumnType::Binary => "binary {}",
        }
    }

    /// The type a source gets when `column_types` names none; `None` for a JSON pointer,
    /// whose type the payload cannot tell in advance.
    pub fn default_for(kind: ValueKind) -> Option<ColumnType> {
        match kind {
            ValueKind::Text => Some(ColumnType::String),
            ValueKind::Integer => Some(ColumnType::Int64),
            ValueKind::Timestamp => Some(ColumnType::Timestamp),
            ValueKind::Json => Some(ColumnType::Json),
            ValueKind::Bytes => Some(ColumnType::Binary),
            ValueKind::Any => None,
        }
    }
}

/// Fewest rows per row group.
pub const MIN_ROW_GROUP_ROWS: u64 = 100;
/// Most rows per row group.
pub const MAX_ROW_GROUP_ROWS: u64 = 1_000_000;
/// Rows per row group when `row_group_rows` is not set.
pub const DEFAULT_ROW_GROUP_ROWS: u64 = 10_000;

/// One column of a mapped layout: its name, where its value comes from, its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappedColumn {
    /// The column name in the file.
    pub name: String,
    /// Where its value comes from.
    pub source: Source,
    /// Its Parquet type.
    pub ty: ColumnType,
}

/// The columns of a Parquet file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// The jetsink layout: the envelope's fields (see [`super::schema::DEFAULT_SCHEMA`]).
    Default,
    /// A column mapping, in column-name order, every column optional.
    Mapped(Vec<MappedColumn>),
}

/// The resolved Parquet settings of one destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Page compression.
    pub codec: Codec,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// The columns.
    pub layout: Layout,
}

/// The Parquet keys of a destination's config, as written (each `None` when absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct Keys<'a> {
    /// `format`.
    pub format: Format,
    /// `compression`, when it names a Parquet codec (the destination checks its own
    /// other values).
    pub codec: Option<Codec>,
    /// `row_group_rows`.
    pub row_group_rows: Option<u64>,
    /// `columns`.
    pub columns: Option<&'a BTreeMap<String, String>>,
    /// `column_types`.
    pub column_types: Option<&'a BTreeMap<String, ColumnType>>,
}

impl Keys<'_> {
    /// Every problem as `(key, message)`, keys relative to the destination object.
    pub fn problems(&self) -> Vec<(String, String)> {
        match self.format {
            Format::Jsonl => [
                ("row_group_rows", self.row_group_rows.is_some()),
                ("columns", self.columns.is_some()),
                ("column_types", self.column_types.is_some()),
            ]
            .into_iter()
            .filter(|(_, set)| *set)
            .map(|(key, _)| {
                (
                    key.to_string(),
                    "applies to `format: \"parquet\"` only".to_string(),
                )
            })
            .collect(),
            Format::Parquet => match self.resolve() {
                Ok(_) => Vec::new(),
                Err(problems) => problems,
            },
        }
    }

    /// The settings, or every problem.
    pub fn resolve(&self) -> Result<Options, Vec<(String, String)>> {
        let mut problems = Vec::new();
        let rows = self.row_group_rows.unwrap_or(DEFAULT_ROW_GROUP_ROWS);
        if !(MIN_ROW_GROUP_ROWS..=MAX_ROW_GROUP_ROWS).contains(&rows) {
            problems.push((
                "row_group_rows".into(),
                format!(
                    "must be between {MIN_ROW_GROUP_ROWS} and {MAX_ROW_GROUP_ROWS}, got {rows}"
                ),
            ));
        }
        let layout = match self.columns {
            None => {
                if self.column_types.is_some() {
                    problems.push((
                        "column_types".into(),
                        "types the columns of a `columns` mapping; without one the jetsink layout's types are fixed".into(),
                    ));
                }
                Layout::Default
            }
            Some(columns) => mapped(columns, self.column_types, &mut problems),
        };
        if problems.is_empty() {
            Ok(Options {
                codec: self.codec.unwrap_or_default(),
                row_group_rows: rows as usize,
                layout,
            })
        } else {
            Err(problems)
        }
    }
}

/// The mapped layout of `columns` typed by `types`; problems are added to `problems`.
fn mapped(
    columns: &BTreeMap<String, String>,
    types: Option<&BTreeMap<String, ColumnType>>,
    problems: &mut Vec<(String, String)>,
) -> Layout {
    let at = |column: &str| {
        if column.is_empty() {
            "columns".to_string()
        } else {
            format!("columns.{column}")
        }
    };
    let mapping = match Mapping::parse(columns) {
        Ok(m) => m,
        Err(errors) => {
            problems.extend(errors.into_iter().map(|(c, m)| (at(&c), m)));
            return Layout::Mapped(Vec::new());
        }
    };
    let empty = BTreeMap::new();
    let types = types.unwrap_or(&empty);
    for name in types.keys().filter(|n| !columns.contains_key(*n)) {
        problems.push((
            format!("column_types.{name}"),
            format!("names no column of `columns` (mapped: {})", names(columns)),
        ));
    }
    let mut out = Vec::with_capacity(mapping.columns.len());
    for (name, source) in mapping.columns {
        if !plain_name(&name) {
            problems.push((
                at(&name),
                "Parquet column names here are letters, digits and `_`, not starting with a digit (so every SQL engine reads them unquoted)".into(),
            ));
            continue;
        }
        let kind = source.kind();
        let Some(ty) = types
            .get(&name)
            .copied()
            .or_else(|| ColumnType::default_for(kind))
        else {
            problems.push((
                format!("column_types.{name}"),
                format!(
                    "column {name} reads {} from the payload, so it needs a type: one of string, int64, double, boolean, timestamp, date, json",
                    source.spelling()
                ),
            ));
            continue;
        };
        if !compatible(kind, ty.family()) {
            problems.push((
                format!("column_types.{name}"),
                format!(
                    "a {} column cannot hold {} ({})",
                    ty.name(),
                    kind.describe(),
                    source.spelling()
                ),
            ));
            continue;
        }
        out.push(MappedColumn { name, source, ty });
    }
    Layout::Mapped(out)
}

fn names(columns: &BTreeMap<String, String>) -> String {
    columns.keys().cloned().collect::<Vec<_>>().join(", ")
}

/// Letters, digits and `_`, not starting with a digit.
fn plain_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn keys_of(problems: &[(String, String)]) -> Vec<&str> {
        problems.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn parquet_alone_is_the_jetsink_layout_with_zstd_and_ten_thousand_rows() {
        let keys = Keys {
            format: Format::Parquet,
            ..Keys::default()
        };
        assert_eq!(
            keys.resolve(),
            Ok(Options {
                codec: Codec::Zstd,
                row_group_rows: 10_000,
                layout: Layout::Default
            })
        );
    }

    #[test]
    fn parquet_keys_on_json_lines_are_named() {
        let columns = map(&[("a", "$subject")]);
        let keys = Keys {
            format: Format::Jsonl,
            row_group_rows: Some(500),
            columns: Some(&columns),
            ..Keys::default()
        };
        assert_eq!(keys_of(&keys.problems()), ["row_group_rows", "columns"]);
    }

    #[test]
    fn a_mapping_takes_types_from_its_sources_and_refuses_what_cannot_fit() {
        let columns = map(&[
            ("seq", "$stream_sequence"),
            ("at", "$published_at"),
            ("body", "$payload"),
            ("id", "/order/id"),
            ("total", "/order/total"),
            ("bad_kind", "$subject"),
            ("untyped", "/x"),
            ("9lives", "$stream"),
        ]);
        let types: BTreeMap<String, ColumnType> = [
            ("id".to_string(), ColumnType::Int64),
            ("total".to_string(), ColumnType::Double),
            ("bad_kind".to_string(), ColumnType::Int64),
            ("ghost".to_string(), ColumnType::String),
        ]
        .into_iter()
        .collect();
        let keys = Keys {
            format: Format::Parquet,
            columns: Some(&columns),
            column_types: Some(&types),
            ..Keys::default()
        };
        let problems = keys.resolve().unwrap_err();
        assert_eq!(
            keys_of(&problems),
            [
                "column_types.ghost",
                "columns.9lives",
                "column_types.bad_kind",
                "column_types.untyped"
            ],
            "{problems:?}"
        );
        assert!(problems[2]
            .1
            .contains("a int64 column cannot hold text ($subject)"));
        let types: BTreeMap<String, ColumnType> = [
            ("id".to_string(), ColumnType::Int64),
            ("total".to_string(), ColumnType::Double),
        ]
        .into_iter()
        .collect();
        let columns = map(&[
            ("seq", "$stream_sequence"),
            ("at", "$published_at"),
            ("body", "$payload"),
            ("id", "/order/id"),
            ("total", "/order/total"),
        ]);
        let keys = Keys {
            format: Format::Parquet,
            columns: Some(&columns),
            column_types: Some(&types),
            codec: Some(Codec::Snappy),
            row_group_rows: Some(100),
        };
        let options = keys.resolve().unwrap();
        let Layout::Mapped(cols) = options.layout else {
            panic!("mapped")
        };
        let typed: Vec<(&str, ColumnType)> = cols.iter().map(|c| (c.name.as_str(), c.ty)).collect();
        assert_eq!(
            typed,
            [
                ("at", ColumnType::Timestamp),
                ("body", ColumnType::Binary),
                ("id", ColumnType::Int64),
                ("seq", ColumnType::Int64),
                ("total", ColumnType::Double)
            ]
        );
        assert_eq!(
            (options.codec, options.row_group_rows),
            (Codec::Snappy, 100)
        );
    }

    #[test]
    fn row_groups_are_range_checked_and_types_need_a_mapping() {
        let types: BTreeMap<String, ColumnType> =
            [("a".to_string(), ColumnType::Int64)].into_iter().collect();
        let keys = Keys {
            format: Format::Parquet,
            row_group_rows: Some(99),
            column_types: Some(&types),
            ..Keys::default()
        };
        assert_eq!(
            keys_of(&keys.problems()),
            ["row_group_rows", "column_types"]
        );
    }
}
