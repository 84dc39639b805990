//! The network database destinations (PostgreSQL, MySQL/MariaDB) as one family: the
//! settings they share, the column mapping from envelopes to a table, and one sink
//! skeleton, generic over a small dialect.
//!
//! What makes a database destination safe is the same for every engine: one connection
//! driven by one task, bounded by timeouts; a connection dropped after any failure that is
//! not about a message's content, so a retry never inherits a half-finished transaction;
//! the table checked again on every reconnect but created only at the first open; the same
//! error meaning "misconfigured" at start-up and "outage" mid-run. That lives once, in
//! [`DatabaseSink`]. A [`Dialect`] supplies only what the engine decides: how to connect
//! and check the table, how a batch is written in one transaction, how stored keys are
//! counted, how one message is looked up for `jetsink trace` (the query itself is
//! [`locate`]'s) and how its errors are classified (`sinks::<engine>::classify`).

pub mod cells;
pub mod columns;
pub mod config;
mod dialect;
pub mod locate;
pub mod newest;
pub mod settings;
mod sink;
mod spread;
pub mod state;
pub(crate) mod tls_files;
pub mod util;

pub use dialect::Dialect;
pub(crate) use settings::database_settings;
pub use settings::{DatabaseSettings, Limits};
pub use sink::DatabaseSink;
