//! The SQLite destination's settings and their checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::database::config::{default_table, is_sql_identifier};
use crate::sinks::settings::{DestinationSettings, NamedPath, PathRole};

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
    /// Page size of a database file jetsink creates, in bytes: a power of two from 512 to
    /// 65536. An existing database keeps its own (SQLite cannot change it in WAL mode).
    /// Default 32768: with SQLite's own default of 4096 a batch of 4 KiB payloads splits a
    /// page every row or two, and was written about 1.6 times as fast with 32 KiB pages,
    /// 200-byte payloads as fast; 65536 writes 4 KiB payloads faster still but small ones
    /// slower (every commit writes the last, partly filled pages again, whole).
    #[serde(default = "default_page_size")]
    pub page_size: u32,
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

impl DestinationSettings for SqliteConfig {
    fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.path.trim().is_empty() {
            out.push(("path".into(), "must not be empty".into()));
        } else if let Some(why) = crate::sinks::util::path_problem(&self.path, true) {
            out.push(("path".into(), why));
        }
        if !is_sql_identifier(&self.table) {
            out.push((
                "table".into(),
                format!(
                    "must be letters, digits and `_`, not starting with a digit, at most 63 characters, got {:?}",
                    self.table
                ),
            ));
        }
        if !(512..=65_536).contains(&self.page_size) || !self.page_size.is_power_of_two() {
            out.push((
                "page_size".into(),
                format!(
                    "must be a power of two from 512 to 65536, got {}",
                    self.page_size
                ),
            ));
        }
        if self.busy_timeout_ms > 600_000 {
            out.push((
                "busy_timeout_ms".into(),
                format!("must be between 0 and 600000, got {}", self.busy_timeout_ms),
            ));
        }
        out
    }

    /// The database file is written; so are its journal, WAL and shared-memory files
    /// beside it.
    fn paths(&self) -> Vec<NamedPath> {
        ["", "-journal", "-wal", "-shm"]
            .into_iter()
            .map(|end| NamedPath {
                key: "path".into(),
                path: format!("{}{end}", self.path),
                role: PathRole::WritesFile,
            })
            .collect()
    }

    fn describe(&self) -> String {
        format!(
            "sqlite {} table {} (synchronous={})",
            self.path,
            self.table,
            self.synchronous.pragma()
        )
    }

    fn target(&self) -> String {
        format!("sqlite:{}#{}", self.path, self.table)
    }

    /// SQLite always creates its table in jetsink's layout.
    fn with_scratch_table(&self, table: &str) -> Option<Self> {
        Some(Self {
            table: table.to_string(),
            ..self.clone()
        })
    }
}

fn default_sqlite_path() -> String {
    "data/jetsink.db".into()
}
fn default_page_size() -> u32 {
    32_768
}
fn default_busy_timeout_ms() -> u64 {
    5_000
}
