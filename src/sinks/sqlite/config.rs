//! The SQLite destination's settings and their checks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sinks::database::config::{default_table, is_sql_identifier};
use crate::sinks::settings::DestinationSettings;

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
        if self.busy_timeout_ms > 600_000 {
            out.push((
                "busy_timeout_ms".into(),
                format!("must be between 0 and 600000, got {}", self.busy_timeout_ms),
            ));
        }
        out
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
}

fn default_sqlite_path() -> String {
    "data/jetsink.db".into()
}
fn default_busy_timeout_ms() -> u64 {
    5_000
}
