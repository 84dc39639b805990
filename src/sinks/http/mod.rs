//! The `http` destination: each batch is sent to one endpoint — one request per batch
//! (`ndjson` or a JSON array of records) or one request per message, several at a time —
//! and committed when the endpoint answers 2xx.
//!
//! Split so the decisions are tested without a network:
//! - [`config`] holds the settings and their checks (URL scheme, headers, timeouts);
//! - [`classify`] (pure) maps a status code to committed / transient / permanent /
//!   misconfigured, and reads `Retry-After`;
//! - [`body`] (pure) builds request bodies from the file destination's records and derives
//!   a batch's idempotency key;
//! - `client` builds the pooled client, its TLS and the headers (reading secret ones);
//! - `sink` holds [`HttpSink`], the only part doing I/O.
//!
//! # Delivery guarantee
//!
//! At least once. Every request carries an idempotency header (`Idempotency-Key` by
//! default): the message's `idempotency_key` per message, or for a batch
//! `<stream>:<lowest>-<highest>:<count>` of its stream sequences. A request the endpoint
//! accepted but whose answer was lost, or a message redelivered for any other reason, is
//! sent again with the same key; the receiver deduplicates on it (or, for batches, on
//! each record's `idempotency_key`).

pub mod body;
pub mod classify;
mod client;
pub mod config;
mod sink;

pub use config::HttpConfig;
pub use sink::HttpSink;

#[cfg(test)]
mod tests;
