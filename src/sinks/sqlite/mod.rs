//! SQLite destination: one table, one transaction per batch, idempotent on the envelope's
//! key, committed in WAL mode before the runner ACKs.
//!
//! It is split so that the parts that decide correctness can be read and tested alone:
//! `classify` is the pure mapping from SQLite errors to retry-or-reject (a wrong answer
//! loses or blocks messages), `schema` owns the table's shape and the check of a table that
//! already exists, `insert` writes a batch in one transaction (and finds the row a refused
//! statement fails on), and `sink` holds the connection lifecycle and the guards against
//! writing into a database file that was moved or deleted while open.

mod classify;
pub mod config;
mod insert;
mod locate;
mod schema;
mod sink;
#[cfg(test)]
mod tests;

pub use classify::classify;
pub use config::{SqliteConfig, SqliteSynchronous};
pub use sink::SqliteSink;
