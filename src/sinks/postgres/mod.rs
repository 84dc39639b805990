//! PostgreSQL destination: one table, one transaction per batch, idempotent on a unique
//! key, committed before the runner ACKs.
//!
//! Split so the parts that decide correctness can be read and tested alone: `classify` is
//! the pure SQLSTATE → retry-or-reject mapping, `schema` owns the DDL, the catalog queries,
//! the type classes and the generated SQL, `encode` turns a batch into bindable column
//! arrays (refusing content it can check itself, by index), and `sink` is the [`Dialect`]:
//! connecting, the table check and the two write paths (multi-row `INSERT` from arrays,
//! binary `COPY`), with `tls` building the TLS client configuration (trusted CAs, the client
//! certificate). The connection lifecycle shared with MySQL is
//! [`DatabaseSink`](crate::sinks::database::DatabaseSink); the column mapping and table
//! check shared with MySQL live in `sinks::database::columns`.
//!
//! [`Dialect`]: crate::sinks::database::Dialect

mod classify;
pub mod config;
mod encode;
mod schema;
mod sink;
#[cfg(test)]
mod tests;
mod tls;

pub use classify::{class_of, classify, Class};
pub use config::{PostgresConfig, PostgresPayloadType};
pub use sink::{Postgres, PostgresSink};
