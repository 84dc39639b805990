//! PostgreSQL destination: one table, one transaction per batch, idempotent on a unique
//! key, committed before the runner ACKs.
//!
//! Split so the parts that decide correctness can be read and tested alone: `classify` is
//! the pure SQLSTATE → retry-or-reject mapping, `schema` owns the DDL, the catalog queries,
//! the type classes and the generated SQL, `encode` turns a batch into bindable column
//! arrays (refusing content it can check itself, by index), and `sink` is the [`Dialect`]
//! over three parts: `connection` (connecting, the session settings, the driver task that
//! takes the server's notices), `table` (finding or creating the table and checking it
//! against the mapping) and `write` (the two write paths: multi-row `INSERT` from arrays,
//! binary `COPY`), with `tls` building the TLS client configuration (trusted CAs, the
//! client certificate). The connection lifecycle shared with MySQL is
//! [`DatabaseSink`](crate::sinks::database::DatabaseSink); the column mapping and table
//! check shared with MySQL live in `sinks::database::columns`.
//!
//! [`Dialect`]: crate::sinks::database::Dialect

mod classify;
pub mod config;
mod connection;
mod encode;
mod locate;
mod schema;
mod sink;
mod table;
#[cfg(test)]
mod tests;
mod tls;
mod write;

pub use classify::{class_of, classify, Class};
pub use config::{PostgresConfig, PostgresPayloadType};
pub use sink::{Postgres, PostgresSink};
