//! Destinations ("sinks"): the [`Sink`] trait every destination implements, its error
//! classes, and the one list of destinations, from which [`registry`]'s macro generates
//! their modules, [`DestinationConfig`] and [`build`].
//!
//! A sink writes and commits; it never ACKs and never sees a NATS message. The runner
//! (`pipeline::runner`) turns each outcome into ACK, retry or rejection. A new destination
//! is one folder here (its `config.rs` and its `impl Sink`) and one line in the
//! `destinations!` list below — nothing else.

pub mod blocking;
pub mod contract;
pub mod database;
pub mod parquet;
mod registry;
pub mod settings;
pub mod util;

registry::destinations! {
    /// An embedded SQLite database, one transaction per batch.
    Sqlite = "sqlite" in sqlite: SqliteConfig => SqliteSink;
    /// JSON Lines files, appended and fdatasync'd once per batch.
    File = "file" in file: FileConfig => FileSink;
    /// A PostgreSQL table, one transaction per batch.
    Postgres = "postgres" in postgres: PostgresConfig => PostgresSink;
    /// A MySQL or MariaDB table, one transaction per batch.
    Mysql = "mysql" in mysql: MysqlConfig => MysqlSink;
    /// A JetStream stream fed one copy of each message, on the same or other servers.
    Nats = "nats" in nats: NatsRepublishConfig => NatsRepublishSink;
    /// An HTTP endpoint, one request per batch or per message, committed on 2xx.
    Http = "http" in http: HttpConfig => HttpSink;
    /// A program run once per message (a job), payload on stdin; exit 0 commits it.
    Exec = "exec" in exec: ExecConfig => ExecSink;
    /// Objects in a bucket of any S3-compatible store, one JSON Lines object per batch.
    S3 = "s3" in s3: S3Config => S3Sink;
}

/// Destination types a later release adds; naming one is "not supported yet", not
/// "unknown". Adding one of them moves its name from here to a line of the list above.
pub const PLANNED: &[&str] = &[];

pub use contract::{
    CutShort, ErrorClass, Feed, Located, Outcome, Output, Probe, Sink, SinkError, Wanted, Written,
};
