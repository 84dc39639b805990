//! Destination settings, one struct per destination type.
//!
//! The `destination` object is dispatched on its `type` key by hand rather than through an
//! internally tagged serde enum, because serde buffers tagged content and would lose the
//! JSON path of an error inside it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{deserialize_at, Issue};

/// Where a sink writes. Selected by `type`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DestinationConfig {
    /// An embedded SQLite database, one transaction per batch.
    Sqlite(SqliteConfig),
    /// JSON Lines files, appended and fdatasync'd once per batch.
    File(FileConfig),
}

impl DestinationConfig {
    /// The `type` value, for summaries and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            DestinationConfig::Sqlite(_) => "sqlite",
            DestinationConfig::File(_) => "file",
        }
    }

    /// A short human description (no secrets) for `validate` and start-up logs.
    pub fn describe(&self) -> String {
        match self {
            DestinationConfig::Sqlite(c) => {
                format!(
                    "sqlite {} table {} (synchronous={})",
                    c.path,
                    c.table,
                    c.synchronous.pragma()
                )
            }
            DestinationConfig::File(c) => format!(
                "file {} (fsync={}, rotate_bytes={})",
                c.directory, c.fsync, c.rotate_bytes
            ),
        }
    }
}

/// Destination types a later release adds; naming one is "not supported yet", not "unknown".
const PLANNED: &[&str] = &["postgres", "mysql", "http", "s3", "nats"];

/// Reads a `destination` object found at `path`.
pub fn parse(path: &str, value: Value) -> Result<DestinationConfig, Issue> {
    let kind = match value.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(Issue {
                path: format!("{path}.type"),
                message: format!("must be a string, got {other}"),
            })
        }
        None if value.is_object() => {
            return Err(Issue {
                path: path.to_string(),
                message: "missing `type` (one of: sqlite, file)".into(),
            })
        }
        None => {
            return Err(Issue {
                path: path.to_string(),
                message: format!("must be an object with a `type`, got {value}"),
            })
        }
    };
    let mut body = value;
    if let Some(obj) = body.as_object_mut() {
        obj.remove("type");
    }
    match kind.as_str() {
        "sqlite" => deserialize_at(path, body).map(DestinationConfig::Sqlite),
        "file" => deserialize_at(path, body).map(DestinationConfig::File),
        k if PLANNED.contains(&k) => Err(Issue {
            path: format!("{path}.type"),
            message: format!(
                "destination type `{k}` is not supported yet (supported: sqlite, file)"
            ),
        }),
        k => Err(Issue {
            path: format!("{path}.type"),
            message: format!("unknown destination type `{k}` (supported: sqlite, file)"),
        }),
    }
}

/// The embedded SQLite destination.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SqliteConfig {
    /// Database file; its directory is created at start-up. Default `data/jetsink.db`.
    #[serde(default = "default_sqlite_path")]
    pub path: String,
    /// Table name (letters, digits, `_`; not starting with a digit), created when missing.
    /// Default `jetsink_events`.
    #[serde(default = "default_table")]
    pub table: String,
    /// SQLite `synchronous` pragma: `off`, `normal`, `full` (default) or `extra`. Only `full`
    /// and `extra` make a commit survive power loss in WAL mode.
    #[serde(default)]
    pub synchronous: SqliteSynchronous,
    /// How long a write waits for a lock held by another process, in milliseconds.
    /// Default 5000.
    #[serde(default = "default_busy_timeout_ms")]
    pub busy_timeout_ms: u64,
}

/// SQLite durability level.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SqliteSynchronous {
    /// No syncs: fast, a crash of the OS can lose committed batches.
    Off,
    /// Syncs at checkpoints only: a power loss can lose the last commits.
    Normal,
    /// Syncs every commit.
    #[default]
    Full,
    /// Like `full`, and also syncs the directory.
    Extra,
}

impl SqliteSynchronous {
    /// The pragma value.
    pub fn pragma(self) -> &'static str {
        match self {
            SqliteSynchronous::Off => "OFF",
            SqliteSynchronous::Normal => "NORMAL",
            SqliteSynchronous::Full => "FULL",
            SqliteSynchronous::Extra => "EXTRA",
        }
    }
}

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

fn default_sqlite_path() -> String {
    "data/jetsink.db".into()
}
fn default_table() -> String {
    "jetsink_events".into()
}
fn default_busy_timeout_ms() -> u64 {
    5_000
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
