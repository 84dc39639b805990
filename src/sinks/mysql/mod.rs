//! MySQL / MariaDB destination: one table, one transaction per batch, idempotent on a
//! unique key, committed before the runner ACKs.
//!
//! Split like the PostgreSQL destination: `classify` is the pure error-number →
//! retry-or-reject mapping (and reads the failing row out of data errors), `schema` owns
//! the DDL, catalog queries, type classes and generated SQL, `encode` turns envelopes into
//! parameter rows (refusing content it can check itself, by index), `tls` checks the TLS
//! files before the driver reads them, and `sink` is the
//! [`Dialect`]: connection options, the table check and the write path. The connection
//! lifecycle shared with PostgreSQL is
//! [`DatabaseSink`](crate::sinks::database::DatabaseSink); the column mapping and table
//! check shared with PostgreSQL live in `sinks::database::columns`.
//!
//! [`Dialect`]: crate::sinks::database::Dialect

mod catalog;
mod classify;
pub mod config;
mod encode;
mod locate;
mod schema;
mod sink;
#[cfg(test)]
mod tests;
mod tls;
mod upgrade;
mod write;

pub use classify::{class_of, classify, row_of, Class, Rows};
pub use config::{MysqlConfig, MysqlPayloadType};
pub use sink::{Mysql, MysqlSink};
