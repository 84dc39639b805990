//! The settings every database destination shares, read by the shared sink without
//! knowing the engine: where rows go, the write mode, the column mapping and the time
//! limits of each kind of call.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::sinks::database::config::WriteMode;
use crate::sinks::database::state::State;

/// How long each kind of call may take before the sink gives up on it and drops the
/// connection. Bounded calls are what keep a hung server from holding a batch past
/// AckWait without the runner noticing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connecting, checking (and the first time creating) the table, preparing.
    pub connect: Duration,
    /// Writing and committing one batch.
    pub write: Duration,
    /// One health probe on a live connection.
    pub health: Duration,
}

/// The settings every database destination's config has under the same names, so the
/// shared sink reads them without knowing the engine.
pub trait DatabaseSettings {
    /// Where rows go, for log lines and error context.
    fn target(&self) -> String;
    /// The configured write mode, logged at the first open.
    fn mode(&self) -> WriteMode;
    /// The `columns` mapping, `None` for the jetsink layout.
    fn columns(&self) -> Option<&BTreeMap<String, String>>;
    /// What an upsert keeps: its order and its delete marker, with the mode and columns.
    fn state(&self) -> State<'_>;
    /// The time limits, with `write_grace` added to the statement timeout for a write.
    fn limits(&self, write_grace: Duration) -> Limits;
    /// How many connections a batch may be spread over (`connections`).
    fn connections(&self) -> usize;
}

/// Implements [`DatabaseSettings`] for a config type with the shared field names
/// (`mode`, `columns`, `order`, `delete`, `connect_timeout_ms`, `statement_timeout_ms`,
/// `connections`) and a `target()`.
macro_rules! database_settings {
    ($config:ty) => {
        impl $crate::sinks::database::settings::DatabaseSettings for $config {
            fn target(&self) -> String {
                <$config>::target(self)
            }
            fn mode(&self) -> $crate::sinks::database::config::WriteMode {
                self.mode
            }
            fn columns(&self) -> Option<&std::collections::BTreeMap<String, String>> {
                self.columns.as_ref()
            }
            fn state(&self) -> $crate::sinks::database::state::State<'_> {
                $crate::sinks::database::state::State {
                    mode: self.mode,
                    columns: self.columns.as_ref(),
                    order: self.order.as_ref(),
                    delete: self.delete.as_ref(),
                }
            }
            fn connections(&self) -> usize {
                self.connections as usize
            }
            fn limits(
                &self,
                write_grace: std::time::Duration,
            ) -> $crate::sinks::database::settings::Limits {
                let connect = std::time::Duration::from_millis(self.connect_timeout_ms);
                let statement = std::time::Duration::from_millis(self.statement_timeout_ms);
                $crate::sinks::database::settings::Limits {
                    connect: connect + statement,
                    write: statement + write_grace,
                    health: connect,
                }
            }
        }
    };
}
pub(crate) use database_settings;
