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
//! - `sink` holds [`S3Sink`], which uploads, and `stored` the look into a partition folder
//!   for messages delivered again that it already holds: the only parts doing I/O.
//!
//! # Delivery guarantee
//!
//! At least once, and idempotent per object: an object's key is a function of the stream
//! sequences it holds, so a retried upload, or the same messages redelivered together,
//! overwrite the same object. Redelivered messages in a batch with other boundaries are
//! looked for in their partition folder first, and those found are committed without
//! being written again, so each message is in one object (the limits of that look, which
//! always err towards writing again: docs/sinks/s3.md, "Idempotency and duplicates").

pub mod classify;
mod client;
pub mod config;
pub mod encode;
pub mod format;
pub mod key;
mod sink;
mod stored;

pub use config::S3Config;
pub use sink::S3Sink;

#[cfg(test)]
mod tests;
