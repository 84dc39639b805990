//! The `s3` destination: each batch becomes JSON Lines objects (the file destination's
//! records, optionally gzip- or zstd-compressed) or Parquet objects
//! ([`crate::sinks::parquet`]) in a bucket of any S3-compatible store, committed when every
//! upload completed.
//!
//! Split so the decisions are tested without a store:
//! - [`config`] holds the settings and their checks (bucket, endpoint, credentials, sizes);
//! - [`format`] (pure) says which format and codec objects are in (JSON Lines or Parquet);
//! - [`key`] (pure) parses the partition template and plans a batch's objects and keys;
//! - [`encode`] (pure) turns records into an object's bytes, incrementally, and back;
//! - [`classify`] (pure) maps a failed request to transient or misconfigured;
//! - `client` builds the `object_store` client and reads the access keys;
//! - `sink` holds [`S3Sink`], the only part doing I/O.
//!
//! # Delivery guarantee
//!
//! At least once, and idempotent per object: an object's key is a function of the stream
//! sequences it holds, so a retried upload, or the same messages redelivered together,
//! overwrite the same object. Redelivered messages in a batch with other boundaries land
//! in a second, overlapping object; readers deduplicate on each record's
//! `idempotency_key` (docs/sinks/s3.md).

pub mod classify;
mod client;
pub mod config;
pub mod encode;
pub mod format;
pub mod key;
mod sink;

pub use config::S3Config;
pub use sink::S3Sink;

#[cfg(test)]
mod tests;
