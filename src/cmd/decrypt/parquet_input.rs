//! `jetsink decrypt`'s Parquet input: a Parquet file written by the `s3` or `file`
//! destination (`format: "parquet"`), read into the same JSON records the other inputs
//! give — every column of a row, the payload as base64 — so the rest of the command
//! treats it like a database export. The file's bytes come from the one bounded reader
//! ([`super::input`]); kept apart from `decrypt.rs` so that file only decrypts.

use serde_json::{Map, Value};

use crate::sinks::parquet::read::{is_parquet, rows};

/// The first bytes of every Parquet file.
pub const MAGIC: &[u8; 4] = crate::sinks::parquet::read::MAGIC;

/// The records of a file, each a JSON object or why it could not be read.
pub type Records = Vec<Result<Map<String, Value>, String>>;

/// The records of the Parquet file `data`, read from `shown`.
pub fn records(data: Vec<u8>, shown: &str) -> Result<Records, String> {
    if !is_parquet(&data) {
        return Err(format!("{shown} is not a whole Parquet file"));
    }
    let rows = rows(data.into()).map_err(|e| format!("{shown}: {e}"))?;
    Ok(rows
        .into_iter()
        .map(|row| row.map_err(|e| e.to_string()))
        .collect())
}
