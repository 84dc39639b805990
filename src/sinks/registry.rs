//! The one list of destinations. Each line of the [`destinations!`] invocation below names
//! a destination's variant, its `type` string, its config type and its sink type; from that
//! line alone the macro generates the [`DestinationConfig`] variant, the `type` dispatch of
//! the config loader, [`KINDS`] (every "supported: ..." message), `kind()`, `describe()`,
//! `target()` (the conflict check), the destination checks, and [`build`].
//!
//! Every generated `match` is exhaustive and nothing dispatches on the `type` string
//! outside this file, so a destination half-added is a compile error, not a config that
//! loads and then fails. What a destination must provide is a config type implementing
//! [`DestinationSettings`] (in its `config.rs`) and a sink type with
//! `new(config) -> Self` implementing [`Sink`]. See "Adding a destination" in
//! docs/architecture.md.
//!
//! The list lives here and not in `config/` because it names the sinks: `config/` imports
//! the enum, and nothing the sinks import leads back to `config/`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::settings::DestinationSettings;
use super::Sink;
use crate::config::issue::{deserialize_at, Issue};

/// Generates everything that depends on the list of destinations from that list.
macro_rules! destinations {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $kind:literal: $config:ty => $sink:ty;
    )*) => {
        /// Where a sink writes. Selected by `type`.
        #[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
        #[serde(tag = "type")]
        pub enum DestinationConfig {
            $(
                $(#[$doc])*
                #[serde(rename = $kind)]
                $variant($config),
            )*
        }

        /// Every supported `type`, in registration order.
        pub const KINDS: &[&str] = &[$($kind),*];

        impl DestinationConfig {
            /// The `type` value, for summaries and logs.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(DestinationConfig::$variant(_) => $kind,)*
                }
            }

            /// The destination's own settings, through what the config loader needs of
            /// them.
            fn settings(&self) -> &dyn DestinationSettings {
                match self {
                    $(DestinationConfig::$variant(c) => c,)*
                }
            }

            /// Reads the body of a `destination` object (its `type` removed) as the
            /// destination `kind`; `None` when no destination has that `type`.
            pub(crate) fn deserialize(
                kind: &str,
                path: &str,
                body: Value,
            ) -> Option<Result<DestinationConfig, Issue>> {
                match kind {
                    $($kind => Some(deserialize_at(path, body).map(DestinationConfig::$variant)),)*
                    _ => None,
                }
            }
        }

        /// Builds the destination a config describes. Nothing is opened yet.
        pub fn build(config: &DestinationConfig) -> Box<dyn Sink> {
            match config {
                $(DestinationConfig::$variant(c) => Box::new(<$sink>::new(c.clone())),)*
            }
        }
    };
}

destinations! {
    /// An embedded SQLite database, one transaction per batch.
    Sqlite = "sqlite": crate::sinks::sqlite::config::SqliteConfig => crate::sinks::sqlite::SqliteSink;
    /// JSON Lines files, appended and fdatasync'd once per batch.
    File = "file": crate::sinks::file::config::FileConfig => crate::sinks::file::FileSink;
    /// A PostgreSQL table, one transaction per batch.
    Postgres = "postgres": crate::sinks::postgres::config::PostgresConfig => crate::sinks::postgres::PostgresSink;
    /// A MySQL or MariaDB table, one transaction per batch.
    Mysql = "mysql": crate::sinks::mysql::config::MysqlConfig => crate::sinks::mysql::MysqlSink;
}

/// Destination types a later release adds; naming one is "not supported yet", not
/// "unknown". Adding one of them moves its name from here to a line of the list above.
pub const PLANNED: &[&str] = &["http", "s3", "nats"];

impl DestinationConfig {
    /// A short human description (no secrets) for `validate` and start-up logs.
    pub fn describe(&self) -> String {
        self.settings().describe()
    }

    /// A stable, secret-free name of what is written to; two sinks with the same target
    /// conflict.
    pub fn target(&self) -> String {
        self.settings().target()
    }

    /// Every problem of the settings as `(key, message)`, the key relative to the
    /// destination object.
    pub fn problems(&self) -> Vec<(String, String)> {
        self.settings().problems()
    }
}
