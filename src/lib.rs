//! jetsink moves messages from NATS JetStream into durable destinations and ACKs each
//! message only after the destination has committed it.
//!
//! Modules and their roles:
//! - [`config`]: the JSON config, strict parsing, validation with JSON paths.
//! - [`envelope`]: a delivered message normalized for destinations (pure).
//! - [`metadata`]: priority, classification and labels from headers and subject rules (pure).
//! - [`nats`]: connecting, binding stream and consumer, pulling bounded batches.
//! - [`pipeline`]: retry policy and the per-sink runner, the only code that ACKs.
//! - [`sinks`]: the `Sink` trait, its error classes, one folder per destination (its
//!   settings included), and the registry that lists them.
//! - [`dlq`]: dead-letter copies, the max-deliveries advisory listener, replay.
//! - [`metrics`], [`health`], [`server`]: Prometheus metrics, liveness/readiness, HTTP.
//! - [`metrics_show`]: `jetsink metrics show`, reading a running daemon's `/metrics`.
//! - [`app`]: `jetsink run` wiring; [`publish`]: the test publisher; [`bench`]: the
//!   benchmark against the bare-consumer ceiling.
//! - [`logging`], [`exit`]: log setup and process exit codes.
#![deny(missing_docs)]

pub mod app;
pub mod bench;
pub mod config;
pub mod dlq;
pub mod envelope;
pub mod exit;
pub mod health;
pub mod logging;
pub mod metadata;
pub mod metrics;
pub mod metrics_show;
pub mod nats;
pub mod pipeline;
pub mod publish;
pub mod server;
pub mod sinks;
