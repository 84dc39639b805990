//! Which format an `s3` destination's objects are in — JSON Lines with its compression,
//! or Parquet with its codec — and the checks that the `compression` value fits the
//! format. Pure.

use super::config::{Compression, S3Config};
use crate::sinks::parquet::{Codec, Format, Keys};

/// The ending of a Parquet object's name.
pub const PARQUET_EXTENSION: &str = "parquet";

impl S3Config {
    /// The compression of JSON Lines objects.
    pub fn jsonl_compression(&self) -> Compression {
        self.compression.unwrap_or_default()
    }

    /// The Parquet settings as written, for the checks and the encoder.
    pub fn parquet_keys(&self) -> Keys<'_> {
        Keys {
            format: self.format,
            codec: match self.compression {
                Some(Compression::Zstd) => Some(Codec::Zstd),
                Some(Compression::Snappy) => Some(Codec::Snappy),
                Some(Compression::None) => Some(Codec::None),
                Some(Compression::Gzip) | None => None,
            },
            row_group_rows: self.row_group_rows,
            columns: self.columns.as_ref(),
            column_types: self.column_types.as_ref(),
        }
    }

    /// The ending of every object's name.
    pub fn extension(&self) -> &'static str {
        match self.format {
            Format::Jsonl => self.jsonl_compression().extension(),
            Format::Parquet => PARQUET_EXTENSION,
        }
    }

    pub(super) fn format_problems(&self, out: &mut Vec<(String, String)>) {
        match (self.format, self.compression) {
            (Format::Jsonl, Some(Compression::Snappy)) => out.push((
                "compression".into(),
                "snappy is for `format: \"parquet\"`; JSON Lines objects take none, gzip or zstd"
                    .into(),
            )),
            (Format::Parquet, Some(Compression::Gzip)) => out.push((
                "compression".into(),
                "Parquet objects take zstd (the default), snappy or none".into(),
            )),
            _ => {}
        }
        out.extend(self.parquet_keys().problems());
    }
}
