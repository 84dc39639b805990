//! The file destination's settings and their checks: JSON Lines files appended batch by
//! batch (the default), or Parquet files written whole, one per write.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::parquet::{Codec, ColumnType, Format, Keys};
use crate::sinks::settings::{Accumulate, DestinationSettings, NamedPath, PathRole};
use crate::sinks::util::rollover::RolloverConfig;

/// The file destination: JSON Lines files, or Parquet files.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Directory of the files; created at start-up. Default `data/events`.
    #[serde(default = "default_directory")]
    pub directory: String,
    /// fdatasync after every batch before it is ACKed. Default true; false trades
    /// durability across power loss for speed.
    #[serde(default = "yes")]
    pub fsync: bool,
    /// JSON Lines: start a new file once the current one reaches this size; 0 never
    /// rotates by size. Default 134217728 (128 MiB).
    #[serde(default = "default_rotate_bytes")]
    pub rotate_bytes: u64,
    /// JSON Lines: start a new file after this many milliseconds; 0 (default) never
    /// rotates by time.
    #[serde(default)]
    pub rotate_interval_ms: u64,
    /// File name prefix (letters, digits, `_`, `-`). Default `events`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// `jsonl` (default): JSON Lines appended to `.jsonl` files; `parquet`: one whole
    /// `.parquet` file per write, written to a temporary name, synced and renamed.
    #[serde(default)]
    pub format: Format,
    /// Parquet only: `zstd` (default), `snappy` or `none`.
    #[serde(default)]
    pub compression: Option<Codec>,
    /// Parquet only: rows per row group, 100 – 1000000. Default 10000.
    #[serde(default)]
    pub row_group_rows: Option<u64>,
    /// Parquet only: a column mapping, column name → an envelope field (`$subject`) or a
    /// JSON pointer into the payload (`/order/id`). Default: the jetsink layout.
    #[serde(default)]
    pub columns: Option<BTreeMap<String, String>>,
    /// Parquet only: the type of mapped columns; required for JSON pointer columns.
    #[serde(default)]
    pub column_types: Option<BTreeMap<String, ColumnType>>,
    /// Parquet only: several pulled batches per file. Messages are held (unacknowledged)
    /// until `max_messages` or `max_age_ms`, then written as one file and ACKed once it
    /// is renamed into place. Default: none, one file per batch.
    #[serde(default)]
    pub rollover: Option<RolloverConfig>,
}

impl Default for FileConfig {
    fn default() -> FileConfig {
        FileConfig {
            directory: default_directory(),
            fsync: true,
            rotate_bytes: default_rotate_bytes(),
            rotate_interval_ms: 0,
            prefix: default_prefix(),
            format: Format::Jsonl,
            compression: None,
            row_group_rows: None,
            columns: None,
            column_types: None,
            rollover: None,
        }
    }
}

impl FileConfig {
    /// The Parquet settings as written, for the checks and the encoder.
    pub fn parquet_keys(&self) -> Keys<'_> {
        Keys {
            format: self.format,
            codec: self.compression,
            row_group_rows: self.row_group_rows,
            columns: self.columns.as_ref(),
            column_types: self.column_types.as_ref(),
        }
    }

    fn format_problems(&self, out: &mut Vec<(String, String)>) {
        out.extend(self.parquet_keys().problems());
        match self.format {
            Format::Jsonl => {
                for (key, set) in [
                    ("compression", self.compression.is_some()),
                    ("rollover", self.rollover.is_some()),
                ] {
                    if set {
                        out.push((
                            key.into(),
                            "applies to `format: \"parquet\"` only (JSON Lines files are appended batch by batch)".into(),
                        ));
                    }
                }
            }
            Format::Parquet => {
                for (key, set) in [
                    ("rotate_bytes", self.rotate_bytes != default_rotate_bytes()),
                    ("rotate_interval_ms", self.rotate_interval_ms != 0),
                ] {
                    if set {
                        out.push((
                            key.into(),
                            "applies to JSON Lines only: a Parquet file is written whole, one per write; use `rollover` to gather batches into larger files".into(),
                        ));
                    }
                }
                if let Some(r) = &self.rollover {
                    r.problems(out);
                }
            }
        }
    }
}

impl DestinationSettings for FileConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        self.format_problems(&mut out);
        if self.directory.trim().is_empty() {
            out.push(("directory".into(), "must not be empty".into()));
        } else if let Some(why) = crate::sinks::util::path_problem(&self.directory, false) {
            out.push(("directory".into(), why));
        }
        if self.rotate_bytes != 0 && self.rotate_bytes < 4_096 {
            out.push((
                "rotate_bytes".into(),
                format!(
                    "must be 0 (never) or at least 4096, got {}",
                    self.rotate_bytes
                ),
            ));
        }
        if self.rotate_interval_ms != 0 && self.rotate_interval_ms < 1_000 {
            out.push((
                "rotate_interval_ms".into(),
                format!(
                    "must be 0 (never) or at least 1000, got {}",
                    self.rotate_interval_ms
                ),
            ));
        }
        let ok = !self.prefix.is_empty()
            && self.prefix.len() <= 64
            && self
                .prefix
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-');
        if !ok {
            out.push((
                "prefix".into(),
                format!(
                    "must be 1-64 letters, digits, `_` or `-`, got {:?}",
                    self.prefix
                ),
            ));
        }
        out
    }

    fn accumulate(&self) -> Option<Accumulate> {
        match (self.format, &self.rollover) {
            (Format::Parquet, Some(r)) => Some(r.accumulate()),
            _ => None,
        }
    }

    fn rolls_over_by_default(&self) -> bool {
        self.format == Format::Parquet && self.rollover.is_none()
    }

    /// Files are written into the directory.
    fn paths(&self) -> Vec<NamedPath> {
        vec![NamedPath {
            key: "directory".into(),
            path: self.directory.clone(),
            role: PathRole::WritesDirectory,
        }]
    }

    fn describe(&self) -> String {
        match self.format {
            Format::Jsonl => format!(
                "file {} (fsync={}, rotate_bytes={})",
                self.directory, self.fsync, self.rotate_bytes
            ),
            Format::Parquet => format!(
                "file {} (parquet, fsync={}, {})",
                self.directory,
                self.fsync,
                match &self.rollover {
                    Some(r) => format!(
                        "a file per {} messages, {} bytes or {} ms",
                        r.max_messages, r.max_bytes, r.max_age_ms
                    ),
                    None => "default rollover".into(),
                }
            ),
        }
    }

    fn target(&self) -> String {
        format!("file:{}/{}", self.directory, self.prefix)
    }
}

fn default_directory() -> String {
    "data/events".into()
}
fn yes() -> bool {
    true
}
fn default_rotate_bytes() -> u64 {
    128 * 1024 * 1024
}
fn default_prefix() -> String {
    "events".into()
}
