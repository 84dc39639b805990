//! jetsink moves messages from NATS JetStream into durable destinations and ACKs each
//! message only after the destination has committed it.
//!
//! Modules and their roles:
//! - [`config`]: the JSON config, strict parsing, validation with JSON paths.
//! - [`envelope`]: a delivered message normalized for destinations (pure).
//! - [`sinks`]: the `Sink` trait, its error classes, and one folder per destination.
#![deny(missing_docs)]

pub mod config;
pub mod envelope;
pub mod sinks;
