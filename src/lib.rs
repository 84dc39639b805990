//! jetsink moves messages from NATS JetStream into durable destinations and ACKs each
//! message only after the destination has committed it.
//!
//! Modules and their roles:
//! - [`config`]: the JSON config, strict parsing, validation with JSON paths.
//! - [`envelope`]: a delivered message normalized for destinations (pure).
//! - [`crypto`]: payload encryption at rest: key ring, sealed format, the encryption stage.
//! - [`metadata`]: priority, classification and labels from headers and subject rules (pure).
//! - [`nats`]: connecting, binding stream and consumer, pulling bounded batches.
//! - [`pipeline`]: retry policy and the per-sink runner, the only code that ACKs.
//! - [`sinks`]: the `Sink` trait, its error classes, one folder per destination (its
//!   settings included), and the registry that lists them.
//! - [`dlq`]: dead-letter copies and the max-deliveries advisory listener.
//! - [`jobs`]: job-queue mode: job ids, results, and their publication before the ACK;
//!   the client side (publish a job, wait for its result) shared by `submit` and [`api`].
//! - [`api`]: the synchronous HTTP job API (opt-in `api` section).
//! - [`metrics`], [`health`], [`server`]: Prometheus metrics, liveness/readiness, HTTP.
//! - [`cmd`]: one module per command of the `jetsink` binary: `run` (the daemon's
//!   wiring), `quickstart`, `validate`, `schema`, `publish` (the test publisher), `bench`
//!   (the benchmark against the bare-consumer ceiling), `submit`, `metrics show`,
//!   `decrypt`, `keygen`, `dlq replay`; and `cli`, the command tree `main.rs` calls.
//! - [`notify`]: systemd readiness, stopping and watchdog notifications.
//! - [`logging`], [`exit`]: log setup and process exit codes.
#![deny(missing_docs)]

pub mod api;
pub mod cmd;
pub mod config;
pub mod crypto;
pub mod dlq;
pub mod envelope;
pub mod exit;
pub mod health;
pub mod jobs;
pub mod logging;
pub mod metadata;
pub mod metrics;
pub mod nats;
pub mod notify;
pub mod pipeline;
pub mod server;
pub mod sinks;
