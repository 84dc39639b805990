//! [`Dialect`]: the engine-specific half of a database destination. [`DatabaseSink`]
//! (the other half) owns the connection lifecycle and calls these methods one at a time
//! from the sink's task.
//!
//! [`DatabaseSink`]: super::DatabaseSink

use std::future::Future;
use std::time::Duration;

use super::locate::Query;
use super::settings::DatabaseSettings;
use super::util::Phase;
use crate::envelope::Envelope;
use crate::sinks::contract::{Located, Probe, SinkError};
use crate::sinks::database::columns::{Mapping, TablePlan};

/// What one database engine decides; everything else is [`DatabaseSink`]'s.
///
/// Errors are already classified ([`SinkError`]) by the engine's `classify`, with the
/// `phase` they happened in; the sink adds the destination's name as context.
///
/// [`DatabaseSink`]: super::DatabaseSink
pub trait Dialect: Send + Sync + Sized + 'static {
    /// The destination's config section.
    type Config: DatabaseSettings + Send + Sync;
    /// A live connection and what was checked and prepared on it for the table.
    type Conn: Send;
    /// The engine's name as log lines and error messages spell it (`postgres`, `mysql`).
    const NAME: &'static str;
    /// Time a write may take beyond the statement timeout: the commit and the round trips
    /// around the statement that the server's own timeout does not cover.
    const WRITE_GRACE: Duration;

    /// The dialect for `config`. Does no I/O.
    fn new(config: Self::Config) -> Self;

    /// Connects, checks the table against `mapping` (creating the default table only in
    /// [`Phase::Open`]) and prepares what writes need.
    fn connect(
        &self,
        mapping: &Mapping,
        phase: Phase,
    ) -> impl Future<Output = Result<Self::Conn, SinkError>> + Send;

    /// Connects and checks the table against `mapping` as [`Dialect::connect`] does at
    /// start-up, creating and writing nothing: the table is ready, would be created, or
    /// is refused (errors classified as at start-up).
    fn probe(&self, mapping: &Mapping) -> impl Future<Output = Result<Probe, SinkError>> + Send;

    /// Writes and commits `batch` (never empty) as one transaction: all rows or none.
    fn write(
        &self,
        conn: &mut Self::Conn,
        batch: &[Envelope],
    ) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// A cheap round trip proving the connection still works.
    fn ping(&self, conn: &mut Self::Conn) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Distinct values of column `key` among rows whose column `stream_column` is `stream`.
    fn count_keys(
        &self,
        conn: &mut Self::Conn,
        key: &str,
        stream_column: &str,
        stream: &str,
    ) -> impl Future<Output = Result<u64, SinkError>> + Send;

    /// Drops the table (`DROP TABLE IF EXISTS`), for a bench's scratch table only.
    fn drop_table(
        &self,
        conn: &mut Self::Conn,
    ) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Runs `query` among `stream`'s rows on a connection of its own that creates, locks
    /// and writes nothing (a missing table is [`Located::Absent`]), for `jetsink trace`.
    fn locate(
        &self,
        query: &Query<'_>,
        stream: &str,
    ) -> impl Future<Output = Result<Located, SinkError>> + Send;

    /// The plan the connection writes by, as checked against the table when it connected.
    fn plan(conn: &Self::Conn) -> &TablePlan;

    /// Whether the server or the network closed the connection, so that even a content
    /// error must drop it. `false` when the engine cannot tell.
    fn is_closed(_conn: &Self::Conn) -> bool {
        false
    }

    /// Lets go of a connection being replaced by a reconnect. Dropping it is the default;
    /// an engine may say goodbye to the server in the background instead.
    fn retire(conn: Self::Conn) {
        drop(conn);
    }
}
