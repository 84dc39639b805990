//! The JSON Lines file destination's settings and their checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::settings::DestinationSettings;

/// The JSON Lines file destination.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Directory of the `.jsonl` files; created at start-up. Default `data/events`.
    #[serde(default = "default_directory")]
    pub directory: String,
    /// fdatasync after every batch before it is ACKed. Default true; false trades
    /// durability across power loss for speed.
    #[serde(default = "yes")]
    pub fsync: bool,
    /// Start a new file once the current one reaches this size; 0 never rotates by size.
    /// Default 134217728 (128 MiB).
    #[serde(default = "default_rotate_bytes")]
    pub rotate_bytes: u64,
    /// Start a new file after this many milliseconds; 0 (default) never rotates by time.
    #[serde(default)]
    pub rotate_interval_ms: u64,
    /// File name prefix (letters, digits, `_`, `-`). Default `events`.
    #[serde(default = "default_prefix")]
    pub prefix: String,
}

impl DestinationSettings for FileConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
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

    fn describe(&self) -> String {
        format!(
            "file {} (fsync={}, rotate_bytes={})",
            self.directory, self.fsync, self.rotate_bytes
        )
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
