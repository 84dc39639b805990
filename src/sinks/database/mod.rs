//! The database sink family (PostgreSQL, MySQL/MariaDB): the settings they share, the column
//! mapping from envelopes to a table, and the values written into each column.

pub mod cells;
pub mod columns;
pub mod config;
