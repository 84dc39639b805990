//! `jetsink decrypt`'s Parquet input: a Parquet file written by the `s3` or `file`
//! destination (`format: "parquet"`), read into the same JSON records the other inputs
//! give — every column of a row, the payload as base64 — so the rest of the command
//! treats it like a database export. Kept apart from `decrypt.rs` so that file only
//! chooses the input.

use std::path::Path;

use serde_json::{Map, Value};

use crate::sinks::parquet::read::{is_parquet, rows};

/// The records of a file, each a JSON object or why it could not be read.
pub type Records = Vec<Result<Map<String, Value>, String>>;

/// The records of the Parquet file at `path`; `None` when the input is stdin or a file
/// that is not Parquet (the JSON inputs take it then).
pub fn records(path: Option<&Path>) -> Option<Result<Records, String>> {
    let path = path.filter(|p| p.as_os_str() != "-")?;
    let mut head = [0u8; 4];
    let mut file = std::fs::File::open(path).ok()?;
    std::io::Read::read_exact(&mut file, &mut head).ok()?;
    if &head != crate::sinks::parquet::read::MAGIC {
        return None;
    }
    Some(
        std::fs::read(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))
            .and_then(|data| {
                if !is_parquet(&data) {
                    return Err(format!("{} is not a whole Parquet file", path.display()));
                }
                let rows = rows(data.into()).map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(rows
                    .into_iter()
                    .map(|row| row.map_err(|e| e.to_string()))
                    .collect())
            }),
    )
}
